"""``rlplug show``, ``rlplug init`` and ``rlplug new-plugin`` through the real command line, plus the
docstring and ``#:`` comment readers they rest on."""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Annotated

import pytest
from conftest import one_line_error, run_cli

import rlplug
from rlplug.registry import docs as describing
from rlplug.registry.manager import load_registry
from rlplug.registry.registry import ComponentSpec


def fake_distribution(where: Path, entry_name: str, module: str, source: str, version: str = "2.0.1") -> Path:
    """A plugin module and the ``*.dist-info`` pip would leave for it, in ``where`` (to put on PYTHONPATH)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{module}.py").write_text(textwrap.dedent(source))
    info = where / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[rlplug]\n{entry_name} = {module}\n")
    return where


def pythonpath(*paths: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([*map(str, paths), *filter(None, [os.environ.get("PYTHONPATH")])])}


# --- show ----------------------------------------------------------------------------------------------------


def test_show_an_estimator_by_bare_name():
    result = run_cli("show", "gae", timeout=60)

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("gae (estimator)")
    assert "Generalised advantage estimation" in out
    assert "plugin rlplug" in out and "rlplug:gae" in out
    assert "gamma" in out and "0.99" in out and "lmbda" in out and "0.95" in out
    assert "float (>= 0, <= 1)" in out


def test_show_an_algorithm_by_kind_and_name_with_descriptions_from_comments():
    result = run_cli("show", "algorithm:ppo", timeout=60)

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("ppo (algorithm)")
    lines = out.splitlines()
    (anneal_clip,) = [i for i, line in enumerate(lines) if line.split()[:1] == ["anneal_clip"]]
    assert "bool" in lines[anneal_clip] and "false" in lines[anneal_clip]
    assert "shrink the clip range linearly to 0" in lines[anneal_clip + 1]  # PPOConfig's #: comment
    assert "shorthand for `lr_schedule" in out  # anneal_lr's #: comment, in the base class OnPolicyConfig
    for key in ("clip_epsilon", "policy", "critic", "advantage", "frames_per_batch", "minibatch_size", "lr"):
        assert f"  {key} " in out, key
    for context in ("observation_spec", "action_spec", "total_frames"):
        assert context in out
    assert "\"rlplug:mlp\"" in out and "\"rlplug:gae\"" in out  # nested components' defaults, qualified


def test_show_a_qualified_network():
    result = run_cli("show", "rlplug:mlp", timeout=60)

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("mlp (network)")
    assert "hidden" in out and "list[int]" in out and "[64, 64]" in out
    assert "'tanh' | 'relu'" in out
    assert "role:" in out  # a context name, with its meaning


def test_show_json():
    result = run_cli("show", "ppo", "--json", timeout=60)

    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["kind"], data["name"], data["plugin"], data["qualified_name"]) == ("algorithm", "ppo", "rlplug",
                                                                                    "rlplug:ppo")
    assert data["summary"].startswith("Proximal policy optimisation")
    params = {p["name"]: p for p in data["parameters"]}
    assert params["anneal_clip"]["default"] is False and params["anneal_clip"]["type"] == "bool"
    assert params["anneal_clip"]["description"].startswith("shrink the clip range")
    assert params["epochs"] == {**params["epochs"], "default": 10, "type": "int", "constraints": ">= 1, <= 10000"}
    assert params["num_minibatches"]["default"] is None and params["policy"]["default"] == "rlplug:mlp"
    assert [c["name"] for c in data["context"]] == ["observation_spec", "action_spec", "device", "total_frames",
                                                    "eval_episodes", "eval_every_frames"]


def test_show_on_a_terminal_is_a_rich_table():
    result = run_cli("show", "mlp", env={"TTY_COMPATIBLE": "1", "NO_COLOR": "1"}, timeout=60)

    assert result.returncode == 0, result.stderr
    assert "┃" in result.stdout and "list[int]" in result.stdout and "sizes of the hidden layers" in result.stdout


@pytest.mark.parametrize("name, fragments", [
    ("gea", ["unknown estimator 'gea'", "did you mean 'gae'"]),
    ("ppoo", ["unknown algorithm 'ppoo'", "did you mean 'ppo'"]),
    ("estimator:gea", ["did you mean 'gae'"]),
    ("algorithm:gae", ["'gae' is an estimator, not an algorithm"]),
    ("zzzzzz", ["no component named 'zzzzzz'", "rlplug list"]),
])
def test_show_unknown_names_are_one_line_errors(name, fragments):
    one_line_error(run_cli("show", name, timeout=60), *fragments)


def test_show_asks_for_the_kind_when_a_name_stands_in_several(tmp_path):
    site = fake_distribution(tmp_path, "twins", "rlplug_twins_plugin", '''
        import rlplug

        def make_gae(width: int = 3):
            """An env that happens to be called gae."""

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            register("gae", make_gae)
    ''')
    env = pythonpath(site)

    one_line_error(run_cli("show", "gae", env=env, timeout=60), "estimator:gae", "env:gae", "KIND:NAME")
    chosen = run_cli("show", "env:gae", env=env, timeout=60)
    assert chosen.returncode == 0, chosen.stderr
    assert "plugin twins 2.0.1" in chosen.stdout and "width" in chosen.stdout


def test_show_passes_on_lookups_advice_when_two_plugins_share_a_name(tmp_path):
    site = fake_distribution(tmp_path, "rival", "rlplug_rival_plugin", '''
        import rlplug

        def make_gae(gamma: float = 0.9):
            """Another GAE."""

        @rlplug.hookimpl
        def rlplug_register_estimators(register):
            register("gae", make_gae)
    ''')
    env = pythonpath(site)

    one_line_error(run_cli("show", "gae", env=env, timeout=60), "'gae' is ambiguous", "rlplug:gae",
                          "rival:gae")
    chosen = run_cli("show", "rival:gae", env=env, timeout=60)
    assert chosen.returncode == 0, chosen.stderr
    assert "plugin rival 2.0.1" in chosen.stdout and "Another GAE." in chosen.stdout


# --- descriptions from docstrings and comments (in-process) -------------------------------------------------


def google(alpha: int = 1, beta: str = "x"):
    """Summary line.

    More prose.

    Args:
        alpha (int): the first
            one, continued.
        beta: the second.

    Returns:
        nothing.
    """


def numpy_style(alpha: int = 1, beta: str = "x"):
    """Summary line.

    Parameters
    ----------
    alpha : int
        the first one.
    beta : str
        the second.

    Notes
    -----
    Kept.
    """


def sphinx(alpha: int = 1, beta: str = "x"):
    """Summary line.

    :param alpha: the first
        one.
    :param str beta: the second.
    :returns: nothing.
    """


def commented(
    #: the first one, from a comment
    alpha: Annotated[int, rlplug.Range(ge=1)] = 1,
    beta: str = "x",  #: the second, trailing
):
    """Summary line.

    - ``alpha``: overridden by the comment.
    - ``other``: not a parameter, stays prose.
    """


@pytest.mark.parametrize("factory", [google, numpy_style, sphinx, commented])
def test_parameter_descriptions_from_every_docstring_style(factory):
    doc = describing.describe(ComponentSpec("env", "x", factory, "p", "1"))

    descriptions = {p.name: p.description for p in doc.params}
    assert descriptions["alpha"].startswith("the first")
    assert descriptions["beta"].startswith("the second")
    assert doc.summary == "Summary line."
    assert "Args" not in doc.body and ":param" not in doc.body and "alpha" not in doc.body
    if factory is google:
        assert descriptions["alpha"] == "the first one, continued." and doc.body.startswith("More prose.\n")
    if factory is numpy_style:
        assert "Kept." in doc.body
    if factory is commented:
        assert descriptions["alpha"] == "the first one, from a comment" and "`other`" in doc.body
        assert doc.params[0].type_text == "int (>= 1)"


def test_algorithm_fields_are_described_from_their_config_class():
    spec = rlplug.get_registry().lookup("algorithm", "vpg")
    descriptions = {p.name: p.description for p in describing.describe(spec).params}

    assert descriptions["baseline"].startswith("learn a critic")  # VPGConfig's own #: comment
    assert descriptions["anneal_lr"].startswith("shorthand for")  # inherited from OnPolicyConfig


# --- init ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_init_writes_a_commented_recipe_that_runs(tmp_path, algorithm):
    result = run_cli("init", algorithm, "--env", "CartPole-v1", timeout=60)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    data = tomllib.loads(text)

    assert set(data["run"]) == {"seed", "total_frames", "device", "num_threads", "compile", "checkpoint_every_frames",
                                "keep_checkpoints", "log_every_frames"}
    assert set(data["eval"]) == {"every_frames", "episodes", "video"}
    assert data["env"]["use"] == "gym" and data["env"]["id"] == "CartPole-v1" and data["env"]["num_envs"] == 1
    assert data["algorithm"]["use"] == algorithm
    for nested in ("policy", "critic", "advantage", "value_target"):
        assert "use" in data["algorithm"][nested], nested
    assert data["algorithm"]["policy"]["hidden"] == [64, 64]
    assert data["algorithm"]["advantage"] == {"use": "gae", "gamma": 0.99, "lmbda": 0.95}
    assert [logger["use"] for logger in data["loggers"]] == ["console", "csv"]
    assert data["runner"] == {"use": "local"}
    if algorithm == "a2c":
        assert data["algorithm"]["optimizer"] == "rmsprop" and data["algorithm"]["frames_per_batch"] == 40
    lines = text.splitlines()
    for i, line in enumerate(lines):  # every key has its comment right above it
        if line and not line.startswith(("#", "[")):
            assert lines[i - 1].startswith("# "), (i, line)
    assert "# value_clip =" in text  # unset by default: shown commented out
    assert any(line.startswith("# int (>= 1): frames per minibatch") for line in lines)

    recipe = tmp_path / "init.toml"
    recipe.write_text(text)
    run = run_cli("run", str(recipe), "--out", str(tmp_path / "run"), "--set", "run.total_frames=512",
                  "--set", "eval.episodes=1", timeout=120)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "run" / "summary.json").exists()


@pytest.mark.slow
def test_init_with_another_network_and_a_plugin_env():
    pytest.importorskip("rlplug_example_plugin")  # examples/rlplug-example-plugin, installed for the test suite
    result = run_cli("init", "vpg", "--env", "example:corridor", "--network", "sequential", timeout=60)

    assert result.returncode == 0, result.stderr
    data = tomllib.loads(result.stdout)
    assert data["env"]["use"] == "corridor" and data["env"]["length"] == 5
    assert data["algorithm"]["policy"]["use"] == data["algorithm"]["critic"]["use"] == "sequential"
    assert "value_target" not in data["algorithm"]  # vpg leaves it unset: no null in TOML
    assert data["algorithm"]["policy"]["layers"][0] == {"type": "Linear", "out": 64}


@pytest.mark.parametrize("args, fragments", [
    (["ppoo", "--env", "CartPole-v1"], ["unknown algorithm 'ppoo'", "did you mean 'ppo'"]),
    (["ppo", "--env", "CartPol-v1"], ["--env CartPol-v1", "no gymnasium environment", "did you mean 'CartPole-v1'"]),
    (["ppo", "--env", "CartPole-v1", "--network", "mpl"], ["--network", "did you mean 'mlp'"]),
])
def test_init_rejects_unknown_names_in_one_line(args, fragments):
    result = run_cli("init", *args, timeout=60)
    one_line_error(result, *fragments)
    assert result.stdout == ""


# --- new-plugin ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_new_plugin_scaffolds_a_package_that_registers_and_passes_its_tests(tmp_path, monkeypatch):
    result = run_cli("new-plugin", "tidepools", "--dir", str(tmp_path), timeout=60)
    assert result.returncode == 0, result.stderr
    root = tmp_path / "rlplug-tidepools"
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert {"pyproject.toml", "README.md", "rlplug_tidepools/plugin.py", "rlplug_tidepools/__init__.py",
            "tests/test_plugin.py", "recipes/cartpole-ppo.toml"} <= files
    for name in files:
        if name.endswith(".py"):
            ast.parse((root / name).read_text(), filename=name)
    tomllib.loads((root / "recipes" / "cartpole-ppo.toml").read_text())
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["name"] == "rlplug-tidepools"
    assert project["entry-points"]["rlplug"] == {"tidepools": "rlplug_tidepools.plugin"}

    # What `pip install -e` would leave: the package importable and a dist-info with its entry points.
    site = tmp_path / "site"
    info = site / f"rlplug_tidepools-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text(
        "[rlplug]\n" + "".join(f"{k} = {v}\n" for k, v in project["entry-points"]["rlplug"].items()))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    try:
        registry = load_registry(strict=True)
        spec = registry.lookup("estimator", "tidepools:one-step")
        assert (spec.plugin, spec.version) == ("tidepools", "0.1.0")
        assert "gamma" in spec.schema.params
    finally:
        for module in [m for m in sys.modules if m.startswith("rlplug_tidepools")]:
            del sys.modules[module]

    env = pythonpath(site, root)
    shown = run_cli("show", "tidepools:one-step", env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "plugin tidepools 0.1.0" in shown.stdout and "the discount applied" in shown.stdout
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=root,
                           env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "4 passed" in tests.stdout


def test_new_plugin_never_overwrites(tmp_path):
    target = tmp_path / "rlplug-reefs"
    target.mkdir()
    (target / "mine.txt").write_text("keep me")

    one_line_error(run_cli("new-plugin", "reefs", "--dir", str(tmp_path), timeout=60),
                          "already exists", "never overwrites")
    assert [p.name for p in target.iterdir()] == ["mine.txt"] and (target / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rlplug-reefs"]  # no staging directory left behind


@pytest.mark.parametrize("name, fragment", [
    ("Reefs", "try: reefs"), ("rlplug-reefs", "leave out the 'rlplug-' prefix"), ("1reef", "starting with a letter"),
    ("re efs", "not usable"), ("rlplug", "rlplug's own plugin name"),
])
def test_new_plugin_checks_the_name(tmp_path, name, fragment):
    one_line_error(run_cli("new-plugin", name, "--dir", str(tmp_path), timeout=60), fragment)
    assert list(tmp_path.iterdir()) == []
