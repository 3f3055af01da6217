"""The roads users take with envs, through the real CLI: every registered transform on the canonical recipe's
8 copies, a TorchRL env's image beside its vectors, and envs that fail (raise, NaN, a wrong shape, a worker
that exits) on every stepping road, each ending in one line with the run directory resumable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import toy_spaces
from conftest import CANONICAL, one_line_error, rlplug_cli, run_cli

#: Arguments that make each registered transform mean something on CartPole's 8 copies (episodes truncated
#: within the run, entries that exist). A transform registered later with required keys fails its test below
#: until it is given some here; one without is run with its defaults.
TRANSFORM_ARGUMENTS = {
    "StepCounter": {"max_steps": 10},
    "RewardScaling": {"scale": 0.1},
    "ObservationNorm": {"loc": 0.0, "scale": 2.0},
    "CatFrames": {"N": 2},
    "Resize": {"w": 8},
    "RenameTransform": {"in_keys": ["observation"], "out_keys": ["state"]},
    "ClipTransform": {"low": -1.0, "high": 1.0},
    "FrameSkipTransform": {"frame_skip": 2},
    "TimeMaxPool": {"in_keys": ["observation"], "T": 2},
}


def registered_transforms() -> list[str]:
    from rlplug.registry import get_registry

    return get_registry().names("transform")


def toml_value(value) -> str:
    return json.dumps(value)  # the values above are numbers, strings and lists of them: TOML reads them alike


def with_transform(tmp_path: Path, name: str, arguments: dict) -> Path:
    table = "".join(f"{key} = {toml_value(value)}\n" for key, value in arguments.items())
    recipe = tmp_path / f"{name}.toml"
    recipe.write_text(CANONICAL.read_text() + f'\n[[env.transforms]]\nuse = "{name}"\n{table}')
    return recipe


@pytest.mark.slow
@pytest.mark.parametrize("name", registered_transforms())
def test_every_registered_transform_trains_on_eight_gym_copies_or_is_refused_in_one_line(tmp_path, name):
    """Episodes end at different steps in the copies: a transform that ends or resets episodes itself meets
    copies gymnasium did not end. Either the run finishes, or it is refused before a directory exists."""
    out = tmp_path / "run"
    result = run_cli("run", str(with_transform(tmp_path, name, TRANSFORM_ARGUMENTS.get(name, {}))), "--out",
                     str(out), "--set", "run.total_frames=512", "--set", "eval.episodes=3")
    if result.returncode == 2:
        one_line_error(result, "env.transforms")
        assert not out.exists()
    else:
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads((out / "summary.json").read_text())["status"] == "finished"


@pytest.mark.slow
def test_step_counter_with_max_steps_on_the_gym_env_says_to_use_its_time_limit(tmp_path):
    """TorchRL resets a gymnasium vector env's copies only where gymnasium ended them: a StepCounter ending
    episodes on its own once stopped the run with a traceback at the first copy it truncated."""
    out = tmp_path / "run"
    result = run_cli("run", str(with_transform(tmp_path, "StepCounter", {"max_steps": 100})), "--out", str(out),
                     "--set", "env.vectorization=async")
    one_line_error(result, "env.transforms[0].max_steps", "StepCounter", "env.max_episode_steps = 100")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("recipe, overrides", [
    ("cartpole-ppo.toml", ["env.transforms=[{use='StepCounter'}]"]),  # counting only, on the gym env's 8 copies
    ("pendulum-ppo.toml", ['env={use="torchrl-pendulum", num_envs=8, transforms=[{use="StepCounter", max_steps=10}]}',
                           "algorithm.frames_per_batch=128", "algorithm.minibatch_size=64", "algorithm.epochs=2"]),
])
def test_step_counter_trains_where_the_env_resets_copies_alone_or_where_it_only_counts(tmp_path, recipe, overrides):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL.parent / recipe), "--out", str(out), "--set", "run.total_frames=512",
                     "--set", "eval.episodes=3", *(arg for override in overrides for arg in ("--set", override)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"


# -- a TorchRL env's image beside its vectors -----------------------------------------------------------------

#: A plugin registering ``pixels-and-vector``: TorchRL's GymWrapper of toy_spaces' ImageAndVector-v0 with its image
#: under TorchRL's name ``pixels`` (uint8 6 x 6 x 1) beside ``vector`` (float32 [2]); the reward needs both.
PIXELS_PLUGIN = toy_spaces.SOURCE + '''

import rlplug


class PixelsAndVector(ImageAndVector):
    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Dict({"pixels": self.observation_space["image"],
                                              "vector": self.observation_space["vector"]})

    def observe(self):
        observation = super().observe()
        return {"pixels": observation["image"], "vector": observation["vector"]}


def make_pixels_and_vector(num_envs: int = 1):
    from torchrl.envs import GymWrapper, SerialEnv

    return SerialEnv(num_envs, lambda: GymWrapper(PixelsAndVector()))


@rlplug.hookimpl
def rlplug_register_envs(register):
    register("pixels-and-vector", make_pixels_and_vector)
'''


def test_a_torchrl_image_entry_beside_vectors_reaches_the_networks_as_a_dict_entry(tmp_path):
    """Before, the uint8 ``pixels`` was left out (only float entries were read) and cnn found no image."""
    import importlib.util

    from rlplug.core.observations import one_observation

    source = tmp_path / "pixels_plugin.py"
    source.write_text(PIXELS_PLUGIN)
    spec = importlib.util.spec_from_file_location("pixels_plugin", source)
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)  # the plugin's factory, without registering it
    env = one_observation(plugin.make_pixels_and_vector(num_envs=2))
    spec = env.observation_spec["observation"]
    assert sorted(spec.keys()) == ["pixels", "vector"]
    assert spec["pixels"].shape == (2, 6, 6, 1) and spec["pixels"].dtype == torch.uint8
    assert spec["vector"].shape == (2, 2) and spec["vector"].dtype == torch.float32
    env.set_seed(0)
    state = env.reset()
    assert torch.equal(state.get(("observation", "pixels")), state.get("pixels"))
    assert torch.equal(state.get(("observation", "vector")), state.get("vector"))


@pytest.mark.slow
def test_cnn_learns_from_a_torchrl_envs_pixels_and_vector_together(tmp_path, install):
    where = install({"pixelsplugin": PIXELS_PLUGIN}, dist="pixelsplugin")
    recipe = tmp_path / "pixels.toml"
    recipe.write_text('''
[run]
total_frames = 4096
[env]
use = "pixels-and-vector"
num_envs = 4
''' + toy_spaces.DQN_IMAGE_AND_VECTOR + '''
[eval]
episodes = 20
[[loggers]]
use = "csv"
''')
    out = tmp_path / "run"
    result = rlplug_cli("run", str(recipe), "--out", str(out), path=where, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval_return_mean"] >= 6.5, summary  # perfect 8; the image alone or the vector alone: 4


# -- envs that fail, on every stepping road ---------------------------------------------------------------------

#: A plugin registering ``FaultyCartPole-v0`` (gymnasium) and ``faulty-torchrl`` (TorchRL's SerialEnv of it):
#: after AFTER steps in a process, each step does FAULT: "raise", "nan" (observations), "shape" (of 7, not
#: 4), "exit" (the process ends, once: the first copy to get there claims FLAG), or nothing.
FAULTY_PLUGIN = '''
import os

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

import rlplug


class FaultyCartPole(CartPoleEnv):
    steps = 0

    def step(self, action):
        FaultyCartPole.steps += 1
        observation, reward, terminated, truncated, info = super().step(action)
        fault = os.environ.get("FAULT") if FaultyCartPole.steps > int(os.environ.get("AFTER", "0")) else None
        if fault == "raise":
            raise RuntimeError("the simulator lost its state")
        if fault == "nan":
            observation = np.full_like(observation, np.nan)
        if fault == "shape":
            observation = np.zeros(7, np.float32)
        if fault == "exit":
            try:
                os.close(os.open(os.environ["FLAG"], os.O_CREAT | os.O_EXCL))
                os._exit(3)
            except FileExistsError:
                pass
        return observation, reward, terminated, truncated, info


gym.register("FaultyCartPole-v0", entry_point=FaultyCartPole, max_episode_steps=500)


def make_faulty_torchrl(num_envs: int = 2):
    from torchrl.envs import GymWrapper, SerialEnv

    return SerialEnv(num_envs, lambda: GymWrapper(gym.make("FaultyCartPole-v0")))


@rlplug.hookimpl
def rlplug_register_envs(register):
    register("faulty-torchrl", make_faulty_torchrl)
'''

GYM = ["--set", "env.id='FaultyCartPole-v0'"]
TORCHRL = ["--set", 'env={use="faulty-torchrl", num_envs=8}']
ASYNC = [*GYM, "--set", "env.vectorization='async'"]


@pytest.mark.slow
@pytest.mark.parametrize("road, fault, after, fragments", [
    (GYM, "raise", 300, ["FaultyCartPole-v0 failed in step", "RuntimeError: the simulator lost its state"]),
    (GYM, "nan", 300, ["FaultyCartPole-v0 gave observations that are not finite", "in copy"]),
    (GYM, "shape", 300, ["FaultyCartPole-v0 failed in step", "shape"]),
    (TORCHRL, "raise", 300, ["'faulty-torchrl' failed in step", "RuntimeError: the simulator lost its state"]),
    (TORCHRL, "nan", 300, ["'faulty-torchrl' gave observations that are not finite", "in copy"]),
    (TORCHRL, "shape", 300, ["'faulty-torchrl' failed in step", "shape"]),
    (ASYNC, "nan", 40, ["FaultyCartPole-v0 gave observations that are not finite", "in copy"]),
    (ASYNC, "exit", 40, ["FaultyCartPole-v0: the worker of copy", "(exit status 3) ended while the run was using it"]),
], ids=["gym-raise", "gym-nan", "gym-shape", "torchrl-raise", "torchrl-nan", "torchrl-shape", "async-nan",
        "async-exit"])
def test_an_env_that_fails_ends_the_run_in_one_line_naming_it_and_the_run_resumes(tmp_path, install, road, fault,
                                                                                   after, fragments):
    """The fault comes in the second batch (after the first checkpoint): the run stops with a checkpoint of its
    last update and summary.json, and resume finishes it once the env behaves."""
    where = install({"faulty": FAULTY_PLUGIN}, dist="faulty")
    out = tmp_path / "run"
    short = ["--set", "run.total_frames=1024", "--set", "run.checkpoint_every_frames=256", "--set", "eval.episodes=2"]
    result = rlplug_cli("run", str(CANONICAL), "--out", str(out), *short, *road, path=where, timeout=300,
                        FAULT=fault, AFTER=str(after), FLAG=str(tmp_path / "flag"))
    one_line_error(result, *fragments, "stopped at frame", f"python -m rlplug resume {out}")
    assert json.loads((out / "summary.json").read_text())["status"] == "stopped"
    assert (out / "checkpoint.pt").exists()
    resumed = rlplug_cli("resume", str(out), path=where, timeout=300, FAULT="none")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
