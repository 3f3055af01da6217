"""The transform kind: TorchRL's transforms from [[env.transforms]], in order, on training and evaluation envs,
with returns always in the env's own reward units."""

from __future__ import annotations

import copy
import tomllib

import pytest
import torch
from conftest import CANONICAL, run_cli

import rlplug
from rlplug.core.collect import array_road_open
from rlplug.core.transformed import build_transformed
from rlplug.errors import UserError
from rlplug.recipe import validate
from rlplug.run.evaluation import build_eval_env

BASE = tomllib.loads(CANONICAL.read_text())


def recipe_with(transforms: list[dict], **env):
    data = copy.deepcopy(BASE)
    data["env"].update(num_envs=2, **env)
    data["env"]["transforms"] = transforms
    return validate(data, file="test.toml")


def steps(env, count: int = 3):
    state, taken = env.reset(), []
    for _ in range(count):
        step, state = env.step_and_maybe_reset(env.rand_action(state))
        taken.append(step)
    return taken


@pytest.mark.parametrize("transforms, reward", [
    ([{"use": "RewardScaling", "scale": 2.0}, {"use": "RewardScaling", "loc": 1.0}], 3.0),
    ([{"use": "RewardScaling", "loc": 1.0}, {"use": "RewardScaling", "scale": 2.0}], 4.0),
])
def test_transforms_apply_in_order_and_the_env_reward_is_kept(transforms, reward):
    env = build_transformed(recipe_with(transforms).env, device="cpu")
    for step in steps(env):
        assert torch.all(step.get(("next", "reward")) == reward)
        assert torch.all(step.get(("next", "env_reward")) == 1.0)  # CartPole's own reward


TRANSFORMS = {
    "StepCounter": {},  # max_steps on the gym env's copies is refused (tests/test_env_roads.py)
    "RewardScaling": {"scale": 0.1},
    "RewardSum": {},
    "ObservationNorm": {"loc": [0.0, 0.0, 0.0, 0.0], "scale": 2.0},
    "VecNorm": {},
    "CatFrames": {"N": 3},
    "CatTensors": {"in_keys": ["observation"], "out_key": "features"},
    "DoubleToFloat": {},
    "RenameTransform": {"in_keys": ["observation"], "out_keys": ["state"]},
    "ClipTransform": {"in_keys": ["observation"], "low": -0.01, "high": 0.01},
    "FrameSkipTransform": {"frame_skip": 2},
    "TimeMaxPool": {"in_keys": ["observation"], "T": 2},
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_each_transform_runs_on_a_gymnasium_env(name):
    env = build_transformed(recipe_with([{"use": name, **TRANSFORMS[name]}]).env, device="cpu")
    for step in steps(env, 6):
        assert step.get(("next", "env_reward")).shape == (2, 1)


def test_transforms_do_what_torchrl_says():
    env = build_transformed(recipe_with([{"use": "CatFrames", "N": 3},
                                         {"use": "ClipTransform", "in_keys": ["observation"], "low": -0.01,
                                          "high": 0.01}]).env, device="cpu")
    assert env.observation_spec["observation"].shape == (2, 12)
    taken = steps(env, 4)
    assert all(step.get("observation").abs().max() <= 0.01 for step in taken)
    counted = build_transformed(validate({**BASE, "env": {"use": "torchrl-pendulum", "num_envs": 2, "transforms": [
        {"use": "StepCounter", "max_steps": 4}]}}, file="test.toml").env, device="cpu")
    assert steps(counted, 4)[-1].get(("next", "truncated")).all()  # StepCounter cut every episode at 4 steps
    frame_skip = build_transformed(recipe_with([{"use": "FrameSkipTransform", "frame_skip": 3}]).env, device="cpu")
    assert torch.all(steps(frame_skip, 1)[0].get(("next", "env_reward")) == 3.0)  # three CartPole steps


def test_the_eval_env_gets_the_same_transforms_and_the_training_statistics():
    recipe = recipe_with([{"use": "VecNorm"}, {"use": "CatFrames", "N": 2}, {"use": "StepCounter"}])
    train, evaluation = build_transformed(recipe.env, device="cpu"), build_eval_env(recipe)
    assert evaluation.batch_size != train.batch_size
    assert evaluation.observation_spec["observation"].shape[-1] == train.observation_spec["observation"].shape[-1] == 8
    assert "step_count" in evaluation.observation_spec.keys()
    steps(train, 20)
    evaluation.load_statistics(train.statistics())
    evaluation.set_training(False)
    frozen = {k: v.clone() for k, v in evaluation.statistics()["transforms[0]"]["_extra_state"].items()}
    steps(evaluation, 5)
    after = evaluation.statistics()["transforms[0]"]["_extra_state"]
    assert all(torch.equal(frozen[k], after[k]) for k in frozen)
    assert all(torch.equal(v, train.statistics()["transforms[0]"]["_extra_state"][k]) for k, v in after.items())


def test_without_transforms_the_gym_env_keeps_the_array_road(tmp_path):
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "a", run={"total_frames": 256})
    assert array_road_open(agent.run.env, agent.run.algorithm.policy)
    transformed = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "b", run={"total_frames": 256},
                                           env={"transforms": [{"use": "RewardScaling", "scale": 0.5}]})
    assert not array_road_open(transformed.run.env, transformed.run.algorithm.policy)


def test_the_gym_frame_stack_option_is_torchrl_catframes_on_the_array_road():
    """``frame_stack = k`` (gymnasium's wrapper, kept for the array road) and ``CatFrames(N=k)`` (TorchRL's
    transform) are one meaning: the same observations step for step, across episode ends. Fails if either
    stacks newest first, pads a new episode with zeros, or packs the frames in another order."""
    stacked = build_transformed(recipe_with([], frame_stack=3).env, device="cpu")
    catted = build_transformed(recipe_with([{"use": "CatFrames", "N": 3, "dim": -1, "in_keys": ["observation"]}]).env,
                               device="cpu")
    stacked.set_seed(3)
    catted.set_seed(3)
    mine, theirs = stacked.reset(), catted.reset()
    assert torch.equal(mine.get("observation"), theirs.get("observation"))
    actions, ended = torch.Generator().manual_seed(0), 0
    for _ in range(60):
        action = torch.nn.functional.one_hot(torch.randint(0, 2, (2,), generator=actions), 2)
        step_mine, mine = stacked.step_and_maybe_reset(mine.set("action", action))
        step_theirs, theirs = catted.step_and_maybe_reset(theirs.set("action", action.clone()))
        assert torch.equal(step_mine.get(("next", "observation")), step_theirs.get(("next", "observation")))
        assert torch.equal(mine.get("observation"), theirs.get("observation"))
        ended += int(step_mine.get(("next", "done")).sum())
    assert ended >= 2  # random CartPole episodes last about 20 steps: the padding after a reset was compared


@pytest.mark.parametrize("transforms, where, words", [
    ([{"use": "RewardScalin"}], "env.transforms[0].use", ["did you mean 'RewardScaling'"]),
    ([{"use": "StepCounter"}, {"use": "RewardScaling", "scale": "x"}], "env.transforms[1].scale", ["number"]),
    ([{"use": "CatFrames"}], "env.transforms[0]", ["missing required key 'N'"]),
    ([{"use": "StepCounter", "max_step": 3}], "env.transforms[0].max_step", ["did you mean 'max_steps'"]),
])
def test_bad_transform_tables_name_their_key(transforms, where, words):
    with pytest.raises(UserError) as raised:
        recipe_with(transforms)
    assert where in str(raised.value) and all(w in str(raised.value) for w in words)


@pytest.mark.parametrize("transforms, where, words", [
    ([{"use": "StepCounter"}, {"use": "CatFrames", "N": 2, "in_keys": ["pixels"]}], "env.transforms[1]",
     ["'pixels'", "observation"]),
    ([{"use": "ObservationNorm", "loc": [0.0, 1.0], "scale": 1.0}], "env.transforms[0]", ["does not apply"]),
    ([{"use": "RewardScaling", "scale": 0.5}, {"use": "FrameSkipTransform", "frame_skip": 2}],
     "env.transforms[1]", ["before env.transforms[0]"]),
])
def test_transforms_that_do_not_fit_the_env_fail_before_training(transforms, where, words):
    with pytest.raises(UserError) as raised:
        build_transformed(recipe_with(transforms).env, device="cpu")
    assert str(raised.value).startswith(f"{where}:") and all(w in str(raised.value) for w in words)
    assert "\n" not in str(raised.value)


@pytest.mark.slow
def test_a_run_with_scaled_rewards_reports_the_env_own_returns(tmp_path):
    agent = rlplug.Agent.from_recipe(
        CANONICAL, out=tmp_path / "run", run={"total_frames": 8192}, eval={"episodes": 4},
        env={"transforms": [{"use": "RewardScaling", "scale": 0.1}, {"use": "VecNorm"}]},
        loggers=[{"use": "csv"}])
    summary = agent.train()
    assert summary["eval_return_mean"] > 50  # scaled by 0.1 the reward could not sum past 50
    assert summary["train_return_recent"] > 9  # CartPole episodes last 9 steps or more: 0.9 scaled
    # the VecNorm statistics come back from the checkpoint
    reloaded = rlplug.Agent.load(tmp_path / "run" / "checkpoint.pt", out=tmp_path / "again")
    assert min(reloaded.evaluate()) > 50


@pytest.mark.slow
def test_list_shows_the_transform_kind():
    result = run_cli("list")
    assert result.returncode == 0, result.stderr
    for name in ("RewardScaling", "VecNorm", "CatFrames", "FrameSkipTransform", "TimeMaxPool", "StepCounter"):
        assert name in result.stdout
    assert "transform" in result.stdout


@pytest.mark.slow
def test_a_bad_transform_is_one_line_naming_the_key(tmp_path):
    recipe = tmp_path / "bad.toml"
    recipe.write_text(CANONICAL.read_text() + '\n[[env.transforms]]\nuse = "StepCounter"\n\n'
                      '[[env.transforms]]\nuse = "RewardScaling"\nscale = "big"\n')
    result = run_cli("run", str(recipe), "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(recipe) in lines[0] and "env.transforms[1].scale" in lines[0]
    assert not (tmp_path / "run").exists()


def test_a_transformed_env_declares_the_env_reward_it_keeps():
    """The env's own reward, kept beside the transformed one, is in the specs (an observation entry, zero at a
    reset): TorchRL's ``check_env_specs`` holds for envs built as a run builds them, and batched envs pass it
    on (``SerialEnv`` drops an undeclared entry). No network reads it, nor is it another reward."""
    from torchrl.envs import SerialEnv
    from torchrl.envs.utils import check_env_specs

    from rlplug.core.envs import build_env
    from rlplug.core.observations import one_observation
    from rlplug.core.transformed import with_transforms
    from rlplug.plugins.envs.torchrl_envs import BatchedPendulum

    for transforms in ([{"use": "RewardScaling", "scale": 0.5}], [{"use": "StepCounter"}]):
        env = build_env(recipe_with(transforms).env, device="cpu")
        check_env_specs(env, seed=0)
        assert env.observation_spec["env_reward"] == env.reward_spec.clone()
        assert env.reward_keys == ["reward"]
        assert torch.all(env.reset().get("env_reward") == 0)
    serial = SerialEnv(2, lambda: rlplug.make("env", "torch-classic", id="CartPole-v1", num_envs=1, transforms=[
        {"use": "RewardScaling", "scale": 0.5}]))
    taken = serial.rollout(4, break_when_any_done=False)
    assert torch.all(taken.get(("next", "env_reward")) == 1.0) and torch.all(taken.get(("next", "reward")) == 0.5)
    # an env without an 'observation' entry has its entries gathered into one, the kept reward left out
    scaled = recipe_with([{"use": "RewardScaling", "scale": 0.5}]).env.transforms
    plain = one_observation(BatchedPendulum(2))
    gathered = one_observation(with_transforms(BatchedPendulum(2), scaled, {"device": "cpu"}))
    assert gathered.observation_spec["observation"] == plain.observation_spec["observation"]
