"""The ``torch-classic`` env plugin: gymnasium's classic-control envs in torch, equal to gymnasium's step for
step (observations, rewards, terminations, truncations), restarting only the copies that ended, reproducible
from a seed, with the ``gym`` env's specs, refusing the ids it does not have, and training a recipe by its
``use`` alone."""

from __future__ import annotations

import json
from importlib.util import find_spec

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import SHORT, one_line_error, run_cli
from torchrl.envs.utils import check_env_specs

import rlplug

IDS = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCarContinuous-v0"]
#: time limits short enough that episodes are truncated as well as terminated in a few hundred steps
LIMITS = {"CartPole-v1": 20, "Pendulum-v1": 120, "Acrobot-v1": 105, "MountainCarContinuous-v0": 95}


def policy(env_id: str, rng: np.random.Generator, observation: np.ndarray):
    """An action for gymnasium from one observation: random, but pumping energy into Acrobot and the mountain
    car often enough that their episodes also end by reaching the goal, and pushing past the bounds of the
    continuous actions (the envs clip; the mountain car's reward counts the action as given)."""
    if env_id == "CartPole-v1":
        return int(rng.integers(2))
    if env_id == "Acrobot-v1":
        return int(rng.integers(3)) if rng.random() < 0.2 else 2 * int(observation[5] > 0)
    if env_id == "Pendulum-v1":
        return rng.uniform(-2.5, 2.5, size=1).astype(np.float32)
    push = np.sign(observation[1]) * 1.2 + rng.normal(0, 0.3)
    return np.array([push], dtype=np.float32)


def torch_action(env, actions: list) -> torch.Tensor:
    """gymnasium's actions in the layout of the env's action spec (one-hot for discrete ones)."""
    if env.actions is not None:
        return torch.nn.functional.one_hot(torch.tensor(actions), env.actions)
    return torch.tensor(np.stack(actions))


@pytest.mark.parametrize("env_id", IDS)
def test_steps_equal_gymnasium(env_id):
    """Several copies, each started from its gymnasium twin's state after every reset, step as their twins do
    under the same actions for hundreds of steps: episodes end by termination and by truncation alike."""
    copies, steps, limit = 4, 300, LIMITS[env_id]
    rng = np.random.default_rng(0)
    twins = [gym.make(env_id, max_episode_steps=limit, disable_env_checker=True) for _ in range(copies)]
    env = rlplug.make("env", "torch-classic", id=env_id, num_envs=copies, max_episode_steps=limit)
    observations = [twin.reset(seed=k)[0] for k, twin in enumerate(twins)]
    following = env.reset()
    env.state = torch.tensor(np.stack([np.asarray(t.unwrapped.state, dtype=np.float64) for t in twins]))
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        actions = [policy(env_id, rng, o) for o in observations]
        step, following = env.step_and_maybe_reset(following.set("action", torch_action(env, actions)))
        restarted = {}
        for k, twin in enumerate(twins):
            observation, reward, terminated, truncated, _ = twin.step(actions[k])
            np.testing.assert_allclose(step["next", "observation"][k].numpy(), observation, rtol=1e-5, atol=1e-5)
            assert step["next", "reward"][k].item() == pytest.approx(float(reward), rel=1e-5, abs=1e-5)
            assert step["next", "terminated"][k].item() == terminated
            assert step["next", "truncated"][k].item() == truncated
            ends["terminated"] += terminated
            ends["truncated"] += truncated
            if terminated or truncated:
                observation = twin.reset(seed=int(rng.integers(2**31)))[0]
                restarted[k] = np.asarray(twin.unwrapped.state, dtype=np.float64)
            observations[k] = observation
        for k, state in restarted.items():  # the next episode starts where gymnasium's does
            env.state[k] = torch.from_numpy(state)
            following["observation"][k] = torch.from_numpy(observations[k])
    assert ends["truncated"] > 0
    assert ends["terminated"] > 0 or env_id == "Pendulum-v1", ends  # Pendulum never terminates


@pytest.mark.parametrize("env_id", [*IDS, pytest.param("MinAtar/Breakout-v1", marks=pytest.mark.skipif(
    find_spec("minatar") is None, reason='needs pip install "rlplug[minatar]"'))])
def test_specs_equal_the_gym_envs(env_id):
    """Every spec (observations with their bounds, actions, rewards, done flags; MinAtar's ``[10, 10, 4]``
    boolean grid) is the ``gym`` env's for the same id, so networks and algorithms built for one take the
    other."""
    ours = rlplug.make("env", "torch-classic", id=env_id, num_envs=3)
    theirs = rlplug.make("env", "gym", id=env_id, num_envs=3)
    try:
        for spec in ("full_observation_spec", "full_action_spec", "full_reward_spec", "full_done_spec",
                     "full_state_spec"):
            assert getattr(ours, spec) == getattr(theirs, spec), spec
        check_env_specs(ours)
    finally:
        theirs.close()


def test_only_the_copies_that_ended_restart():
    """``step_and_maybe_reset`` starts a new episode (a fresh start state, its step count at 0) for the copies
    that terminated or were truncated, and leaves the others where their step led."""
    env = rlplug.make("env", "torch-classic", id="CartPole-v1", num_envs=4, max_episode_steps=3)
    following = env.reset()
    env.state = torch.tensor([[2.39, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.01, 0.0, 0.0, 0.0],
                              [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    env.elapsed = torch.tensor([0, 0, 0, 2])  # copy 3 is at its last step
    push_right = torch.nn.functional.one_hot(torch.ones(4, dtype=torch.int64), 2)
    step, following = env.step_and_maybe_reset(following.set("action", push_right))
    assert step["next", "terminated"].reshape(-1).tolist() == [True, False, False, False]
    assert step["next", "truncated"].reshape(-1).tolist() == [False, False, False, True]
    ended = torch.tensor([True, False, False, True])
    after, before = following["observation"], step["next", "observation"]
    assert torch.equal(after[~ended], before[~ended])  # carried on
    assert not torch.isclose(after[ended], before[ended]).all(-1).any()  # restarted...
    assert (after[ended].abs() <= 0.05).all()  # ...from CartPole's start states
    assert torch.equal(env.state[ended].to(torch.float32), after[ended])
    assert env.elapsed.tolist() == [0, 1, 1, 0]
    assert not following["done"].any()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCarContinuous-v0"])
def test_a_seed_repeats_its_episodes(env_id):
    """The same seed gives the same start states and steps; another seed other ones; the copies differ."""
    def episode_starts(seed: int) -> torch.Tensor:
        torch.manual_seed(0)  # the same random actions every time: only the env's seed changes
        env = rlplug.make("env", "torch-classic", id=env_id, num_envs=5, max_episode_steps=4)
        env.set_seed(seed)
        return env.rollout(12, break_when_any_done=False)["observation"]

    first, again, other = episode_starts(3), episode_starts(3), episode_starts(4)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert len({tuple(start.tolist()) for start in first[:, 0]}) == 5


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_the_array_road_steps_as_torchrls_road(env_id):
    """On the CPU the env offers rlplug's array road (numpy in and out, what the collector takes there): from
    the same seed and actions it gives TorchRL's ``step_and_maybe_reset``'s transitions, restarts included."""
    rng = np.random.default_rng(1)
    tensordicts, arrays = (rlplug.make("env", "torch-classic", id=env_id, num_envs=3, max_episode_steps=15)
                           for _ in range(2))
    assert arrays.supports_tensor_steps
    tensordicts.set_seed(7)
    following = tensordicts.reset()
    observation = arrays.reset_arrays(seed=7)
    np.testing.assert_array_equal(following["observation"].numpy(), observation)
    ended = 0
    for _ in range(40):
        actions = [policy(env_id, rng, o) for o in observation]
        step, following = tensordicts.step_and_maybe_reset(following.set("action", torch_action(arrays, actions)))
        next_observation, reward, terminated, truncated, observation = arrays.step_arrays(np.stack(actions))
        np.testing.assert_array_equal(step["next", "observation"].numpy(), next_observation)
        np.testing.assert_array_equal(step["next", "reward"].reshape(-1).numpy(), reward)
        np.testing.assert_array_equal(step["next", "terminated"].reshape(-1).numpy(), terminated)
        np.testing.assert_array_equal(step["next", "truncated"].reshape(-1).numpy(), truncated)
        np.testing.assert_array_equal(following["observation"].numpy(), observation)
        assert reward.dtype == np.float32 and terminated.dtype == truncated.dtype == np.bool_
        ended += int((terminated | truncated).sum())
    assert ended > 0


def test_the_validated_ids_are_the_envs_it_has():
    """Validation reads the ids without loading torch; they must be the classes the factory builds."""
    from rlplug.plugins.envs import TORCH_CLASSIC_IDS
    from rlplug.plugins.envs.torch_classic import CLASSES

    assert list(CLASSES) == list(TORCH_CLASSIC_IDS) == IDS


def test_an_id_it_does_not_have_is_one_line_naming_its_ids(tmp_path):
    result = run_cli("run", "recipes/cartpole-ppo.toml", "--set", "env.use=torch-classic", "--set",
                     "env.id=LunarLander-v3", "--out", str(tmp_path / "run"))
    one_line_error(result, "env.id", "torch-classic has no 'LunarLander-v3'",
                   "CartPole-v1, Pendulum-v1, Acrobot-v1, MountainCarContinuous-v0")
    assert not (tmp_path / "run").exists()  # refused at validation


@pytest.mark.slow
def test_the_cartpole_recipe_trains_on_it(tmp_path):
    """The canonical CartPole PPO recipe with ``env.use`` switched (8 copies) trains and evaluates."""
    result = run_cli("run", "recipes/cartpole-ppo.toml", "--set", "env.use=torch-classic", *SHORT,
                     "--out", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] >= 1024, summary
    assert np.isfinite(summary["eval_return_mean"]), summary


@pytest.mark.slow
def test_a_resumed_run_ends_as_the_run_left_alone(tmp_path):
    """Episodes restart from the run's seed at each checkpoint (the env's stream included): a run resumed from
    its checkpoint ends with the parameters of the same run trained in one go."""
    flags = ["--set", "env.use=torch-classic", "--set", "run.checkpoint_every_frames=512", "--set",
             "eval.every_frames=0", "--set", "eval.episodes=1", "--set", "algorithm.anneal_lr=false",
             "--set", "algorithm.anneal_clip=false"]
    whole, halves = tmp_path / "whole", tmp_path / "halves"
    assert run_cli("run", "recipes/cartpole-ppo.toml", *flags, "--set", "run.total_frames=1024",
                   "--out", str(whole)).returncode == 0
    assert run_cli("run", "recipes/cartpole-ppo.toml", *flags, "--set", "run.total_frames=512",
                   "--out", str(halves)).returncode == 0
    assert run_cli("resume", str(halves), "--set", "run.total_frames=1024").returncode == 0
    ends = [torch.load(run / "checkpoint.pt", weights_only=False)["algorithm"]["policy"] for run in (whole, halves)]
    assert ends[0].keys() == ends[1].keys()
    assert all(torch.equal(ends[0][key], ends[1][key]) for key in ends[0])


def test_the_mountain_car_keeps_gymnasiums_precision_over_long_episodes():
    """gymnasium's mountain car steps float32 numpy scalars (float64 at an episode's first step, a Python float
    where the action is clipped): over whole 999-step episodes, the car pushed with and without clipping, to the
    flag, against the left wall and at its top speed, every observation, reward and flag is gymnasium's exactly
    (a step in float64 arithmetic drifts by 1e-5 within a few thousand steps)."""
    env_id, copies, steps = "MountainCarContinuous-v0", 8, 1100
    rng = np.random.default_rng(2)
    twins = [gym.make(env_id, disable_env_checker=True) for _ in range(copies)]
    env = rlplug.make("env", "torch-classic", id=env_id, num_envs=copies)
    observations = np.stack([twin.reset(seed=k)[0] for k, twin in enumerate(twins)])
    env.reset_arrays(seed=0)
    env.state = torch.tensor(np.stack([np.asarray(t.unwrapped.state, dtype=np.float64) for t in twins]))
    seen = {"terminated": 0, "truncated": 0, "wall": 0, "top speed": 0, "clipped": 0, "within": 0}
    for _ in range(steps):
        # half the copies pushed along their velocity (to the flag, two of them turned back short of it to fall
        # at full speed), half at random (to the time limit); often past the bounds
        pushes = rng.uniform(0.3, 1.3, (copies, 1)) * np.where(rng.random((copies, 1)) < 0.1, -1, 1)
        along = np.sign(observations[:, 1:]) * pushes
        along[2:4] = np.where(observations[2:4, :1] > 0.4, -1.3, along[2:4])
        actions = np.where(np.arange(copies)[:, None] < copies // 2, along, rng.uniform(-1.3, 1.3, (copies, 1)))
        actions = actions.astype(np.float32)
        ours = env.step_arrays(actions)[:4]
        for k, twin in enumerate(twins):
            observation, reward, terminated, truncated, _ = twin.step(actions[k])
            assert np.array_equal(ours[0][k], observation), (k, ours[0][k], observation)
            assert ours[1][k] == np.float32(reward) and ours[2][k] == terminated and ours[3][k] == truncated
            seen["terminated"] += terminated
            seen["truncated"] += truncated
            seen["wall"] += bool(observation[0] == np.float32(-1.2))
            seen["top speed"] += bool(abs(observation[1]) == np.float32(0.07))
            seen["clipped" if abs(actions[k, 0]) > 1 else "within"] += 1
            if terminated or truncated:
                observation = twin.reset(seed=int(rng.integers(2**31)))[0]
                env.state[k] = torch.from_numpy(np.asarray(twin.unwrapped.state, dtype=np.float64))
            observations[k] = observation
    assert all(seen.values()), seen
