"""``rlplug init ALGORITHM --env ENV``: a complete recipe with every key at its default, each under a comment
giving its type and meaning. It is built through the same validation as ``rlplug run``, written with
tomli_w, and read back and validated before it is printed, so what comes out runs as it is."""

from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from rlplug.registry.components import Network
from rlplug.registry.docs import ParamDoc, component_kind, describe, inline_toml, settings_docs


def add_commands(subparsers) -> None:
    """Adds ``init``."""
    init = subparsers.add_parser(
        "init", help="print a complete, commented recipe with every default filled in",
        description="Print (to stdout) a recipe for ALGORITHM on ENV with every key at its default, each with "
                    "a comment giving its type and meaning. It runs as it is: "
                    "python -m rlplug init ppo --env CartPole-v1 > my.toml && python -m rlplug run my.toml")
    init.add_argument("algorithm", metavar="ALGORITHM", help="an algorithm name (python -m rlplug list)")
    init.add_argument("--env", required=True, metavar="ENV",
                      help="a gymnasium id (CartPole-v1), or the name of a registered env component (corridor)")
    init.add_argument("--network", metavar="NETWORK",
                      help="the network for every network the algorithm takes (policy, critic); "
                           "default: the algorithm's own defaults")
    init.set_defaults(handler=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    from rlplug.registry import get_registry

    registry = get_registry()
    registry.report_failures()
    sys.stdout.write(init_recipe(args.algorithm, args.env, network=args.network, registry=registry))
    return 0


def init_recipe(algorithm: str, env: str, *, network: str | None = None, registry=None) -> str:
    """A complete recipe for ``algorithm`` on ``env`` with every default written out and commented.

    Built as ``{"use": name}`` tables and validated exactly as ``rlplug run`` validates a recipe; the text
    is parsed and validated once more before it is returned, so what comes out runs as it is.
    """
    import tomllib

    from rlplug.errors import ComponentError, UserError
    from rlplug.recipe import EvalSettings, RunSettings, validate
    from rlplug.registry import get_registry, resolve
    from rlplug.registry.components import Env
    from rlplug.version import __version__

    registry = registry or get_registry()
    algorithm_spec = registry.lookup("algorithm", algorithm)
    try:
        registry.lookup("env", env)
        env_table: dict[str, Any] = {"use": env}  # a registered env component, e.g. a plugin's
    except ComponentError:
        env_table = {"use": "gym", "id": env}
    try:
        resolve(Env, env_table, registry=registry)
    except UserError as error:
        raise UserError(f"--env {env}: {error.message}") from None
    algorithm_table: dict[str, Any] = {"use": algorithm}
    if network is not None:
        try:
            registry.lookup("network", network)
        except UserError as error:
            raise UserError(f"--network: {error.message}") from None
        for name, param in algorithm_spec.schema.params.items():
            if component_kind(param.annotation) == "network" and param.default is not None:
                algorithm_table[name] = {"use": network}
    missing = [name for name, param in algorithm_spec.schema.params.items() if param.required]
    if missing:
        raise UserError(f"algorithm '{algorithm_spec.name}' has keys without defaults ({', '.join(missing)}); "
                        f"python -m rlplug show algorithm:{algorithm_spec.name} says what they take")
    recipe = validate({"env": env_table, "algorithm": algorithm_table}, file=f"init {algorithm} --env {env}")
    unused = check_builds(recipe, f"--env {env}")

    command = f"python -m rlplug init {algorithm} --env {env}" + (f" --network {network}" if network else "")
    writer = _RecipeWriter(registry, unused)
    writer.comment(f"{algorithm_spec.name} on {env}: a recipe with every key at its default (rlplug {__version__}).")
    writer.comment(f"Written by: {command}")
    writer.comment("Run it with: python -m rlplug run THIS_FILE.toml [--out DIR] [--set KEY=VALUE ...]")
    writer.comment("Above each key: its type (and bounds), then what it does. A key that is unset by default is")
    writer.comment("shown commented out (TOML has no null): leaving it out keeps it unset.")
    writer.comment("python -m rlplug show NAME describes any component; python -m rlplug list shows them all.")
    writer.blank()
    writer.settings("run", recipe.run, RunSettings, "how long to train, seeds, device and checkpoints")
    writer.settings("eval", recipe.eval, EvalSettings, "evaluation during and at the end of training")
    writer.component("env", recipe.env, role="the environment")
    writer.component("algorithm", recipe.algorithm, role="the algorithm; its nested components follow its keys")
    writer.component("runner", recipe.runner, role="where experience is collected: 'local' (this process) or "
                     "'ray' (workers; pip install \"rlplug[ray]\")")
    for logger in recipe.loggers:
        writer.component("loggers", logger, role="one logger (one [[loggers]] table each)", array=True)
    text = writer.text()

    # What comes out must run as it is and mean the same recipe; anything else is a bug in this module.
    if validate(tomllib.loads(text), file="<init>").resolved() != recipe.resolved():
        raise RuntimeError("rlplug init wrote a recipe that reads back differently; please report it")
    return text


#: a network's keys that shape only a stochastic policy over continuous actions (rlplug.core.heads.with_head)
CONTINUOUS_POLICY_KEYS = ("log_std", "log_std_init", "squash")


def check_builds(recipe, label: str) -> dict[str, tuple[str, ...]]:
    """``UserError`` where the algorithm cannot be built on the env (dqn on continuous actions, say): what
    ``run`` would refuse only after validation, found before a recipe that cannot run is written. Returns,
    by the algorithm's network key, the keys that network ignores in the role the algorithm built it for (a Q
    critic's or a categorical policy's ``log_std`` and ``squash``)."""
    import tempfile

    from rlplug.core.heads import layout_of
    from rlplug.core.transformed import build_transformed
    from rlplug.errors import UserError

    roles: dict[str, str] = {}
    networks = {name: _RoleNoted(value.spec, value.params, value.path, roles=roles, key=name)
                for name, value in recipe.algorithm.params.items() if isinstance(value, Network)}
    env = build_transformed(recipe.env, device="cpu")
    try:
        with tempfile.TemporaryDirectory() as scratch:
            recipe.algorithm.with_params(**networks).build(
                observation_spec=env.observation_spec, action_spec=env.action_spec, device="cpu", seed=0,
                total_frames=recipe.run.total_frames, run_dir=Path(scratch))
        continuous = layout_of(env.action_spec, env.observation_spec).kind == "continuous"
    except UserError as error:
        raise UserError(f"{label}: {error}") from None
    finally:
        env.close()
    return {name: CONTINUOUS_POLICY_KEYS for name, role in roles.items() if role != "policy" or not continuous}


@dataclass(frozen=True)
class _RoleNoted(Network):
    """A network that notes the role the algorithm builds it for (init writes only the keys that role reads)."""

    roles: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    key: str = ""

    def build(self, **context: Any) -> Any:
        if "role" in context:
            self.roles[self.key] = context["role"]
        return super().build(**context)


class _RecipeWriter:
    """TOML text with a comment line (type, description) above every key, nested components' tables after
    their parent's keys. Values are written one per line (tomli_w's scalars, arrays and tables inline)."""

    def __init__(self, registry, unused: dict[str, tuple[str, ...]] | None = None, width: int = 100):
        """``unused``: by the algorithm's network key, the keys left out of that network's table (defaults
        all, which the network ignores in its role)."""
        self.registry, self.width, self.unused = registry, width, unused or {}
        self.lines: list[str] = []

    def text(self) -> str:
        return "\n".join(self.lines).rstrip("\n") + "\n"

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    def comment(self, text: str) -> None:
        for line in textwrap.wrap(text, self.width - 2, break_long_words=False, break_on_hyphens=False) or [""]:
            self.lines.append(f"# {line}".rstrip())

    def key(self, param: ParamDoc, value: Any) -> None:
        self.comment(param.type_text + (f": {param.description}" if param.description else ""))
        if value is None:
            self.lines.append(f"# {key_text(param.name)} =   (unset by default; TOML has no null, so the key is "
                              f"left out)")
        else:
            self.lines.append(f"{key_text(param.name)} = {inline_toml(value)}")

    def table(self, header: str, about: str, rows: list[tuple[ParamDoc, Any]], *, array: bool = False,
              use: tuple[str, str] | None = None) -> None:
        """A table's header, its ``use`` key (a component's name, under what it is), then its keys."""
        self.blank()
        self.comment(about)
        self.lines.append(f"[[{header}]]" if array else f"[{header}]")
        if use is not None:
            self.comment(use[1])
            self.lines.append(f"use = {inline_toml(use[0])}")
        for param, value in rows:
            self.key(param, value)

    def settings(self, name: str, values: Any, cls: type, about: str) -> None:
        self.table(name, f"[{name}]: {about}", settings_docs(cls, values))

    def component(self, header: str, component: Any, *, role: str, array: bool = False,
                  about: ParamDoc | None = None) -> None:
        """The component's table (its name, then its keys), then a sub-table for each nested component."""
        from rlplug.registry.components import Component

        spec, doc = component.spec, describe(component.spec)
        title = (f"{about.name} ({about.type_text})" + (f": {about.description}" if about.description else "")
                 if about is not None else f"[{'[' if array else ''}{header}{']' if array else ''}]: {role}")
        provided = f"{spec.kind} '{spec.name}' from plugin {spec.plugin} {spec.version}" + \
            (f": {doc.summary}" if doc.summary else "")
        unused = self.unused.get(about.name, ()) if about is not None and header.count(".") == 1 else ()
        rows = [(p, component.params.get(p.name)) for p in doc.params if p.name not in unused]
        nested = [(p, value) for p, value in rows if isinstance(value, Component)]
        self.table(header, title, [row for row in rows if row not in nested], array=array,
                   use=(self._use_name(spec), provided))
        left_out = [p.name for p in doc.params if p.name in unused]
        if left_out and about is not None:
            self.comment(f"({', '.join(left_out)}: continuous stochastic policies only, unused as {about.name} "
                         f"here)")
        for param, value in nested:
            self.component(f"{header}.{key_text(param.name)}", value, role=param.name, about=param)

    def _use_name(self, spec) -> str:
        """The bare name where it is unambiguous, else the qualified one."""
        try:
            if self.registry.lookup(spec.kind, spec.name) is spec:
                return spec.name
        except Exception:  # ambiguous between plugins
            pass
        return spec.qualified_name


def key_text(key: str) -> str:
    """``key`` as TOML writes it (quoted where it is not a bare key)."""
    return tomli_w.dumps({key: 0}).split(" = ")[0]
