"""The Python API's recipe-as-a-dict, ``evaluate(episodes=N)`` and seeds (one after another or together), built
as ``rlplug run`` builds them (:mod:`rlplug.run.start`), which a stop by signal ends the same way."""

from __future__ import annotations

import json
import signal
import tomllib
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import CANONICAL, ROOT, one_line_error, run_cli, start_cli, wait_for
from tensordict import TensorDict

import rlplug

SHORT = {"run": {"total_frames": 512}, "eval": {"episodes": 4}, "loggers": [{"use": "csv"}]}


@pytest.mark.slow
def test_a_recipe_dict_builds_what_its_file_builds_and_is_left_unchanged(tmp_path):
    data = tomllib.loads(CANONICAL.read_text())
    before = tomllib.loads(CANONICAL.read_text())
    outcomes = []
    for recipe, name in ((data, "dict"), (CANONICAL, "file")):  # one after the other: torch's RNG is global
        agent = rlplug.Agent.from_recipe(recipe, out=tmp_path / name, **SHORT, **{"algorithm.lr": 3e-4})
        outcomes.append((agent.run.recipe.resolved(), agent.train()["frames"], agent.evaluate()))
    assert data == before, "the caller's dict is not changed by the overrides"
    assert outcomes[0][0]["algorithm"]["lr"] == 3e-4
    assert outcomes[0] == outcomes[1]  # the same recipe and seed: the same run, the same returns


def test_a_recipe_dict_is_validated_like_a_file():
    data = {"env": {"use": "gym", "id": "CartPole-v1"}, "algorithm": {"use": "ppo", "lrr": 1e-3}}
    with pytest.raises(rlplug.UserError, match=r"<recipe dict>: algorithm.lrr: unknown key 'lrr'.*did you mean 'lr'"):
        rlplug.Agent.from_recipe(data)
    with pytest.raises(rlplug.UserError, match=r"algorithm.epochs: .*must be >= 1"):
        rlplug.Agent.from_recipe({**data, "algorithm": {"use": "ppo"}}, **{"algorithm.epochs": 0})


@pytest.mark.slow
def test_evaluate_takes_a_number_of_episodes_from_the_runs_own_start_states(tmp_path):
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", **SHORT,
                                     env={"normalize_observations": "running"})
    agent.train()
    statistics = {k: v.clone() if hasattr(v, "clone") else v for k, v in agent.run.env_statistics().items()}
    default = agent.evaluate()
    three = agent.evaluate(episodes=3)
    assert len(default) == 4 and len(three) == 3
    assert agent.evaluate(episodes=3) == three  # deterministic, statistics frozen
    assert not Counter(three) - Counter(default), "the first three start states of the run's own evaluation"
    assert len(agent.evaluate(episodes=7)) == 7
    after = agent.run.env_statistics()
    assert all((after[k] == v).all() if hasattr(v, "all") else after[k] == v for k, v in statistics.items())
    for bad in (0, -1, 2.5, True):
        with pytest.raises(rlplug.UserError, match="episodes"):
            agent.evaluate(episodes=bad)


#: two seeds' short runs; PPO with the adaptive KL penalty, whose seeds cannot be computed at once (batched)
SEEDS_SHORT = {"run": {"total_frames": 512, "checkpoint_every_frames": 0}, "eval": {"episodes": 2}}
PPO_KL = ROOT / "recipes" / "cartpole-ppo-kl.toml"


@pytest.mark.slow
def test_seeds_train_together_unless_batched_is_false(tmp_path):
    """With ``batched=False``, each seed is a run of its own trained in turn: a recipe that cannot be batched
    trains, and no ``batched.json`` marks the directory; by default (the README's promise) or with
    ``batched=True``, the seeds train together, and such a recipe gets the same refusal as ``--batched``."""
    agents = rlplug.Agent.from_recipe(PPO_KL, out=tmp_path / "turn", seeds=[0, 3], batched=False, **SEEDS_SHORT)
    assert agents.seeds == [0, 3] and agents[3].run.recipe.run.seed == 3
    summaries = agents.train()
    assert {seed: (s["status"], s["frames"], s["seed"]) for seed, s in summaries.items()} == \
        {0: ("finished", 512, 0), 3: ("finished", 512, 3)}
    assert json.loads((tmp_path / "turn" / "seed-3" / "summary.json").read_text())["seed"] == 3
    assert not (tmp_path / "turn" / "batched.json").exists()
    agents.close()
    for together in ({}, {"batched": True}):
        with pytest.raises(rlplug.UserError, match="cannot compute several seeds at once") as caught:
            rlplug.Agent.from_recipe(PPO_KL, out=tmp_path / "together", seeds=[0, 3], **together, **SEEDS_SHORT)
        assert caught.value.path == "algorithm.loss" and str(PPO_KL) in str(caught.value)


@pytest.mark.slow
def test_batched_seeds_from_the_api_are_marked_for_resume(tmp_path):
    out = tmp_path / "together"
    agents = rlplug.Agent.from_recipe(CANONICAL, out=out, seeds=[1, 2], batched=True, **SEEDS_SHORT)
    assert {seed: s["status"] for seed, s in agents.train().items()} == {1: "finished", 2: "finished"}
    assert json.loads((out / "batched.json").read_text())["seeds"] == [1, 2]
    agents.close()
    result = run_cli("resume", str(out), "--set", "run.total_frames=1024")
    assert result.returncode == 0, result.stderr
    assert "seeds 1, 2, together" in result.stdout
    assert json.loads((out / "seed-2" / "summary.json").read_text())["frames"] == 1024


@pytest.mark.parametrize("seeds, overrides", [
    ([1, 1], {}), ([], {}), ([-1], {}), ("0-1", {}), ([0.5], {}), ([0, 1], {"run.seed": 3}),
])
def test_bad_seeds_are_one_line_errors(tmp_path, seeds, overrides):
    with pytest.raises(rlplug.UserError, match="distinct non-negative") as caught:
        rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "bad", seeds=seeds, **overrides)
    assert "\n" not in str(caught.value) and not (tmp_path / "bad").exists()


def test_batched_without_seeds_is_refused(tmp_path):
    with pytest.raises(rlplug.UserError, match="give seeds too"):
        rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", batched=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_signal_stops_seeds_together_with_each_ones_checkpoint(tmp_path):
    """The schedule a run alone follows: SIGTERM stops every seed after its step, each with a checkpoint and
    ``interrupted`` in its summary, and the command exits as a run alone does."""
    out = tmp_path / "together"
    process = start_cli("run", str(CANONICAL), "--seeds", "0-1", "--batched", "--out", str(out),
                        "--set", "run.total_frames=10000000", "--set", "eval.every_frames=0")
    wait_for(out / "seed-1" / "metrics.csv", process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    assert f"python -m rlplug resume {out}" in stderr and "Traceback" not in stderr
    for seed in (0, 1):
        summary = json.loads((out / f"seed-{seed}" / "summary.json").read_text())
        assert (summary["status"], summary["signal"]) == ("interrupted", "SIGTERM") and summary["frames"] > 0
        assert (out / f"seed-{seed}" / "checkpoint.pt").is_file()


def test_the_command_line_and_the_api_share_one_start():
    """``rlplug run`` and ``resume`` only parse and hand over: the run layer holds how a run is built, trained
    under signals and resumed."""
    import rlplug.cli.run as command

    for moved in ("train_until_done_or_stopped", "run_seeds", "resume_batched", "stopped_by"):
        assert not hasattr(command, moved), moved
    one_line_error(run_cli("run", str(CANONICAL), "--batched"), "--seeds")


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    """A CartPole PPO agent, built once (nothing here trains it far)."""
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path_factory.mktemp("api") / "run",
                                     **{"run.total_frames": 256, "eval.episodes": 1})
    yield agent
    agent.close()


@pytest.mark.parametrize("call, fragments", [
    (lambda a: a.select_action(np.zeros(3)), ["select_action(observation=...)", "shape (4,)", "(N, 4)",
                                              "got shape (3,)"]),
    (lambda a: a.select_action(np.zeros((2, 5))), ["select_action(observation=...)", "(N, 4)", "got shape (2, 5)"]),
    (lambda a: a.select_action("hello"), ["select_action(observation=...)", "shape (4,)", "got str 'hello'"]),
    (lambda a: a.select_action(np.array([0.0, np.nan, 0.0, 0.0])), ["select_action(observation=...)", "NaN"]),
    (lambda a: a.act({"observation": 1}), ["act(observation=...)", "TensorDict", "'observation' of shape [..., 4]",
                                           "got dict"]),
    (lambda a: a.act(TensorDict({"observation": torch.zeros(3)}, [])), ["act(observation=...)", "expected (4,)"]),
    (lambda a: a.act(TensorDict({"obs": torch.zeros(4)}, [])), ["act(observation=...)", "no 'observation'"]),
    (lambda a: a.train(max_frames="10"), ["train(max_frames='10')", "whole number"]),
    (lambda a: a.train(max_frames=-5), ["train(max_frames=-5)", "at least 1"]),
    (lambda a: a.train(max_episodes=0), ["train(max_episodes=0)", "at least 1"]),
    (lambda a: a.train(max_iters=2.5), ["train(max_iters=2.5)", "whole number"]),
    (lambda a: a.evaluate(episodes=10**9), ["evaluate(episodes=1000000000)", "at most 100000"]),
], ids=["short-observation", "wide-batch", "string", "nan", "act-dict", "act-shape", "act-key", "max-frames-str",
        "max-frames-negative", "max-episodes-zero", "max-iters-float", "evaluate-billion"])
def test_bad_arguments_are_one_clear_error_naming_the_argument(cartpole, call, fragments):
    """Each went down to torch (a shape error naming neither argument nor shape, a NaN action), hung (a billion
    evaluation episodes) or trained to the end (a limit of 0 or below): now one UserError, nothing trained."""
    with pytest.raises(rlplug.UserError) as caught:
        call(cartpole)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert cartpole.frames == 0


def test_good_observations_still_give_actions(cartpole):
    assert cartpole.select_action(np.zeros(4, dtype=np.float32)) in (0, 1)
    assert cartpole.select_action([0.0, 0.0, 0.0, 0.0]) in (0, 1)
    assert cartpole.select_action(np.zeros((3, 4))).shape == (3,)
    assert cartpole.act(TensorDict({"observation": torch.zeros(5, 4)}, [5]))["action"].shape[0] == 5
