"""Atari's training-only shaping (episodic life, clipped rewards) on the ``gym`` env, off in evaluation; the
Atari and MinAtar recipes' envs, where ale-py and minatar are installed (the ``atari`` and ``minatar`` extras)."""

from __future__ import annotations

import importlib.util
import tomllib

import gymnasium as gym
import numpy as np
import pytest
from conftest import ROOT

from rlplug.plugins.envs import known_gym_id, make_gym


class ThreeLives(gym.Env):
    """Observation: the step count of the game; reward 2 per step; a life lost every 5 steps, 3 lives."""

    observation_space = gym.spaces.Box(0, 100, (1,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {"lives": 3}

    def step(self, action):
        self.t += 1
        lives = 3 - self.t // 5
        return np.array([self.t], dtype=np.float32), 2.0, lives == 0, False, {"lives": lives}


gym.register("ThreeLives-v0", entry_point=ThreeLives)


def play(env, steps: int = 16):
    env.reset_arrays(seed=0)
    return [env.step_arrays(np.zeros(2, dtype=np.int64)) for _ in range(steps)]


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_a_lost_life_ends_the_training_episode_and_the_game_goes_on(vectorization):
    env = make_gym("ThreeLives-v0", num_envs=2, episodic_life=True, clip_rewards=1.0, vectorization=vectorization)
    try:
        steps = play(env)
        ends = [t + 1 for t, step in enumerate(steps) if step.terminated[0]]
        assert ends == [5, 10, 15]
        assert [steps[t - 1].next_observation[0, 0] for t in ends] == [5, 10, 15]  # the state the life ended in
        assert steps[4].observation[0, 0] == 5 and steps[5].observation[0, 0] == 6  # the game went on from there
        assert steps[14].observation[0, 0] == 0  # the game over reset the game
        assert all(step.reward[0] == 1.0 for step in steps)

        env.set_training(False)  # evaluation: whole games, the env's own rewards
        steps = play(env)
        assert [t + 1 for t, step in enumerate(steps) if step.terminated[0]] == [15]
        assert all(step.reward[0] == 2.0 for step in steps)
    finally:
        env.close()


def test_torchrls_road_sees_the_same_episode_ends():
    env = make_gym("ThreeLives-v0", num_envs=2, episodic_life=True)
    try:
        env.set_seed(0)
        rollout = env.rollout(16, break_when_any_done=False)
        ends = (np.flatnonzero(rollout.get(("next", "terminated"))[0, :, 0].numpy()) + 1).tolist()
        assert ends == [5, 10, 15]
        assert rollout.get(("next", "observation"))[0, 4, 0].item() == 5
        assert rollout.get("observation")[0, 5, 0].item() == 5  # went on from the life's last state
    finally:
        env.close()


def test_evaluation_counts_the_envs_own_rewards_whatever_training_clips(tmp_path):
    from rlplug import Agent

    agent = Agent.from_recipe(ROOT / "recipes" / "cartpole-ppo.toml", out=tmp_path / "run", **{
        "env.clip_rewards": 0.5, "run.total_frames": 512, "eval.episodes": 3, "eval.every_frames": 0})
    try:
        agent.train()
        returns = agent.evaluate()
        assert all(r >= 8 and float(r).is_integer() for r in returns), returns  # CartPole pays 1 a step
    finally:
        agent.close()


def test_an_atari_or_minatar_id_without_its_package_says_which_extra(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name in ("ale_py", "minatar") else find_spec(name, *args))
    assert 'pip install "rlplug[atari]"' in known_gym_id("ALE/NoSuchGame-v5")
    assert 'pip install "rlplug[atari]"' in known_gym_id("NoSuchGameNoFrameskip-v4")
    assert 'pip install "rlplug[minatar]"' in known_gym_id("MinAtar/NoSuchGame-v1")
    assert "module" in known_gym_id("ale_py:ALE/Breakout-v5")  # still never an import


def recipe_env(name: str, **changes):
    """The env of ``recipes/NAME.toml`` as the recipe builds it, with ``changes``."""
    from rlplug.core.envs import build_env
    from rlplug.recipe import validate

    table = tomllib.loads((ROOT / "recipes" / f"{name}.toml").read_text())["env"]
    return build_env(validate({"env": {**table, **changes}, "algorithm": {"use": "ppo"}}, file=name).env)


@pytest.mark.skipif(importlib.util.find_spec("ale_py") is None or importlib.util.find_spec("cv2") is None,
                    reason='needs the atari extra: pip install "rlplug[atari]"')
def test_the_breakout_recipes_env_gives_stacked_84x84_frames_and_shapes_training_only():
    env = recipe_env("breakout-ppo", num_envs=2, vectorization="sync")
    try:
        assert tuple(env.observation_spec["observation"].shape) == (2, 4, 84, 84)
        rng = np.random.default_rng(0)
        actions = rng.integers(0, 4, (400, 2))
        seen = {}
        for training in (True, False):
            env.set_training(training)
            env.reset_arrays(seed=1)
            steps = [env.step_arrays(a) for a in actions]
            assert steps[0].observation.dtype == np.uint8
            seen[training] = (sum(int(s.terminated.sum()) for s in steps), max(float(s.reward.max()) for s in steps))
        assert seen[True][0] > seen[False][0]  # lives end training episodes, not evaluation's
        assert seen[True][1] <= 1.0
    finally:
        env.close()


@pytest.mark.skipif(importlib.util.find_spec("minatar") is None, reason='needs pip install "rlplug[minatar]"')
def test_the_minatar_recipes_env_gives_channels_first_float_grids():
    env = recipe_env("minatar-breakout-ppo", num_envs=2)
    try:
        observation = env.reset_arrays(seed=0)
        assert observation.shape == (2, 4, 10, 10) and observation.dtype == np.float32
        assert set(np.unique(observation)) <= {0.0, 1.0} and observation.sum() > 0
    finally:
        env.close()
