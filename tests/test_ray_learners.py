"""Several learners on the ray runner (``runner.learners = N``): Ray actors holding copies of the algorithm, one
torch.distributed (gloo) group averaging every gradient step.

N learners on the shards of one batch take the step one learner takes on the whole batch (PPO's whole update,
SAC's gradient step); a short run through the command line trains, logs ``learners`` and ``allreduce_ms`` and
resumes; what several learners cannot train is refused in one line before any run directory exists; and on a
two-node cluster a learner lost with its node stops the run in one line, keeping the last checkpoint, from which
``resume`` goes on."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
import ray
import torch
from conftest import CANONICAL, ROOT, built_algorithm, one_line_error, pendulum_transitions, run_cli, start_cli
from test_ray import (
    IMPALA,
    TwoNodes,
    finished,
    metrics,
    ray_instance,  # noqa: F401 (the module's local Ray instance, a fixture)
    wait_for_training,
)

from rlplug.plugins.runners.ray.learners import LearnerGroup
from rlplug.plugins.runners.ray.runner import RayRunner
from rlplug.recipe import load

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # the Ray tests run one after another (README)

#: PPO's update in one minibatch per epoch (each learner's minibatch its shard), several epochs, advantages
#: left as they are (normalising per shard would differ from normalising the whole batch)
PPO = ["env.num_envs=4", "algorithm.frames_per_batch=64", "algorithm.minibatch_size=64", "algorithm.epochs=3",
       "algorithm.normalize_advantages=false"]
SAC = ROOT / "recipes" / "pendulum-sac.toml"
DQN = ROOT / "recipes" / "cartpole-dqn.toml"


@pytest.fixture(scope="module")
def cluster():
    """test_ray's two-node cluster (``tests/ray_cluster.py``), for this module."""
    nodes = TwoNodes()
    try:
        yield nodes
    finally:
        nodes.close()


def group_for(recipe_path, overrides: list[str], algorithm, learners: int = 2) -> LearnerGroup:
    recipe = load(recipe_path, ["run.seed=0", *overrides])
    specs = SimpleNamespace(observation_spec=algorithm.observation_spec, action_spec=algorithm.action_spec)
    return LearnerGroup(RayRunner(learners=learners), recipe, specs, algorithm)


@pytest.mark.usefixtures("ray_instance")
def test_two_ppo_learners_on_the_halves_of_a_batch_take_the_update_of_one_on_the_whole():
    driver, [batch] = built_algorithm(CANONICAL, 0, PPO)
    reference, _ = built_algorithm(CANONICAL, 0, PPO)  # the same seed: the same initial weights
    group = group_for(CANONICAL, PPO, driver)
    try:
        result = group.update(driver, batch.clone())
        reference.update(batch.clone())
        for mine, theirs in zip(driver.parameters, reference.parameters):
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)
        assert result["learners"] == 2.0 and result["allreduce_ms"] > 0 and driver.frames == reference.frames
        # the optimiser's state too, fetched as a checkpoint fetches it
        group.fetch_state(driver)
        mine, theirs = driver.optimiser.state_dict()["state"], reference.optimiser.state_dict()["state"]
        for key in theirs:
            torch.testing.assert_close(mine[key]["exp_avg"], theirs[key]["exp_avg"], rtol=1e-4, atol=1e-6)
    finally:
        group.stop()


def assert_two_learners_step_as_one(recipe_path, overrides: list[str], halves) -> None:
    """Two learners' gradient step, each on its half of a sample, equals one learner's step on the mean of the
    halves' gradients (what the whole sample's loss gives); learner ``i`` and the reference's half ``i`` draw
    their random numbers from seed ``i``, so a loss that samples actions sees the same noise in both."""
    driver, _ = built_algorithm(recipe_path, 0, overrides)
    reference, _ = built_algorithm(recipe_path, 0, overrides)  # the same seed: the same initial weights
    gradients = []
    for seed, half in enumerate(halves):
        torch.manual_seed(seed)
        gradients.append(reference.compute_gradients(half.clone())[0])
    reference.apply_gradients(gradients[0].apply(lambda a, b: (a + b) / 2, gradients[1]))

    group = group_for(recipe_path, overrides, driver)
    try:
        group.start(driver)

        def seeded_step(learner, seed, half):
            torch.manual_seed(seed)
            learner.allreduced(*learner.algorithm.compute_gradients(half, grads_to_cpu=False))
            return learner.algorithm.get_weights()

        weights = ray.get([actor.__ray_call__.remote(seeded_step, seed, half.clone())
                           for seed, (actor, half) in enumerate(zip(group.actors, halves))], timeout=120)
    finally:
        group.stop()
    expected = reference.get_weights()
    for copy in weights:  # the replicas stay identical, and equal to the whole sample's step
        assert set(copy.keys()) == set(expected.keys())
        for key in expected.keys():
            torch.testing.assert_close(copy.get(key), expected.get(key), rtol=1e-4, atol=1e-6)


@pytest.mark.usefixtures("ray_instance")
def test_two_sac_learners_on_the_halves_of_a_sample_take_the_step_of_one_on_the_whole():
    """SAC's loss samples actions: each half is given the noise of its own seed in both (the whole sample's
    loss is the mean of its halves' with that noise); one gradient step of every learner (actor, critics,
    entropy coefficient) and the targets moved."""
    overrides = ["algorithm.learning_starts=0", "algorithm.batch_size=32"]
    assert_two_learners_step_as_one(SAC, overrides, pendulum_transitions(64, seed=1).chunk(2))


@pytest.mark.usefixtures("ray_instance")
def test_two_dqn_learners_on_the_halves_of_a_sample_take_the_step_of_one_on_the_whole():
    """DQN's step (double Q-learning, the gradient clipped after the mean): one learner's on 64 transitions of
    a real CartPole rollout, taken by two learners on 32 each."""
    from rlplug.plugins.algorithms.offpolicy.base import replay_transitions

    overrides = ["algorithm.learning_starts=0", "algorithm.random_frames=0", "algorithm.batch_size=32"]
    algorithm, [batch] = built_algorithm(DQN, 0, overrides)
    sample = replay_transitions(batch, algorithm.config, algorithm.observation_key).reshape(-1)[:64]
    assert_two_learners_step_as_one(DQN, overrides, sample.chunk(2))


def test_two_learners_train_ppo_through_the_command_line_and_resume(tmp_path):
    """``python -m rlplug run recipes/cartpole-ppo.toml --set runner.use=ray --set runner.learners=2``,
    shortened; then ``resume`` further."""
    out = tmp_path / "run"
    sets = ["runner.use=ray", "runner.workers=2", "runner.learners=2", "run.total_frames=1024",
            "run.checkpoint_every_frames=512", "eval.every_frames=0", "eval.episodes=1"]
    result = run_cli("run", str(CANONICAL), *(p for s in sets for p in ("--set", s)), "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = metrics(out)
    assert rows and all(float(r["learners"]) == 2.0 and float(r["allreduce_ms"]) > 0 for r in rows)
    assert all(float(r["loss_critic"]) > 0 for r in rows)
    resumed = run_cli("resume", str(out), "--set", "run.total_frames=1536", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] == 1536
    assert float(metrics(out)[-1]["learners"]) == 2.0


def test_two_sac_learners_keep_the_whole_replay_in_each_checkpoint_and_resume_from_it(tmp_path):
    """Off-policy learners without storages each store the whole batch: the checkpoint (learner 0's state)
    holds every transition collected, and the learners of a resumed run start from all of them."""
    out = tmp_path / "run"
    sets = ["runner.use=ray", "runner.workers=2", "runner.learners=2", "algorithm.steps_per_update=64",
            "algorithm.gradient_steps=2", "algorithm.random_frames=128", "algorithm.learning_starts=128",
            "run.total_frames=512", "run.checkpoint_every_frames=256", "eval.every_frames=0", "eval.episodes=1"]

    def stored() -> int:
        return torch.load(out / "checkpoint.pt", weights_only=True)["algorithm"]["replay_buffer"]["len"]

    result = run_cli("run", str(SAC), *(p for s in sets for p in ("--set", s)), "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert stored() == 512
    assert all(float(r["learners"]) == 2.0 and float(r["buffer_size"]) == float(r["frames"]) for r in metrics(out))
    resumed = run_cli("resume", str(out), "--set", "run.total_frames=768", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert stored() == 768


@pytest.mark.parametrize("recipe, sets, fragments", [
    (CANONICAL, ["runner.mode=gradients"], ["runner.learners: runner.learners = 2", "mode = 'gradients'"]),
    (IMPALA, [], ["runner.learners: runner.learners = 2 is synchronous", "asynchronous"]),
    (CANONICAL, ["runner.learners=3"], ["runner.learners: runner.learners = 3", "8 env rows",
                                        "cannot be split evenly into 3"]),
    (SAC, ["algorithm.observation_preprocessor.use=running-standard-scaler", "runner.workers=1"],
     ["runner.learners: with runner.learners = 2", "observation_preprocessor", "runner.learners = 1"]),
])
def test_what_several_learners_cannot_train_is_one_line_and_no_run_directory(tmp_path, recipe, sets, fragments):
    out = tmp_path / "refused"
    sets = ["runner.use=ray", "runner.learners=2", *sets]
    result = run_cli("run", str(recipe), *(p for s in sets for p in ("--set", s)), "--out", str(out), timeout=120)
    one_line_error(result, *fragments)
    assert not out.exists()


def test_a_learner_lost_with_its_node_stops_the_run_keeping_its_checkpoint_and_resume_goes_on(cluster, tmp_path):
    """Two learners spread over the two nodes (as the workers are); the second node killed once a checkpoint
    exists: the run stops within a bounded time, one line naming the learner, the last checkpoint kept, and
    ``resume`` goes on with the head node alone."""
    cluster.ask("add")
    out = tmp_path / "run"
    process = start_cli("run", *cluster.run_arguments("runner.learners=2", "run.total_frames=10000000",
                                                        "run.checkpoint_every_frames=512"), "--out", str(out))
    wait_for_training(out, process)
    deadline = time.monotonic() + 300
    while not (out / "checkpoint.pt").exists():
        assert process.poll() is None, finished(process).stderr[-2000:]
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.2)
    cluster.ask("remove")
    one_line_error(finished(process, timeout=180), "runner.learners: Ray learner", "was lost",
                   f"keeping the last checkpoint; continue with: python -m rlplug resume {out}")
    assert json.loads((out / "summary.json").read_text())["status"] == "stopped"
    kept = int(sorted((out / "checkpoints").glob("frames-*.pt"))[-1].stem.removeprefix("frames-"))
    resumed = run_cli("resume", str(out), "--set", f"run.total_frames={kept + 512}", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] == kept + 512


def test_sigterm_to_the_run_s_process_group_stops_it_after_the_learners_update_with_a_checkpoint(tmp_path):
    """SIGTERM to the whole process group, as ``timeout``, a batch scheduler or a terminal's job control send
    it, while two SAC learners are in a long update: the local Ray instance's processes (which share the group)
    used to die of it, taking the learners and their state with them before the checkpoint the signal asks for
    ("Connection reset by peer"). Now the update ends, the checkpoint holds it, exit 143, and ``resume`` goes on
    from it."""
    import os
    import signal
    import subprocess
    import sys

    from conftest import cli_environment
    from test_ray import metrics as logged

    out = tmp_path / "run"
    sets = ["runner.use=ray", "runner.workers=2", "runner.learners=2", "algorithm.steps_per_update=32",
            "algorithm.gradient_steps=256", "algorithm.batch_size=64", "algorithm.learning_starts=64",
            "run.total_frames=10000000", "run.checkpoint_every_frames=0", "eval.every_frames=0", "eval.episodes=1"]
    command = [sys.executable, "-m", "rlplug", "run", str(SAC), *(p for s in sets for p in ("--set", s)), "--out",
               str(out)]
    process = subprocess.Popen(command, cwd=ROOT, env=cli_environment(None), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not ((out / "metrics.csv").exists() and any(float(r["frames"]) >= 128 for r in logged(out))):
            assert process.poll() is None, finished(process).stderr[-2000:]
            assert time.monotonic() < deadline, "no learning update logged within 300 s"
            time.sleep(0.2)
        time.sleep(0.5)  # into the next update: its 256 gradient steps take seconds on the learners
        os.killpg(process.pid, signal.SIGTERM)
        result = finished(process, timeout=240)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert result.returncode == 143, result.stderr[-2000:]
    assert "stopping after this gradient step and writing a checkpoint" in result.stderr
    summary = json.loads((out / "summary.json").read_text())
    frames = torch.load(out / "checkpoint.pt", weights_only=True)["frames"]
    assert summary["status"] == "interrupted" and frames == summary["frames"] >= 128
    resumed = run_cli("resume", str(out), "--set", f"run.total_frames={frames + 32}", timeout=600)  # one update
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] == frames + 32
