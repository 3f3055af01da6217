"""The package's shape: imports that only run downwards (registry <- core <- plugins <- run <- CLI) and no import
cycles, counting imports anywhere in a file and the parent packages every import runs; plugin registration that
never loads torch. (No line cap: modules are split along seams, not to fit a number.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "rlplug"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported_modules(name: str, path: Path) -> set[str]:
    """The rlplug modules ``path`` imports anywhere in its body, except under ``if TYPE_CHECKING:`` (never run)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:  # `from package import module` imports the module
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found = {module for module in found if module in MODULES}
    # importing rlplug.a.b runs rlplug/__init__.py and rlplug/a/__init__.py first; a module's own parents are
    # already under way when it runs, so they are no edge of its own
    found |= {parent for module in found for parent in parents(module)}
    return found - {name} - parents(name)


def parents(name: str) -> set[str]:
    """The packages whose ``__init__`` importing ``name`` runs first."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


#: the layers, lowest first: a module may import its own layer and those below it, never one above
LAYERS = (
    ("rlplug.errors", "rlplug.version"),
    ("rlplug.registry", "rlplug"),                                  # the public face re-exports the registry's
    ("rlplug.core", "rlplug.networks", "rlplug.envs", "rlplug.functional"),  # shared by kinds; public faces
    ("rlplug.plugins", "rlplug.algorithms"),                         # rlplug.algorithms: the kit's public face
    ("rlplug.recipe",),                                             # a recipe validated against loaded plugins
    ("rlplug.run", "rlplug.agent"),
    ("rlplug.cli", "rlplug.__main__"),
)
#: imports that go upwards on purpose, each with its reason
UPWARD = {
    ("rlplug", "rlplug.agent"): "rlplug.Agent is handed out on first use: `rlplug list` must not load torch",
    ("rlplug", "rlplug.core.make"): "rlplug.make is handed out on first use, as Agent is",
    ("rlplug", "rlplug.core"): "the package of rlplug.core.make",
}


def layer(name: str) -> int:
    """The index in LAYERS of the longest prefix naming ``name`` or a package above it."""
    best, depth = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = index, prefix.count(".")
    assert best >= 0, f"{name} is in no layer of test_layout.LAYERS: add it where it belongs"
    return best


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as the list of its modules, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycles():
    graph = {name: imported_modules(name, path) for name, path in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_imports_only_run_downwards():
    upward = [f"{name} imports {target}" for name, path in sorted(MODULES.items())
              for target in sorted(imported_modules(name, path))
              if layer(target) > layer(name) and (name, target) not in UPWARD]
    assert not upward, "imports that climb a layer (registry <- core <- plugins <- run <- CLI): " + "; ".join(upward)


def test_imports_count_parents_and_late_imports(tmp_path):
    """A late import inside a function is seen, and importing rlplug.a.b counts rlplug.a."""
    assert "rlplug.core.observations" in imported_modules("rlplug.core.envs", MODULES["rlplug.core.envs"])
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from rlplug.run.trainer import Run\n")
    found = imported_modules("rlplug.core.probe", source)
    assert {"rlplug.run.trainer", "rlplug.run"} <= found
    assert layer("rlplug.run.trainer") > layer("rlplug.core.probe")


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_listing_and_validating_never_load_torch():
    script = ("import sys, rlplug.recipe as r\n"
              "r.load('recipes/cartpole-ppo.toml')\n"
              "print(sorted(m for m in ('torch', 'torchrl', 'tensordict') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], cwd=PACKAGE.parent, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_each_hookspec_states_the_context_its_kind_is_given():
    """One list of context names per kind (``hookspecs.CONTEXT``), the same in each hook's docstring and in
    docs/writing-plugins.md's table."""
    import re

    from rlplug.registry import hookspecs

    docs = (PACKAGE.parent / "docs" / "writing-plugins.md").read_text()
    for kind, hook in hookspecs.HOOKS.items():
        doc = getattr(hookspecs, hook).__doc__
        line = re.search(r"Context: (.*?)(?:\.|\n\n|$)", doc, re.S).group(1)
        assert re.findall(r"``(\w+)``", line) == list(hookspecs.CONTEXT[kind]), hook
        row = re.search(rf"^\| `{hook}` \|.*$", docs, re.M)
        assert row, f"docs/writing-plugins.md has no row for {hook}"
        assert re.findall(r"`(\w+)`", row.group(0).split("|")[-2]) == list(hookspecs.CONTEXT[kind]), hook


def test_the_run_layer_knows_an_algorithm_only_by_its_protocol():
    """What may change live, whether seeds batch, what the run checkpoints, what Ray's gradient workers, learners
    and replay storages need: protocol members, so that a plugin's algorithm gets what a built-in gets; nothing
    that drives runs (the run layer, the CLI, the Python API, the runners) imports the built-in algorithms or the
    kit."""
    drivers = [name for name in MODULES if name.startswith(("rlplug.run", "rlplug.cli", "rlplug.plugins.runners"))
               or name == "rlplug.agent"]
    reaching = sorted(f"{name} imports {target}" for name in drivers
                      for target in imported_modules(name, MODULES[name])
                      if target.startswith(("rlplug.plugins.algorithms", "rlplug.algorithms")))
    assert not reaching, "; ".join(reaching)
