"""``rlplug check-env RECIPE`` through the real CLI and the Python API: the shipped envs keep their promises
(exit 0), envs that break one are named in one line each (exit 1), a recipe or command line error is one line
(exit 2). The broken envs are a plugin's: a small batched TorchRL env with one fault each, chosen by its
``fault`` parameter, and gymnasium's CartPole with one fault each, registered under an id of its own."""

from __future__ import annotations

import pytest
from conftest import CANONICAL, one_line_error, rlplug_cli, run_cli

#: The plugin: ``faulty-counter``, a TorchRL env of ``num_envs`` copies walking a position in [-1, 1], ending
#: an episode past 0.9 and truncating at ``max_episode_steps``, with the fault ``fault`` (none: it keeps
#: every promise); and ``FaultyCartPole-v0``, CartPole with the fault in the FAULT environment variable.
FAULTY_PLUGIN = '''
import os

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

import rlplug


class FaultyCartPole(CartPoleEnv):
    """CartPole with a fault from the 5th step of each episode."""

    def reset(self, *, seed=None, options=None):
        self.steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        fault = os.environ.get("FAULT", "none") if self.steps >= 5 else "none"
        if fault == "nan-reward":
            reward = float("nan")
        if fault == "out-of-bounds":
            observation = observation.copy()
            observation[0] = 100.0  # the cart's position: its space says [-4.8, 4.8]
        if fault == "raise":
            raise RuntimeError("the simulator lost its state")
        return observation, reward, terminated, truncated, info


gym.register("FaultyCartPole-v0", entry_point=FaultyCartPole, max_episode_steps=500)


def make_counter(num_envs: int = 2, max_episode_steps: int = 20, fault: str = "none"):
    import torch
    from tensordict import TensorDict
    from torchrl.data import Bounded, Categorical, Composite, OneHot, Unbounded
    from torchrl.envs import EnvBase

    class Counter(EnvBase):
        def __init__(self):
            super().__init__(batch_size=[num_envs])
            n = num_envs
            self.observation_spec = Composite(observation=Bounded(-1.0, 1.0, shape=(n, 1)), shape=(n,))
            self.action_spec = OneHot(2, shape=(n, 2), dtype=torch.int64)
            self.reward_spec = Unbounded(shape=(n, 1))
            flag = Categorical(2, shape=(n, 1), dtype=torch.bool)
            self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(n,))
            self.generator = torch.Generator()
            self.position = torch.zeros(n, 1)
            self.elapsed = torch.zeros(n, 1, dtype=torch.int64)

        def _set_seed(self, seed):
            self.generator.manual_seed(seed)

        def start(self, count):
            if fault == "unseeded":  # the start states ignore the seed
                return torch.from_numpy(np.random.uniform(-0.5, 0.5, (count, 1)).astype(np.float32))
            if fault == "reset-out-of-bounds":  # a step clamps the position back into [-1, 1]
                return torch.full((count, 1), -5.0)
            return torch.rand(count, 1, generator=self.generator) - 0.5

        def _reset(self, tensordict=None, **kwargs):
            mask = tensordict.get("_reset", None) if tensordict is not None else None
            mask = torch.ones(num_envs, 1, dtype=torch.bool) if mask is None else mask.reshape(num_envs, 1)
            self.position = torch.where(mask, self.start(num_envs), self.position)
            self.elapsed = torch.where(mask, 0, self.elapsed)
            flag = torch.zeros(num_envs, 1, dtype=torch.bool)
            return TensorDict({"observation": self.position.clone(), "done": flag, "terminated": flag.clone(),
                               "truncated": flag.clone()}, batch_size=[num_envs])

        def _step(self, tensordict):
            step = tensordict.get("action").argmax(-1, keepdim=True).float() * 0.2 - 0.1
            if fault == "endless":  # it never moves far enough to end, and ignores its time limit
                step = step * 0
            self.position = (self.position + step).clamp(-1.0, 1.0)
            self.elapsed = self.elapsed + 1
            terminated = self.position.abs() > 0.9
            truncated = self.elapsed >= max_episode_steps
            if fault == "endless":
                truncated = torch.zeros_like(truncated)
            done = terminated | truncated
            if fault == "done-without-truncated":
                done = terminated
            reward = torch.ones(num_envs, 1)
            if fault == "float64-reward":
                reward = reward.double()
            return TensorDict({"observation": self.position.clone(), "reward": reward, "done": done,
                               "terminated": terminated, "truncated": truncated}, batch_size=[num_envs])

    return Counter()


def make_faulty_arrays(num_envs: int = 2, fault: str = "none"):
    """rlplug's gym CartPole whose array road breaks a promise the TensorDict road keeps."""
    from rlplug.plugins.envs.gym import make_gym_vector_env

    env = make_gym_vector_env("CartPole-v1", num_envs=num_envs, max_episode_steps=None, make_kwargs={})
    step = env.step_arrays

    def step_arrays(action):
        transition = step(action)
        if fault == "doubled-reward":
            return transition._replace(reward=transition.reward * 2)
        if fault == "float64-reward":
            return transition._replace(reward=transition.reward.astype(np.float64))
        return transition

    env.step_arrays = step_arrays
    return env


@rlplug.hookimpl
def rlplug_register_envs(register):
    register("faulty-counter", make_counter)
    register("faulty-arrays", make_faulty_arrays)
'''


@pytest.fixture
def plugin(install):
    return install({"faulty": FAULTY_PLUGIN}, dist="faulty")


def check_env(*args: str, plugin=None, **env: str):
    return rlplug_cli("check-env", *args, path=plugin, timeout=300, **env)


def problems(result) -> list[str]:
    """The problem lines of a check that found problems (exit 2, as issue 41 asks), nothing on stderr but
    warnings."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert "no problems found" not in lines
    return [line.removeprefix("problem: ") for line in lines if line.startswith("problem: ")]


def only_problem(result, *fragments: str) -> str:
    found = problems(result)
    assert len(found) == 1, found
    for fragment in fragments:
        assert fragment in found[0], (fragment, found[0])
    return found[0]


COUNTER = ["--set", 'env={use="faulty-counter", num_envs=3, max_episode_steps=20}']


def counter(fault: str) -> list[str]:
    return ["--set", f'env={{use="faulty-counter", num_envs=3, max_episode_steps=20, fault="{fault}"}}']


# -- envs that keep their promises ---------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [[], ["--set", "env.num_envs=4"]], ids=["canonical", "four-copies"])
def test_the_canonical_recipe_keeps_every_promise(overrides):
    """Every check on a healthy env, the array road compared: a check that misreads a spec (the final
    observation of an ended episode, the one-hot actions, a copy's reset) would fail here."""
    result = check_env(str(CANONICAL), "--steps", "150", *overrides)
    assert result.returncode == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[-1] == "no problems found"
    copies = 4 if overrides else 8
    assert f"env: CartPole-v1 (rlplug:gym), {copies} copies" in lines
    assert "observation: 'observation' float32 [4] low [-4.8, -inf, -0.4189, -inf], high [4.8, inf, 0.4189, inf]" \
        in lines
    assert "action: 'action' one-hot of 2 (int64, shape [2])" in lines
    assert "time limit: 500 steps (gymnasium's registration of CartPole-v1)" in lines
    walked = next(line for line in lines if line.startswith("steps: "))
    assert f"150 of each copy ({150 * copies} in all)" in walked and "mean length" in walked
    assert any(line.startswith("checked: the array road") and line.endswith("the same steps") for line in lines)


def test_a_healthy_plugin_env_without_an_array_road_keeps_every_promise(plugin):
    """The TensorDict road alone, a time limit from the recipe's max_episode_steps that the env keeps."""
    result = check_env(str(CANONICAL), "--steps", "60", *COUNTER, plugin=plugin)
    assert result.returncode == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert "time limit: 20 steps (env.max_episode_steps = 20)" in lines
    assert not any(line.startswith("checked: the array road") for line in lines)
    assert lines[-1] == "no problems found"


# -- envs that break one ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault, fragments", [
    ("nan-reward", ["a step's reward ('next', 'reward') is not finite (NaN or infinity)", "first at step 4 of copy 0"]),
    ("out-of-bounds", ["a step's observation ('next', 'observation') is outside its spec's bounds: 100 at index 0, "
                       "bounds [-4.8, 4.8]", "first at step 4 of copy 0"]),
])
def test_a_gym_env_with_nan_rewards_or_observations_out_of_bounds_is_named_in_one_line(plugin, fault, fragments):
    result = check_env(str(CANONICAL), "--steps", "30", "--set", "env.id='FaultyCartPole-v0'",
                       "--set", "env.num_envs=2", plugin=plugin, FAULT=fault)
    found = problems(result)
    assert any(all(fragment in line for fragment in fragments) for line in found), found


def test_a_plugin_env_that_ignores_its_time_limit_is_named(plugin):
    result = check_env(str(CANONICAL), "--steps", "25", *counter("endless"), plugin=plugin)
    only_problem(result, "an episode ran past the time limit of 20 steps (env.max_episode_steps = 20) without "
                         "ending", "first at step 20 of copy 0", "3 times in all")
    assert "note: copies 0, 1, 2 ended no episode in 25 steps" in result.stdout


def test_done_that_is_not_terminated_or_truncated_is_named(plugin):
    """Truncated at 20 steps with done false: TorchRL would not reset the copy, and rlplug would not count its
    episode's end."""
    result = check_env(str(CANONICAL), "--steps", "25", *counter("done-without-truncated"), plugin=plugin)
    found = problems(result)
    assert any("done is not terminated | truncated: done=False with terminated=False, truncated=True" in line
               for line in found), found


def test_a_reward_of_another_dtype_than_its_spec_fails_torchrl_check_and_is_named(plugin):
    result = check_env(str(CANONICAL), "--steps", "10", *counter("float64-reward"), plugin=plugin)
    found = problems(result)
    assert any(line.startswith("TorchRL's check_env_specs fails: ") for line in found), found
    assert "a step's reward ('next', 'reward') is float64 where its spec says float32 (first at step 0, " \
           "10 times in all)" in found, found


def test_reset_observations_out_of_bounds_are_named_apart_from_a_steps(plugin):
    """The steps clamp the position into its bounds; only the resets put it outside."""
    result = check_env(str(CANONICAL), "--steps", "10", *counter("reset-out-of-bounds"), plugin=plugin)
    found = problems(result)
    assert any(line.startswith("a reset's observation 'observation' is outside its spec's bounds: -5 at index 0, "
                               "bounds [-1, 1] (the first reset, copy 0, ") for line in found), found
    assert not any(line.startswith("a step's observation") for line in found), found


@pytest.mark.parametrize("fault, fragment", [
    ("doubled-reward", "the array road and the TensorDict road part at step 0 of copy 0: another reward from the "
                       "same seed (0) and actions; both roads must give the same episodes"),
    ("float64-reward", "the array road's reward is float64 where the protocol asks for float32 (step_arrays, "
                       "step 0)"),
])
def test_an_array_road_that_breaks_the_protocol_is_named(plugin, fault, fragment):
    """The TensorDict road is right: only the comparison of the roads sees it."""
    result = check_env(str(CANONICAL), "--steps", "10", "--set", f'env={{use="faulty-arrays", fault="{fault}"}}',
                       plugin=plugin)
    only_problem(result, fragment)


def test_start_states_that_ignore_the_seed_are_named(plugin):
    result = check_env(str(CANONICAL), "--steps", "10", *counter("unseeded"), plugin=plugin)
    only_problem(result, "the same seed (0) and actions give another observation at the first reset of copy 0",
                 "a seeded reset does not make the env's episodes repeat")


def test_an_env_that_raises_is_a_problem_not_a_traceback(plugin):
    result = check_env(str(CANONICAL), "--steps", "30", "--set", "env.id='FaultyCartPole-v0'",
                       plugin=plugin, FAULT="raise")
    only_problem(result, "stepping raised RuntimeError: the simulator lost its state (at step 4)")


# -- a user's error -------------------------------------------------------------------------------------------


def test_a_missing_recipe_or_a_bad_key_is_one_line_with_exit_2(tmp_path):
    one_line_error(run_cli("check-env", str(tmp_path / "absent.toml")), "absent.toml", "no such recipe file")
    one_line_error(run_cli("check-env", str(CANONICAL), "--set", "env.num_env=4"),
                   "cartpole-ppo.toml", "env.num_env", "did you mean 'num_envs'")
    refused = run_cli("check-env", str(CANONICAL), "--steps", "0")
    assert refused.returncode == 2 and "--steps" in refused.stderr


def test_the_help_states_the_exit_codes():
    result = run_cli("check-env", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "0 no problems found; 2 the env broke a promise" in text and "or the recipe or the command line" in text


# -- the Python API -------------------------------------------------------------------------------------------


def test_the_python_api_checks_a_built_env_and_a_recipe():
    import rlplug
    from rlplug.envs import check_env as check
    from rlplug.run.check_env import check_recipe_env

    env = rlplug.make("env", "torch-classic", id="Pendulum-v1", num_envs=2, max_episode_steps=30)
    try:
        report = check(env, steps=40, seed=3)
    finally:
        env.close()
    assert report.ok, report.problems
    assert report.time_limit == (30, "the env's max_episode_steps")
    assert report.episode_lengths == [30, 30]  # both copies truncated at the limit, the time limit crossed
    recipe = check_recipe_env(CANONICAL, ["env.num_envs=2"], steps=20)
    assert recipe.ok and recipe.copies == 2 and recipe.steps == 20
