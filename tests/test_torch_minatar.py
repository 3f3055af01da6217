"""``torch-classic``'s MinAtar Breakout: equal to MinAtar's own env step for step (observations, rewards,
terminations) under the same actions and the same random draws (sticky actions, the ball's start), over
thousands of steps and many episodes, on TorchRL's road and rlplug's array road; the ``gym`` env's specs; a
time limit only where asked; reproducible from a seed; any device; and the MinAtar recipe trains on it."""

from __future__ import annotations

import copy
import json
from collections import deque
from importlib.util import find_spec

import numpy as np
import pytest
import torch
from conftest import one_line_error, run_cli

import rlplug
from rlplug.plugins.envs.torch_minatar import BALL, BRICK, BRICK_ROWS, PADDLE, TRAIL, Breakout

ENV_ID = "MinAtar/Breakout-v1"
needs_minatar = pytest.mark.skipif(
    find_spec("minatar") is None, reason="MinAtar is not installed: pip install \"rlplug[minatar]\" (or [test])")


class Draws:
    """The ``draw`` of a :class:`Breakout` that replays numbers given beforehand, one batch per call, in the
    order the env asks for them: MinAtar's own draws, recorded from its env before it makes them."""

    def __init__(self):
        self.queue: deque[list[float]] = deque()

    def __call__(self, count: int) -> torch.Tensor:
        assert self.queue, "the env drew a number MinAtar did not"
        numbers = self.queue.popleft()
        assert len(numbers) == count
        return torch.tensor(numbers, dtype=torch.float32)


def twins(copies: int, sticky: float) -> list:
    import gymnasium as gym
    from minatar.gym import register_envs

    if ENV_ID not in gym.registry:
        register_envs()
    made = [gym.make(ENV_ID, sticky_action_prob=sticky, disable_env_checker=True) for _ in range(copies)]
    for k, twin in enumerate(made):
        twin.reset(seed=100 + k)  # after a seed MinAtar draws sticky actions and starts from one RandomState
    return made


def next_rand(twin) -> float:
    """The number MinAtar's next sticky-action test will draw (read from a copy of its random state)."""
    return float(copy.deepcopy(twin.unwrapped.game.random).rand())


def next_start(twin) -> float:
    """MinAtar's next start as a number ``Breakout`` reads the same way: its ``randint(2)`` (1: the ball at the
    right wall) as 0.75 or 0.25."""
    return 0.75 if copy.deepcopy(twin.unwrapped.game.env.random).randint(2) else 0.25


def policy(rng: np.random.Generator, observation: np.ndarray) -> int:
    """Mostly moves the paddle to where a falling ball will reach row 8 (long games that clear all the bricks),
    sometimes plays at random (games lost)."""
    if rng.random() < 0.03:
        return int(rng.integers(3))
    (y, x), (trail_y, trail_x) = np.argwhere(observation[..., BALL])[0], np.argwhere(observation[..., TRAIL])[0]
    dx = 1 if x >= trail_x else -1
    for _ in range(8 - y if y > trail_y else 0):
        if 0 <= x + dx <= 9:
            x += dx
        else:  # a side wall: the ball stays in its column this step and turns back
            dx = -dx
    paddle = int(np.argwhere(observation[9, :, PADDLE])[0][0])
    return 0 if x == paddle else (1 if x < paddle else 2)


@needs_minatar
@pytest.mark.parametrize("road", ["tensordict", "arrays"])
@pytest.mark.parametrize("sticky", [0.0, 0.1])
def test_steps_equal_minatars(road, sticky):
    """8 copies and their MinAtar twins, given the same actions and MinAtar's random draws, give the same
    observations, rewards and terminations for 4,800 steps: games lost, bricks broken, a brick hit just after
    another entered (not broken), all bricks cleared and refilled, and sticky actions taken."""
    copies, steps = 8, 600
    rng = np.random.default_rng(0)
    games = twins(copies, sticky)
    draws = Draws()
    env = Breakout(copies, sticky_action_prob=sticky, draw=draws)
    draws.queue.append([next_start(twin) for twin in games])
    observations = [twin.reset()[0] for twin in games]
    if road == "tensordict":
        following = env.reset()
        ours = following["observation"].numpy()
    else:
        ours = env.reset_arrays()
    np.testing.assert_array_equal(ours, np.stack(observations))
    for k in range(0, copies, 2):  # half the first games have two bricks left, to be cleared and refilled soon
        bricks = games[k].unwrapped.game.env.brick_map
        bricks[BRICK_ROWS] = 0
        bricks[2, 4:6] = 1
        env.state["bricks"][k] = torch.from_numpy(bricks.astype(bool))
        observations[k] = games[k].unwrapped.game.state()
        if road == "tensordict":
            following["observation"][k] = torch.from_numpy(observations[k])
    seen = {"lost": 0, "reward": 0, "refilled": 0, "stuck": 0, "inside a brick": 0}
    for _ in range(steps):
        actions = [policy(rng, o) for o in observations]
        draws.queue.append([next_rand(twin) for twin in games])
        seen["stuck"] += sum(u < sticky for u in draws.queue[-1])
        expected = [twin.step(a) for twin, a in zip(games, actions, strict=True)]
        ended = [k for k, (*_, terminated, truncated, _) in enumerate(expected) if terminated or truncated]
        if ended:  # every copy draws a start; the copies that ended take their twin's
            draws.queue.append([next_start(twin) if k in ended else 0.0 for k, twin in enumerate(games)])
        if road == "tensordict":
            action = torch.nn.functional.one_hot(torch.tensor(actions), 3)
            step, following = env.step_and_maybe_reset(following.set("action", action))
            next_observation, reward, terminated, truncated = (
                step["next", key].numpy().reshape(copies, -1).squeeze(-1) if key != "observation"
                else step["next", key].numpy() for key in ("observation", "reward", "terminated", "truncated"))
            restarted = following["observation"].numpy()
        else:
            next_observation, reward, terminated, truncated, restarted = env.step_arrays(np.array(actions))
        assert not draws.queue  # each draw asked for once, when MinAtar made it
        for k, (observation, twin_reward, twin_terminated, twin_truncated, _) in enumerate(expected):
            np.testing.assert_array_equal(next_observation[k], observation)
            assert reward[k] == twin_reward and terminated[k] == twin_terminated and truncated[k] == twin_truncated
            seen["reward"] += twin_reward
            seen["refilled"] += observation[..., BRICK].sum() > observations[k][..., BRICK].sum()
            seen["inside a brick"] += (observation[..., BALL] & observation[..., BRICK]).any()  # hit just after one
            if k in ended:
                seen["lost"] += 1
                observation = games[k].reset()[0]
            np.testing.assert_array_equal(restarted[k], observation)
            observations[k] = observation
    assert seen["lost"] >= 20 and seen["reward"] >= 200 and seen["refilled"] >= 2, seen
    assert seen["stuck"] >= 100 or sticky == 0, seen
    assert seen["inside a brick"] >= 20, seen


@needs_minatar
def test_a_ball_that_just_broke_a_brick_enters_the_next_ones():
    """MinAtar's rarest rule, which play seldom reaches: on the steps right after breaking a brick the ball goes
    into the bricks it hits without breaking them, as long as it hits one each step."""
    game = twins(1, 0.0)[0].unwrapped.game
    env = Breakout(1, sticky_action_prob=0.0)
    env.reset()
    bricks = np.zeros((10, 10))
    for y, x in ((3, 4), (5, 3), (6, 2)):  # above-left of the ball, then on its way back down
        bricks[y, x] = 1
    board = {"ball_x": 5, "ball_y": 4, "ball_dir": 0, "last_x": 6, "last_y": 5, "paddle": 8}
    for key, value in board.items():
        env.state[key] = torch.tensor([value])
        setattr(game.env, {"paddle": "pos"}.get(key, key), value)
    game.env.brick_map = bricks
    env.state["bricks"] = torch.from_numpy(bricks.astype(bool)).unsqueeze(0)
    rewards = []
    for _ in range(4):
        reward, _ = game.act(0)
        _, ours, _ = env.step_arrays(np.array([0]))[:3]
        np.testing.assert_array_equal(env.observe(env.state)[0].numpy(), game.state())
        assert ours[0] == reward
        rewards.append(reward)
    assert rewards == [1, 0, 0, 0] and game.state()[..., BRICK].sum() == 2


@needs_minatar
def test_a_lost_game_stepped_again_stays_lost():
    """TorchRL's plain ``step`` restarts nothing: a lost game stepped again stays as it was, reward 0, still
    terminated, as MinAtar's does (its ball from the left wall passes the still paddle on the 6th step)."""
    game = twins(1, 0.0)[0].unwrapped.game
    env = Breakout(1, sticky_action_prob=0.0, draw=lambda count: torch.zeros(count))  # the left wall's start
    game.env.random.seed(0)
    while game.env.reset() or game.env.ball_x != 0:  # MinAtar's start at the left wall too
        pass
    state, ended = env.reset(), []
    for _ in range(10):
        reward, terminal = game.act(0)
        state = env.step(state.set("action", torch.tensor([[1, 0, 0]])))["next"]
        np.testing.assert_array_equal(state["observation"][0].numpy(), game.state())
        assert state["reward"].item() == reward and state["terminated"].item() == terminal
        ended.append(terminal)
    assert ended == [False] * 5 + [True] * 5


def test_no_time_limit_but_the_one_asked_for():
    """MinAtar's id has no time limit: its games end only when the ball is lost, unless ``max_episode_steps``
    sets a limit, which truncates the copies that reach it (a ball from row 3 needs 6 steps to be lost)."""
    torch.manual_seed(0)
    endless = rlplug.make("env", "torch-classic", id=ENV_ID, num_envs=8)
    played = endless.rollout(300, break_when_any_done=False)
    assert played["next", "terminated"].any() and not played["next", "truncated"].any()
    limited = rlplug.make("env", "torch-classic", id=ENV_ID, num_envs=8, max_episode_steps=5)
    played = limited.rollout(20, break_when_any_done=False)
    truncated = played["next", "truncated"].squeeze(-1)
    assert truncated[:, [4, 9, 14, 19]].all() and truncated.sum() == 8 * 4
    assert not played["next", "terminated"].any()


def test_a_seed_repeats_its_games():
    """The same seed gives the same starts and sticky actions, whatever the env played before (a seed forgets
    the actions before, which sticky actions repeat); another seed other ones."""
    def play(seed: int, before: int = 0) -> torch.Tensor:
        env = rlplug.make("env", "torch-classic", id=ENV_ID, num_envs=16)
        if before:
            env.rollout(before, break_when_any_done=False)
        torch.manual_seed(0)  # the same random actions every time: only the env's seed changes
        env.set_seed(seed)
        return env.rollout(60, break_when_any_done=False)["observation"]

    first, again, other = play(3), play(3, before=25), play(4)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_the_games_run_on_the_device_as_on_the_cpu(device):
    """On any device the copies step where their tensors are, and give the CPU's games for the same draws."""
    def play(on: str) -> torch.Tensor:
        numbers = torch.Generator().manual_seed(5)
        env = rlplug.make("env", "torch-classic", id=ENV_ID, num_envs=32, device=on)
        env.draw = lambda count: torch.rand(count, generator=numbers).to(on)
        actions = torch.Generator().manual_seed(6)
        following, observations = env.reset(), []
        for _ in range(200):
            action = torch.nn.functional.one_hot(torch.randint(3, (32,), generator=actions), 3).to(on)
            step, following = env.step_and_maybe_reset(following.set("action", action))
            assert step.device == torch.device(on) and step["next", "observation"].device == torch.device(on)
            observations.append(step["next", "observation"].cpu())
        return torch.stack(observations)

    assert torch.equal(play(device), play("cpu"))


def test_an_id_it_does_not_have_is_one_line_naming_breakout(tmp_path):
    result = run_cli("run", "recipes/minatar-breakout-ppo.toml", "--set",
                     'env={use="torch-classic", id="MinAtar/Breakout-v0"}', "--out", str(tmp_path / "run"))
    one_line_error(result, "env.id", "torch-classic has no 'MinAtar/Breakout-v0'", "did you mean",
                   "MountainCarContinuous-v0, MinAtar/Breakout-v1")
    assert not (tmp_path / "run").exists()  # refused at validation


@pytest.mark.slow
def test_the_minatar_recipe_trains_on_it(tmp_path):
    """MinAtar's PPO recipe with its env switched to torch-classic trains and evaluates through the CLI."""
    result = run_cli("run", "recipes/minatar-breakout-ppo.toml", "--set",
                     'env={use="torch-classic", id="MinAtar/Breakout-v1", num_envs=8, max_episode_steps=10000}',
                     "--set", "algorithm.frames_per_batch=512", "--set", "run.total_frames=1024", "--set",
                     "eval.every_frames=0", "--set", "eval.episodes=2", "--out", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] >= 1024, summary
    assert np.isfinite(summary["eval_return_mean"]), summary
