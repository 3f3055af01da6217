"""A plugin author's mistakes, found as early as they can be and reported as the plugin's: schemas checked at
registration (the plugin is skipped with one warning line), components checked against their kind's protocol
when built, metrics that are not numbers refused, a factory that raises named in one line. Fake installed
distributions (``install``, from conftest) and the real command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CANONICAL, rlplug_cli

from rlplug.registry import protocols
from rlplug.registry.manager import load_registry


def failure(registry, plugin: str) -> str:
    (record,) = [p for p in registry.plugins if p.name == plugin]
    assert record.error, f"plugin {plugin} loaded, and should have failed"
    return record.error


SCHEMA_MISTAKES = {
    "postponed-misspelled-type": ('''
        from __future__ import annotations
        import rlplug

        def make_thing(size: Intt = 3):
            """A thing."""

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            register("thing", make_thing)
        ''', ["env 'thing'", "parameter 'size'", "'Intt'", "cannot be resolved"]),
    "default-outside-its-range": ('''
        from typing import Annotated
        import rlplug

        def make_thing(clip_epsilon: Annotated[float, rlplug.Range(gt=0)] = 0.0):
            """A thing."""

        @rlplug.hookimpl
        def rlplug_register_algorithms(register):
            register("thing", make_thing)
        ''', ["algorithm 'thing'", "parameter 'clip_epsilon'", "default 0.0", "must be > 0"]),
    "default-of-the-wrong-type": ('''
        import rlplug

        def make_thing(steps: int = "many"):
            """A thing."""

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            register("thing", make_thing)
        ''', ["parameter 'steps'", "expected an integer"]),
    "callable-annotation": ('''
        from collections.abc import Callable
        import rlplug

        def make_thing(shaping: Callable = None):
            """A thing."""

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            register("thing", make_thing)
        ''', ["parameter 'shaping'", "supported: int, float"]),
    "set-annotation": ('''
        import rlplug

        def make_thing(tags: set[str] = ()):
            """A thing."""

        @rlplug.hookimpl
        def rlplug_register_loggers(register):
            register("thing", make_thing)
        ''', ["parameter 'tags'", "set[str]", "supported:"]),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_MISTAKES))
def test_a_schema_mistake_skips_its_plugin_naming_the_factory_and_parameter(install, case):
    source, fragments = SCHEMA_MISTAKES[case]
    install({"mistaken": source})
    registry = load_registry()
    error = failure(registry, "mistaken")
    for fragment in fragments:
        assert fragment in error, error
    assert not any(s.plugin == "mistaken" for specs in registry.specs.values() for s in specs)


def test_a_schema_mistake_is_fatal_under_strict_plugins(install):
    where = install({"mistaken": SCHEMA_MISTAKES["postponed-misspelled-type"][0]})
    relaxed = rlplug_cli("list", path=where)
    assert relaxed.returncode == 0 and "plugin 'mistaken'" in relaxed.stderr and "'Intt'" in relaxed.stderr
    strict = rlplug_cli("--strict-plugins", "list", path=where)
    assert strict.returncode != 0 and "'Intt'" in strict.stderr


def test_show_names_the_failed_plugin_that_would_have_provided_a_component(install):
    where = install({"mistaken": SCHEMA_MISTAKES["default-outside-its-range"][0]})
    for name in ("thing", "mistaken:thing", "algorithm:thing"):
        result = rlplug_cli("show", name, path=where)
        assert result.returncode == 2, result.stdout
        lines = [line for line in result.stderr.splitlines() if line.startswith("rlplug: error")]
        assert len(lines) == 1 and "plugin 'mistaken', which failed to load" in lines[0], result.stderr


CONTRACT_PLUGIN = '''
import torch
import rlplug


def make_nothing(observation_spec, action_spec):
    """Returns no algorithm at all."""
    return None


def make_tensor_metrics(observation_spec, action_spec, total_frames: int = 1):
    """PPO whose update reports tensors instead of numbers."""
    ppo = rlplug.make("algorithm", "ppo", observation_spec=observation_spec, action_spec=action_spec,
                      total_frames=total_frames, frames_per_batch=64, minibatch_size=64, epochs=1)

    class TensorMetrics:
        policy, frames_per_batch = ppo.policy, ppo.frames_per_batch
        state_dict, load_state_dict = ppo.state_dict, ppo.load_state_dict

        def update(self, batch):
            ppo.update(batch)
            return {"loss": torch.tensor(-0.0046)}

    return TensorMetrics()


def make_broken_env(size: int = 3):
    """An env whose factory fails."""
    raise ValueError("the simulator is not installed")


@rlplug.hookimpl
def rlplug_register_algorithms(register):
    register("nothing", make_nothing)
    register("tensor-metrics", make_tensor_metrics)


@rlplug.hookimpl
def rlplug_register_envs(register):
    register("broken-env", make_broken_env)
'''


@pytest.fixture
def contract_plugin(install):
    return install({"careless": CONTRACT_PLUGIN}, dist="careless", version="0.3.0")


def one_error_line(result) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlplug: error: "), result.stderr
    return lines[0]


def run_with(path: Path, tmp_path: Path, *overrides: str, **env: str):
    out = tmp_path / "run"
    args = ["run", str(CANONICAL), "--out", str(out), "--set", "run.total_frames=128", "--set", "eval.episodes=1"]
    for override in overrides:
        args += ["--set", override]
    return rlplug_cli(*args, path=path, timeout=120, **env), out


@pytest.mark.slow
def test_an_algorithm_factory_that_returns_none_is_one_line_naming_it(contract_plugin, tmp_path):
    result, out = run_with(contract_plugin, tmp_path, 'algorithm={use="nothing"}')
    line = one_error_line(result)
    assert "algorithm 'nothing' (plugin careless 0.3.0)" in line and "'policy'" in line
    assert "plugin's mistake" in line and not out.exists()


@pytest.mark.slow
def test_metrics_that_are_not_numbers_are_refused_in_one_line(contract_plugin, tmp_path):
    result, out = run_with(contract_plugin, tmp_path, 'algorithm={use="tensor-metrics"}')
    line = one_error_line(result)
    assert "algorithm 'tensor-metrics' (plugin careless 0.3.0)" in line and "'loss'" in line
    assert "plain numbers" in line
    assert not (out / "metrics.csv").exists() or "tensor(" not in (out / "metrics.csv").read_text()


@pytest.mark.slow
def test_a_factory_that_raises_is_one_line_naming_it_and_a_traceback_under_debug(contract_plugin, tmp_path):
    result, _ = run_with(contract_plugin, tmp_path, 'env={use="broken-env"}')
    line = one_error_line(result)
    assert "env 'broken-env' (plugin careless 0.3.0) failed while being built" in line
    assert "ValueError: the simulator is not installed" in line
    debug, _ = run_with(contract_plugin, tmp_path / "debug", 'env={use="broken-env"}', RLPLUG_DEBUG="1")
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "raise ValueError" in debug.stderr


def test_every_builtin_component_passes_its_kinds_protocol(tmp_path):
    """What rlplug builds for a canonical run is what the protocols say, member for member."""
    import rlplug

    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run")
    run = agent.run
    for protocol, value in ((protocols.Env, run.env), (protocols.Algorithm, run.algorithm),
                            (protocols.Collector, run.collector), (protocols.Network, run.algorithm.policy)):
        assert protocols.conform(protocol, value, "built in") is value


def test_optional_members_are_read_only_through_the_protocol():
    class Bare:
        pass

    assert protocols.capability(Bare(), protocols.Collector.metrics) is None
    with pytest.raises(TypeError, match="not an optional"):
        protocols.capability(Bare(), protocols.Collector.collect)


def test_the_protocols_list_required_and_optional_members():
    members = protocols.members(protocols.Logger)
    assert members == {"log": True, "close": True, "log_video": False}
    algorithm = protocols.members(protocols.Algorithm)
    assert algorithm["policy"] and algorithm["update"] and not algorithm["asynchronous"]


def test_list_shows_summaries_as_written_and_json_defaults_as_json(install):
    where = install({"brackets": '''
        import rlplug

        def make_wide(hidden: list[int] = (64, 64)):
            """Hidden layers [64, 64] by default, [bold]not bold[/bold]."""

        @rlplug.hookimpl
        def rlplug_register_networks(register):
            register("wide", make_wide)
        '''})
    listed = rlplug_cli("list", path=where)
    assert "[64, 64]" in listed.stdout and "[bold]not bold[/bold]" in listed.stdout
    data = json.loads(rlplug_cli("list", "--json", path=where).stdout)
    (wide,) = [c for c in data["components"]["network"] if c["name"] == "wide"]
    assert wide["parameters"] == [{"name": "hidden", "type": "list[int]", "default": [64, 64]}]
