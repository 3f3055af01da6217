"""The example plugin's env and estimator, built the way a recipe builds them (through rlplug.make)."""

from __future__ import annotations

import pytest
import torch
from rlplug_example_plugin.corridor import CorridorEnv
from rlplug_example_plugin.estimators import discounted_returns
from tensordict import TensorDict
from torchrl.envs.utils import check_env_specs

import rlplug


def test_corridor_passes_torchrl_spec_check():
    env = rlplug.make("env", "corridor", length=4, max_steps=7)
    assert isinstance(env, CorridorEnv)
    check_env_specs(env, seed=0)
    check_env_specs(rlplug.make("env", "example:corridor", random_start=True), seed=1)


def test_corridor_dynamics():
    env = CorridorEnv(length=3, max_steps=10)
    state = env.reset()
    assert state["observation"].tolist() == [1.0, 0.0, 0.0]
    steps = []
    for action in (0, 1, 1):  # into the wall, then right twice to the goal
        step, state = env.step_and_maybe_reset(state.set("action", torch.tensor(action)))
        steps.append(step)
    assert [s["next", "reward"].item() for s in steps] == [0.0, 0.0, 1.0]
    assert [s["next", "terminated"].item() for s in steps] == [False, False, True]
    assert steps[-1]["next", "observation"].tolist() == [0.0, 0.0, 1.0]
    assert state["observation"].tolist() == [1.0, 0.0, 0.0]  # reset after the goal


def test_corridor_truncates_after_max_steps():
    env = CorridorEnv(length=5, max_steps=3)
    rollout = env.rollout(10, policy=lambda td: td.set("action", torch.tensor(0)))
    assert rollout.batch_size == torch.Size([3])
    assert rollout["next", "truncated"].squeeze(-1).tolist() == [False, False, True]
    assert not rollout["next", "terminated"].any()


def test_corridor_seeding_is_reproducible():
    def starts(seed):
        env = CorridorEnv(length=10, random_start=True)
        env.set_seed(seed)
        return [env.reset()["observation"].argmax().item() for _ in range(8)]

    assert starts(3) == starts(3)
    assert starts(3) != starts(4)
    assert max(starts(3)) < 9  # never starts on the goal


def test_corridor_length_is_checked():
    with pytest.raises(rlplug.UserError, match=">= 2"):
        rlplug.make("env", "corridor", length=1)


def batch(reward, done, terminated, value, next_value):
    column = lambda xs, dtype=torch.float32: torch.tensor(xs, dtype=dtype).unsqueeze(-1)  # noqa: E731
    return TensorDict({
        "state_value": column(value),
        "next": {"reward": column(reward), "done": column(done, torch.bool),
                 "terminated": column(terminated, torch.bool), "state_value": column(next_value)},
    }, batch_size=[len(reward)])


def test_mc_return_resets_at_done_and_bootstraps_at_cuts():
    gamma = 0.5
    # steps: 0 1 | 2 (truncated) | 3 4 (batch end)
    data = batch(reward=[0, 1, 0, 0, 2], done=[0, 1, 1, 0, 0], terminated=[0, 1, 0, 0, 0],
                 value=[0.1, 0.2, 0.3, 0.4, 0.5], next_value=[9, 9, 4, 9, 8])
    out = rlplug.make("estimator", "mc-return", gamma=gamma)(data)
    expected = [
        0 + gamma * (1 + 0),  # step 1 terminates: no bootstrap
        1,
        0 + gamma * 4,        # truncated: bootstrap from the next state's value
        0 + gamma * (2 + gamma * 8),
        2 + gamma * 8,        # batch end: bootstrap
    ]
    assert out["value_target"].squeeze(-1).tolist() == pytest.approx(expected)
    assert out["advantage"].squeeze(-1).tolist() == pytest.approx(
        [e - v for e, v in zip(expected, [0.1, 0.2, 0.3, 0.4, 0.5])])


def test_mc_return_without_bootstrap_and_with_batch_dims():
    reward = torch.ones(3, 4, 1)
    done = torch.zeros(3, 4, 1, dtype=torch.bool)
    returns = discounted_returns(reward, torch.full((3, 4, 1), 100.0), done, done, gamma=0.5, bootstrap=False)
    assert returns[:, :, 0].tolist() == [[1.875, 1.75, 1.5, 1.0]] * 3
