"""The one rollout (rlplug.core.rollout) on a real gymnasium env of three copies: the returns it counts, on
either road, and evaluation's, are those of a plain gymnasium loop acting with the same policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import CANONICAL, built_algorithm
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.core.collect import road_for
from rlplug.core.rollout import ArrayRoad, StepBuffers, TensorDictRoad, rollout
from rlplug.plugins.envs import make_gym
from rlplug.run.evaluation import evaluate

COPIES, SEED = 3, 5


@pytest.fixture(scope="module")
def policy():
    algorithm, _ = built_algorithm(CANONICAL, 0, [], batches=0)
    return algorithm.policy


def hand_returns(policy, per_copy: int, seeded_then_reset: bool = False) -> list[float]:
    """Each copy's first ``per_copy`` episode returns, in the order they end: gymnasium's own vector env
    (same-step autoreset, as rlplug's gym env), the policy called on TensorDicts, its greedy action.
    ``seeded_then_reset``: started as TorchRL starts an env (``set_seed`` resets, then ``reset``)."""
    vector = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * COPIES,
                                      autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    observation, _ = vector.reset(seed=SEED)
    if seeded_then_reset:
        observation, _ = vector.reset()
    running, done, returns = np.zeros(COPIES), np.zeros(COPIES, dtype=int), []
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        while (done < per_copy).any():
            acted = policy(TensorDict({"observation": torch.as_tensor(observation)}, batch_size=[COPIES]))
            observation, reward, terminated, truncated, _ = vector.step(acted.get("action").argmax(-1).numpy())
            running += reward
            for copy in np.flatnonzero(terminated | truncated):
                if done[copy] < per_copy:
                    returns.append(float(running[copy]))
                done[copy] += 1
                running[copy] = 0.0
    vector.close()
    return returns


def counted_returns(road, episodes: int) -> list[float]:
    """The first ``episodes`` returns of a rollout on ``road``, counted by its ``record``."""
    running, returns = np.zeros(COPIES), []

    def count(t, state, acted, transition) -> None:
        rewards, dones = road.outcome(transition)
        running[:] += rewards
        returns.extend(float(running[copy]) for copy in np.flatnonzero(dones))
        running[dones] = 0.0

    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout(road, road.start(SEED), until=lambda: len(returns) >= episodes, record=count)
    return returns[:episodes]


def test_the_array_road_counts_the_returns_of_a_plain_gymnasium_loop(policy):
    env = make_gym("CartPole-v1", num_envs=COPIES)
    road = road_for(env, policy, SEED, deterministic=True)
    assert isinstance(road, ArrayRoad)
    assert counted_returns(road, 4) == hand_returns(policy, 4)[:4]
    assert evaluate(env, policy, episodes=2 * COPIES, seed=SEED) == hand_returns(policy, 2), \
        "each copy's first two episodes"


def test_torchrls_road_counts_the_returns_of_a_plain_gymnasium_loop(policy):
    road = road_for(make_gym("CartPole-v1", num_envs=COPIES), policy, SEED, deterministic=True, array_road=False)
    assert isinstance(road, TensorDictRoad)
    assert counted_returns(road, 4) == hand_returns(policy, 4, seeded_then_reset=True)[:4]


def test_torchrls_road_started_again_after_some_copies_ended_starts_every_copy_anew(policy):
    road = road_for(make_gym("CartPole-v1", num_envs=COPIES), policy, SEED, deterministic=True, array_road=False)
    counted_returns(road, 1)  # stops after the step in which the first copy's episode ended, the others going on
    assert counted_returns(road, 4) == hand_returns(policy, 4, seeded_then_reset=True)[:4]


def test_step_buffers_keep_each_step_at_its_time_under_leading_rows():
    buffers = StepBuffers((2, 3), steps=4)
    for t in range(4):
        observation = np.full((2, 3, 5), t, dtype=np.float32)
        transition = (observation + 1, np.full((2, 3), t, dtype=np.float32), np.zeros((2, 3), bool),
                      np.ones((2, 3), bool), observation + 1)
        buffers(t, observation, (np.full((2, 3), -t), None), transition)
    columns = buffers.columns()
    assert columns["log_prob"] is None and columns["obs"].shape == (2, 3, 4, 5)
    assert (columns["obs"][:, :, 2] == 2).all() and (columns["next_obs"][1, 2, 3] == 4).all()
    assert columns["action"][0, 1].tolist() == [0, -1, -2, -3] and columns["truncated"].all()
