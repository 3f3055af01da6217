"""Plugin discovery, failure isolation and component lookup, through fake installed distributions.

Each fake distribution is a ``NAME-VERSION.dist-info`` folder (``METADATA`` and an ``entry_points.txt``
with an ``[rlplug]`` group) and the plugin modules it names, written into ``tmp_path`` and put on
``sys.path``: exactly what ``pip install`` leaves behind, so ``importlib.metadata`` finds them the same way.
Registries are loaded fresh with :func:`load_registry` (never the process-wide cached one).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import rlplug_cli

import rlplug
from rlplug.errors import ComponentError, PluginError, UserError
from rlplug.registry import resolve
from rlplug.registry.components import Env
from rlplug.registry.manager import load_registry

ROOT = Path(__file__).resolve().parent.parent
BUILTINS = {"env": "gym", "algorithm": "ppo", "estimator": "gae", "logger": "csv", "network": "mlp"}

GOOD = '''
from typing import Annotated

import rlplug


def make_line(length: Annotated[int, rlplug.Range(ge=2)] = 3):
    """A line world, for tests."""
    return ("line", length)


@rlplug.hookimpl
def rlplug_register_envs(register):
    register("line-world", make_line)
'''

#: Broken plugins: (module source, what the one-line error must contain).
BROKEN = {
    "import-raises": ('raise ImportError("no module today")', "ImportError: no module today"),
    "hook-raises-midway": ('''
        import rlplug

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            register("half-env", lambda: None)

        @rlplug.hookimpl
        def rlplug_register_estimators(register):
            register("half-estimator", lambda: None)
            raise RuntimeError("first line\\nsecond line")
        ''', "RuntimeError: first line"),
    "name-with-colon": ('''
        import rlplug

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            register("ok-env", lambda: None)
            register("a:b", lambda: None)
        ''', "without ':'"),
    "factory-not-callable": ('''
        import rlplug

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            register("ok-env", "make_env")
        ''', "factory must be callable"),
    "misspelled-hook": ('''
        import rlplug

        @rlplug.hookimpl
        def rlplug_register_env(register):
            register("ok-env", lambda: None)
        ''', "did you mean 'rlplug_register_envs'"),
    "hook-without-hookimpl": ('''
        def rlplug_register_envs(register):
            register("ok-env", lambda: None)
        ''', "@rlplug.hookimpl"),
}

def record(registry, name):
    (found,) = [p for p in registry.plugins if p.name == name]
    return found


def names_from(registry, plugin):
    return {(s.kind, s.name) for specs in registry.specs.values() for s in specs if s.plugin == plugin}


# --- discovery ----------------------------------------------------------------------------------------


def test_installed_plugin_is_discovered_under_its_entry_point_name(install):
    install({"good": GOOD})
    registry = load_registry()

    spec = registry.lookup("env", "line-world")
    assert (spec.plugin, spec.version, spec.qualified_name) == ("good", "1.2.3", "good:line-world")
    assert spec.summary == "A line world, for tests."
    good = record(registry, "good")
    assert (good.version, good.components, good.error) == ("1.2.3", 1, None)
    assert "fakepkg" in good.source
    # The factory's signature is the schema: a recipe table goes through it, qualified names too.
    assert resolve(Env, {"use": "good:line-world", "length": 4}, registry=registry).params == {"length": 4}
    with pytest.raises(UserError, match=">= 2"):
        resolve(Env, {"use": "line-world", "length": 1}, registry=registry)


def test_builtins_are_one_plugin_named_rlplug():
    registry = load_registry()

    builtin = registry.plugins[0]
    assert (builtin.name, builtin.source, builtin.error) == ("rlplug", "built in", None)
    assert [p.name for p in registry.plugins].count("rlplug") == 1
    assert builtin.components >= len(BUILTINS)
    for kind, name in BUILTINS.items():
        assert registry.lookup(kind, name).plugin == "rlplug"
        assert registry.lookup(kind, f"rlplug:{name}").name == name


def test_a_distribution_on_the_path_twice_is_one_plugin(install, tmp_path, monkeypatch):
    first = install({"good": GOOD}, where=tmp_path / "a")
    shutil.copytree(first, tmp_path / "b")
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    registry = load_registry()

    assert [p.name for p in registry.plugins].count("good") == 1
    assert registry.lookup("env", "line-world").plugin == "good"  # not ambiguous with itself


# --- broken plugins -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_plugin_is_recorded_contributes_nothing_and_spares_the_others(install, case):
    source, expected = BROKEN[case]
    install({"good": GOOD, "bad": source})
    registry = load_registry()

    bad = record(registry, "bad")
    assert bad.error and expected in bad.error
    assert "\n" not in bad.error and "second line" not in bad.error
    assert bad.components == 0
    assert names_from(registry, "bad") == set()  # partial registrations were dropped
    assert record(registry, "good").error is None and record(registry, "rlplug").error is None
    assert registry.lookup("env", "line-world").plugin == "good"
    for kind, name in BUILTINS.items():
        assert registry.lookup(kind, name).plugin == "rlplug"


def test_a_name_from_a_failed_plugin_says_the_plugin_failed(install):
    install({"bad": BROKEN["import-raises"][0]})
    registry = load_registry()

    with pytest.raises(ComponentError, match="needs plugin 'bad', which failed to load: ImportError"):
        registry.lookup("env", "bad:anything")
    with pytest.raises(ComponentError, match="plugins that failed to load: bad"):
        registry.lookup("env", "anything")


def test_strict_mode_raises_the_first_failure(install):
    install({"good": GOOD, "bad": BROKEN["import-raises"][0]})

    with pytest.raises(PluginError, match="plugin 'bad'.*ImportError: no module today") as raised:
        load_registry(strict=True)
    assert isinstance(raised.value.__cause__, ImportError)


def test_strict_mode_is_quiet_when_every_plugin_loads(install):
    install({"good": GOOD})
    assert load_registry(strict=True).lookup("env", "line-world").plugin == "good"


def test_a_plugin_may_import_modules_named_rlplug_something(install, tmp_path):
    (tmp_path / "rlplug_helpers.py").write_text("LENGTH = 3\n")
    install({"good": "import rlplug_helpers\n" + GOOD})
    try:
        registry = load_registry()
    finally:
        sys.modules.pop("rlplug_helpers", None)

    assert record(registry, "good").error is None


# --- names: ambiguity, qualified names, suggestions ---------------------------------------------------


def test_one_name_from_two_plugins_needs_the_qualified_name(install):
    install({"alpha": GOOD, "beta": GOOD})
    registry = load_registry()

    with pytest.raises(ComponentError, match="ambiguous") as raised:
        registry.lookup("env", "line-world")
    assert "alpha:line-world" in str(raised.value) and "beta:line-world" in str(raised.value)
    assert registry.lookup("env", "alpha:line-world").plugin == "alpha"
    assert registry.lookup("env", "beta:line-world").plugin == "beta"


def test_a_misspelled_name_suggests_the_right_one():
    registry = load_registry()

    with pytest.raises(ComponentError, match="did you mean 'gae'"):
        registry.lookup("estimator", "gea")
    with pytest.raises(ComponentError, match="did you mean 'ppo'"):
        registry.lookup("algorithms", "pop")  # the kind may be plural


def test_a_name_of_another_kind_says_which_kind_it_is():
    registry = load_registry()

    with pytest.raises(ComponentError, match=r"'ppo' is an? algorithm, not an? env"):
        registry.lookup("env", "ppo")
    with pytest.raises(ComponentError, match="unknown component kind 'enviroment'"):
        registry.lookup("enviroment", "gym")


# --- rlplug.make --------------------------------------------------------------------------------------


def test_make_builds_a_component_through_the_recipe_checks():
    from tensordict.nn import TensorDictModuleBase

    gae = rlplug.make("estimator", "gae", gamma=0.9)
    assert isinstance(gae, TensorDictModuleBase)
    assert (gae.gamma, gae.lmbda) == (0.9, 0.95)  # the other parameter keeps its default


@pytest.mark.parametrize(("params", "message"), [
    ({"gama": 0.9}, "unknown key 'gama'.*did you mean 'gamma'"),
    ({"gamma": "high"}, "gamma: expected a number, got 'high'"),
    ({"gamma": 1.5}, "gamma: must be <= 1, got 1.5"),
])
def test_make_rejects_bad_parameters(params, message):
    with pytest.raises(UserError, match=message):
        rlplug.make("estimator", "gae", **params)


def test_make_rejects_an_unknown_name():
    with pytest.raises(UserError, match="did you mean 'gae'"):
        rlplug.make("estimator", "gea")


# --- the command line, in a subprocess ----------------------------------------------------------------


@pytest.fixture
def fake_dists(install):
    return install({"good": GOOD, "broken": BROKEN["import-raises"][0]})


def test_cli_list_warns_about_a_broken_plugin_in_one_line_and_goes_on(fake_dists):
    result = rlplug_cli("list", path=fake_dists)

    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "broken" in line]
    assert len(warnings) == 1 and warnings[0].startswith("rlplug: warning: plugin 'broken'")
    assert "ImportError: no module today" in warnings[0]
    assert "Traceback" not in result.stderr
    for name in [*BUILTINS.values(), "line-world"]:
        assert name in result.stdout


def test_cli_list_json_includes_installed_plugins(fake_dists):
    result = rlplug_cli("list", "--json", path=fake_dists)

    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    (line,) = [c for c in data["components"]["env"] if c["name"] == "line-world"]
    assert (line["plugin"], line["version"], line["qualified_name"]) == ("good", "1.2.3", "good:line-world")
    assert line["parameters"] == [{"name": "length", "type": "int", "default": 3}]
    plugins = {p["name"]: p for p in data["plugins"]}
    assert plugins["good"]["error"] is None and plugins["good"]["components"] == 1
    assert plugins["broken"]["error"].startswith("ImportError")


@pytest.mark.parametrize("strict", [{"RLPLUG_STRICT_PLUGINS": "1"}, "--strict-plugins"], ids=["env", "flag"])
def test_cli_strict_plugins_fails_on_a_broken_plugin(fake_dists, strict):
    args = [strict, "list"] if isinstance(strict, str) else ["list"]
    result = rlplug_cli(*args, path=fake_dists, **(strict if isinstance(strict, dict) else {}))

    assert result.returncode != 0
    assert "plugin 'broken'" in result.stderr and "ImportError: no module today" in result.stderr


def test_cli_strict_plugins_shows_the_traceback(fake_dists):
    result = rlplug_cli("--strict-plugins", "list", path=fake_dists)

    assert result.returncode != 0
    assert "Traceback" in result.stderr and "raise ImportError" in result.stderr


def test_cli_lists_the_installed_example_plugin():
    if importlib.util.find_spec("rlplug_example_plugin") is None:
        pytest.skip("the example plugin is not installed: pip install -e examples/rlplug-example-plugin")
    result = rlplug_cli("list", "--json")

    assert result.returncode == 0, result.stderr
    components = json.loads(result.stdout)["components"]
    (corridor,) = [c for c in components["env"] if c["name"] == "corridor"]
    (estimator,) = [c for c in components["estimator"] if c["name"] == "mc-return"]
    assert corridor["plugin"] == estimator["plugin"] == "example"
    assert {"name": "length", "type": "int", "default": 5} in corridor["parameters"]


# --- built-in defaults are rlplug's own, whatever else is installed ----------------------------------------

CLASHING_LOSSES = '''
import rlplug


def make_clash(networks=None, settings=None):
    """A loss of a third-party package that happens to share rlplug's names."""
    raise AssertionError("never built: the shipped recipes do not name it")


@rlplug.hookimpl
def rlplug_register_losses(register):
    for name in ("sac-loss", "ppo-loss", "ddpg-loss", "td3-loss", "dqn-loss", "policy-gradient-loss"):
        register(name, make_clash)


@rlplug.hookimpl
def rlplug_register_runners(register):
    register("local", make_clash)
'''


def test_a_package_sharing_default_names_leaves_the_shipped_recipes_working(install, monkeypatch):
    """A default the recipe never wrote is rlplug's own component, not whichever package shares its bare name
    (before: 'algorithm.loss.use: 'sac-loss' is ambiguous' on the unchanged pendulum-sac.toml)."""
    from rlplug.recipe import load
    from rlplug.registry import manager

    install({"clash": CLASHING_LOSSES})
    monkeypatch.setattr(manager, "_cache", {})
    assert manager.get_registry().lookup("loss", "clash:sac-loss").plugin == "clash"

    checked = 0
    for path in sorted((ROOT / "recipes").glob("*.toml")):
        try:
            recipe = load(path)
        except UserError as error:
            if "pip install" in str(error):  # an env of an extra this venv lacks (atari, mujoco, dm_control)
                continue
            if error.path == "dataset.path":  # an offline recipe: the user's dataset goes there (--set)
                continue
            raise
        assert recipe.algorithm.params["loss"].spec.plugin == "rlplug", path.name
        assert recipe.runner.spec.plugin == "rlplug", path.name
        checked += 1
    assert checked >= 15
    assert load(ROOT / "recipes" / "pendulum-sac.toml").algorithm.params["loss"].spec.name == "sac-loss"
