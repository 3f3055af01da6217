"""The same recipe local or on Ray by one key: ``--set 'runner={use="ray", workers=2}'`` on every shipped
off-policy recipe. An update whose frames do not split over the workers (pendulum-sac's one env step on two
workers) takes every worker's envs one step instead, its gradient steps scaled with its frames (the recipe's
gradient steps per frame), and the user is told so in one line; in every mode and layout of the runner."""

from __future__ import annotations

import importlib.util
import json
import tomllib

import pytest
import torch
from conftest import ROOT, run_cli
from test_ray import ray_instance  # noqa: F401 (the module's local Ray instance, a fixture)

from rlplug.core.envs import build_env
from rlplug.errors import RlplugWarning, UserError
from rlplug.plugins.algorithms.offpolicy.data_parallel import cadence
from rlplug.recipe import load

pytestmark = pytest.mark.xdist_group("ray")  # the Ray tests run one after another (README)

ONE_KEY = 'runner={use="ray", workers=2}'
SAC = ROOT / "recipes" / "pendulum-sac.toml"
#: the shipped recipes of off-policy algorithms (the ones whose update is set in env steps)
OFF_POLICY = sorted(path for path in (ROOT / "recipes").glob("*.toml")
                    if "steps_per_update" in tomllib.loads(path.read_text())["algorithm"])
#: the simulators some recipes' envs need, which this machine may lack
SIMULATORS = {"halfcheetah-sac": "mujoco", "dmc-cheetah-run-sac": "dm_control"}


def test_every_shipped_off_policy_recipe_takes_the_one_key_and_keeps_its_gradient_steps_per_frame():
    assert len(OFF_POLICY) >= 9, OFF_POLICY  # dqn, sac (3), td3, ddpg (2), redq, crossq, mpo
    for path in OFF_POLICY:
        recipe = load(path, [ONE_KEY])  # validated, the one key included
        assert recipe.runner.params["workers"] == 2 and recipe.runner.title.startswith("runner 'ray'"), path
        config = recipe.algorithm.params
        envs = recipe.env.params.get("num_envs", 1)
        frames_per_batch = envs * config.get("steps_per_update", 1)
        unit = 2 * (envs // 2 if envs % 2 == 0 else envs)  # the workers' envs, each stepping alike
        gradient_steps = config.get("gradient_steps", 1)
        frames, steps = cadence(frames_per_batch, unit, gradient_steps)
        assert frames % unit == 0 and frames >= frames_per_batch, path
        assert steps / frames == pytest.approx(gradient_steps / frames_per_batch), path


@pytest.mark.slow
@pytest.mark.usefixtures("ray_instance")
@pytest.mark.parametrize("path", OFF_POLICY, ids=lambda path: path.stem)
def test_every_shipped_off_policy_recipe_collects_and_updates_on_ray_by_the_one_key(path):
    """Built as a run builds it, with the recipe's runner from the one key: one batch collected on the workers
    and one update; recurrent networks are the one refusal (the workers keep no hidden state), never the split."""
    simulator = SIMULATORS.get(path.stem)
    if simulator and importlib.util.find_spec(simulator) is None:
        pytest.skip(f"{path.name}: {simulator} is not installed here")
    recurrent = "lstm" in path.stem  # its batch_size counts whole sequences: the recipe's own
    small = [] if recurrent else ["algorithm.learning_starts=0", "algorithm.batch_size=2"]
    recipe = load(path, [ONE_KEY, *small, "run.seed=0"])
    env = build_env(recipe.env)
    algorithm = recipe.algorithm.build(observation_spec=env.observation_spec, action_spec=env.action_spec,
                                       device="cpu", seed=0, total_frames=recipe.run.total_frames)
    before, frames_per_batch = algorithm.config, algorithm.frames_per_batch
    runner = recipe.runner.build(device="cpu", seed=0)
    if recurrent:
        with pytest.raises(UserError, match="recurrent networks"):
            runner.collector(env, algorithm.policy, algorithm.frames_per_batch, 0, recipe=recipe, algorithm=algorithm)
        return
    splits = frames_per_batch % 2 == 0  # one env each (every shipped recipe's num_envs = 1)
    # the user is told that the recipe's one env becomes one per worker, and where the cadence is rounded
    with pytest.warns(RlplugWarning, match="1 env\\(s\\) do not divide among 2 workers") as caught:
        collection = runner.collector(env, algorithm.policy, algorithm.frames_per_batch, 0, recipe=recipe,
                                      algorithm=algorithm)
    assert splits or any("do not split over 2 workers" in str(warning.message) for warning in caught)
    try:
        batch = collection.collect()
        assert batch.numel() == algorithm.frames_per_batch == frames_per_batch + frames_per_batch % 2
        assert algorithm.config.gradient_steps * before.steps_per_update == \
            before.gradient_steps * algorithm.config.steps_per_update
        algorithm.update(batch)
        assert algorithm.frames == batch.numel() and algorithm.steps == algorithm.config.gradient_steps
    finally:
        collection.shutdown()


@pytest.mark.slow
@pytest.mark.usefixtures("ray_instance")
@pytest.mark.parametrize("layout", [[], ["runner.mode=gradients"], ["runner.storages=2"], ["runner.learners=2"]],
                         ids=["experience", "gradients", "storages", "learners"])
def test_pendulum_sac_by_the_one_key_takes_two_gradient_steps_for_two_frames_in_every_layout(layout):
    small = ["runner.resources_per_worker={num_cpus=0.5}", "runner.resources_per_learner={num_cpus=0.5}"]
    recipe = load(SAC, [ONE_KEY, *layout, *small, "algorithm.learning_starts=0", "algorithm.batch_size=2",
                        "run.seed=0"])
    env = build_env(recipe.env)
    algorithm = recipe.algorithm.build(observation_spec=env.observation_spec, action_spec=env.action_spec,
                                       device="cpu", seed=0, total_frames=recipe.run.total_frames)
    runner = recipe.runner.build(device="cpu", seed=0)
    with pytest.warns(RlplugWarning, match="each update takes 2"):
        collection = runner.collector(env, algorithm.policy, algorithm.frames_per_batch, 0, recipe=recipe,
                                      algorithm=algorithm)
    try:
        for _ in range(2):  # the first update fills the workers' buffers in gradient mode
            batch = collection.collect()
            assert batch.numel() == 2
            metrics = collection.update(algorithm, batch)
            collection.sync_weights()
        collection.before_checkpoint(algorithm)  # several learners: learner 0's state, its step count
        assert algorithm.frames == 4 and algorithm.steps == 4, metrics
    finally:
        collection.shutdown()


@pytest.mark.slow
def test_pendulum_sac_runs_on_ray_by_the_one_key_through_the_command_line(tmp_path):
    """``python -m rlplug run recipes/pendulum-sac.toml --set 'runner={use="ray", workers=2}'``, shortened: it
    trains, says once how its updates were rounded, and takes the recipe's gradient step per frame."""
    out = tmp_path / "run"
    sets = [ONE_KEY, "run.total_frames=128", "algorithm.learning_starts=64", "algorithm.batch_size=16",
            "eval.every_frames=0", "eval.episodes=1"]
    result = run_cli("run", str(SAC), *(p for s in sets for p in ("--set", s)), "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    notices = [line for line in result.stderr.splitlines() if "do not split over 2 workers" in line]
    assert len(notices) == 1 and "each update takes 2 (1 env step(s) on each worker) and 2 gradient step(s)" \
        in notices[0], result.stderr
    assert json.loads((out / "summary.json").read_text())["frames"] == 128
    state = torch.load(out / "checkpoint.pt", weights_only=True)["algorithm"]
    assert state["frames"] == 128 and state["steps"] == 2 * len(range(64, 129, 2))  # 2 an update from frame 64 on
