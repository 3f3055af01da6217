"""A new run from another run's weights: ``rlplug run RECIPE --init-from SOURCE`` and ``Agent.from_run``."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from conftest import CANONICAL, ROOT, one_line_error, run_cli
from tensordict import TensorDict

pytestmark = pytest.mark.slow  # every test trains a source run first, or starts the command line


def tensors(value, prefix=""):
    """Every tensor of a nested state dict by dotted path."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in tensors(item, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value} if isinstance(value, torch.Tensor) else {}


def assert_same(ours, theirs):
    ours, theirs = tensors(ours), tensors(theirs)
    assert ours.keys() == theirs.keys() and ours
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key


def test_cli_starts_a_new_run_at_frame_0_from_the_weights(trained, tmp_path):
    out = tmp_path / "new"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--init-from", str(trained),
                     "--set", "run.total_frames=256", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    assert f"starting from the weights of {trained / 'checkpoint.pt'} (frame 1024 of its run)" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == 256  # its own count, not the source's 1024 and more
    assert summary["init_from"] == {"checkpoint": str((trained / "checkpoint.pt").resolve()), "frames": 1024,
                                    "optimiser": False}
    with (out / "metrics.csv").open() as file:
        assert int(next(csv.DictReader(file))["frames"]) == 256
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["init_from"]["frames"] == 1024  # kept where resume reads it


def test_api_takes_networks_and_a_fresh_optimiser_unless_asked(trained, tmp_path):
    import rlplug

    source = torch.load(trained / "checkpoint.pt", weights_only=True)["algorithm"]
    # another seed: without the source's weights, its networks would start elsewhere
    fresh = rlplug.Agent.from_run(trained, out=tmp_path / "fresh", run={"seed": 1})
    asked = rlplug.Agent.from_run(trained / "checkpoint.pt", out=tmp_path / "asked", init_optimiser=True)
    loaded = rlplug.Agent.load(trained / "checkpoint.pt", out=tmp_path / "loaded")
    try:
        for agent in (fresh, asked):
            assert agent.frames == 0 and agent.run.iterations == 0
            assert_same(agent.run.algorithm.state_dict()["policy"], source["policy"])
            assert_same(agent.run.algorithm.state_dict()["critic"], source["critic"])
        observation = torch.randn(5, 4)
        out = fresh.act(TensorDict({"observation": observation}, [5]))
        expected = loaded.act(TensorDict({"observation": observation}, [5]))
        assert torch.equal(out["logits"], expected["logits"])  # the policy's output at frame 0
        assert fresh.run.algorithm.state_dict()["optimiser"]["state"] == {}
        assert_same(asked.run.algorithm.state_dict()["optimiser"]["state"], source["optimiser"]["state"])
    finally:
        for agent in (fresh, asked, loaded):
            agent.close()


def test_off_policy_weights_come_without_the_replay_buffer(tmp_path):
    import rlplug

    recipe = ROOT / "recipes" / "pendulum-sac.toml"
    source = rlplug.Agent.from_recipe(recipe, out=tmp_path / "source", run={"total_frames": 160})
    try:
        source.train()  # 60 updates: the networks and the optimisers moved
    finally:
        source.close()
    saved = torch.load(tmp_path / "source" / "checkpoint.pt", weights_only=True)["algorithm"]
    agent = rlplug.Agent.from_run(tmp_path / "source", recipe=recipe, out=tmp_path / "new",
                                  run={"seed": 1, "total_frames": 160})
    try:
        state = agent.run.algorithm.state_dict()
        assert_same(state["loss"], saved["loss"])  # actor, critics, their targets, the temperature
        assert all(optimiser["state"] == {} for optimiser in state["learners"]["optimisers"].values())
        assert len(agent.run.algorithm.replay) == 0 and agent.frames == 0
    finally:
        agent.close()


def test_networks_of_other_sizes_are_refused_naming_the_entry_and_shapes(trained, tmp_path):
    out = tmp_path / "new"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--init-from", str(trained),
                     "--set", "algorithm.policy.hidden=[32]")
    one_line_error(result, "--init-from", "network entry policy.", "[64", "in the checkpoint", "[32")
    assert not out.exists()  # the directory made to build the run is removed again


def test_another_algorithm_is_refused_before_the_directory(trained, tmp_path):
    out = tmp_path / "new"
    result = run_cli("run", str(ROOT / "recipes" / "cartpole-dqn.toml"), "--out", str(out), "--init-from",
                     str(trained))
    one_line_error(result, "algorithm 'rlplug:ppo'", "trains 'rlplug:dqn'")
    assert not out.exists()


@pytest.mark.parametrize("flags, fragments", [
    (["--init-optimiser"], ["--init-optimiser", "give --init-from"]),
    (["--init-from", "no/such/run"], ["no/such/run", "no such run directory or checkpoint file"]),
    (["--init-from", "recipes"], ["no checkpoint.pt in it"]),
    (["--init-from", str(CANONICAL)], ["not a readable rlplug checkpoint"]),
    (["--init-from", "recipes", "--seeds", "0-1"], ["does not take --seeds"]),
])
def test_bad_sources_are_one_line(tmp_path, flags, fragments):
    out = tmp_path / "new"
    one_line_error(run_cli("run", str(CANONICAL), "--out", str(out), *flags), *fragments)
    assert not out.exists()


def test_a_source_of_format_1_needs_allow_unverified(trained, tmp_path):
    state = torch.load(trained / "checkpoint.pt", weights_only=True)
    state["format"] = 1
    del state["digest"]
    old = tmp_path / "old.pt"
    torch.save(state, old)
    out = tmp_path / "new"
    one_line_error(run_cli("run", str(CANONICAL), "--out", str(out), "--init-from", str(old)), "--allow-unverified")
    assert not out.exists()
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--init-from", str(old), "--allow-unverified",
                     "--set", "run.total_frames=256", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "summary.json").read_text())["frames"] == 256


@pytest.mark.parametrize("optimizer", ["sgd", "rmsprop"])
def test_optimiser_state_of_another_optimiser_is_refused_before_the_directory(trained, tmp_path, optimizer):
    """Adam's state given to SGD or RMSprop failed at the first step with a KeyError traceback (once a bus error)
    and left a failed run directory: one line naming both optimisers, and no directory."""
    out = tmp_path / "new"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--init-from", str(trained), "--init-optimiser",
                     "--set", f"algorithm.optimizer={optimizer}", "--set", "run.total_frames=256")
    one_line_error(result, "--init-optimiser", "of 'adam'", f"algorithm.optimizer is '{optimizer}'",
                   "leave out --init-optimiser")
    assert not out.exists()
    fresh = run_cli("run", str(CANONICAL), "--out", str(out), "--init-from", str(trained), "--set",
                    f"algorithm.optimizer={optimizer}", "--set", "run.total_frames=256", "--set", "eval.episodes=1")
    assert fresh.returncode == 0, fresh.stderr  # without --init-optimiser, a fresh one of its own


def test_weights_trained_on_raw_observations_are_refused_by_a_normalising_recipe(trained, tmp_path):
    """The other way round was refused already; this way the new run normalised what the weights had seen raw."""
    out = tmp_path / "new"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--init-from", str(trained),
                     "--set", "env.normalize_observations=running", "--set", "run.total_frames=256")
    one_line_error(result, "--init-from", "normalises observations and its env did not", "raw observations")
    assert not out.exists()


def test_weights_of_an_env_acting_in_another_range_are_refused(tmp_path):
    """A run whose env acts in [-1, 1] (gymnasium's RescaleAction, as ``dataset.rescale_actions`` gives an
    offline run) continued on plain Pendulum-v1 ([-2, 2]) built and trained before, its critics reading actions
    at twice the scale they learned: one line naming both ranges, no directory; the same wrapper is accepted."""
    unit = 'env.wrappers=[{name="RescaleAction", kwargs={min_action=-1.0, max_action=1.0}}]'
    short = ["--set", "run.total_frames=64", "--set", "algorithm.learning_starts=32", "--set",
             "algorithm.batch_size=16", "--set", "eval.episodes=1", "--set", "eval.every_frames=0"]
    recipe, source = str(ROOT / "recipes" / "pendulum-sac.toml"), tmp_path / "unit"
    trained = run_cli("run", recipe, "--out", str(source), "--set", unit, *short)
    assert trained.returncode == 0, trained.stderr
    out = tmp_path / "plain"
    one_line_error(run_cli("run", recipe, "--out", str(out), "--init-from", str(source), *short),
                   "--init-from", "acted within [-1] to [1]", "acts within [-2] to [2]", "RescaleAction")
    assert not out.exists()
    same = run_cli("run", recipe, "--out", str(tmp_path / "same"), "--init-from", str(source), "--set", unit, *short)
    assert same.returncode == 0, same.stderr
