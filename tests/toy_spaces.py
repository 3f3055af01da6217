"""Tiny gymnasium envs for the spaces rlplug acts and observes in, registered under ``RlplugToy/`` on import.

Also the source of a plugin module for CLI tests (``install({"toyspaces": SOURCE})``): importing it registers
the ids, so a recipe names them as any gymnasium id.

- ``BrightPixel-v0``: a 6x6 uint8 image (H x W x 1, as gymnasium gives images) with one bright pixel; the
  rewarded action (0 or 1) is the half it is in. 8 steps an episode: perfect 8, random 4.
- ``ImageAndVector-v0``: a Dict of that image and a 2-vector; the rewarded action is the pixel's half XOR
  whether the vector's first entry is positive, so both entries must be read. Perfect 8, random 4.
- ``TwoPartBandit-v0``: a one-hot context of 3; MultiDiscrete actions ``nvec`` (default [3, 3]); each part
  earns 1 when it picks its answer for the context ((context + part) mod its size). 10 steps an episode:
  perfect 20, random 6.7 for [3, 3].
- ``ActionEcho-v0``: rewards exactly what the action says, to check what reaches gymnasium: ``space`` one of
  "discrete-start" (Discrete(3, start=5): the value), "multibinary" (MultiBinary(3): bits weighted 1, 2, 4),
  "box23" (Box of shape (2, 3): the weighted sum with weights 1..6); "tuple", which rlplug refuses.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium import spaces

SIZE = 6


def bright_pixel(rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """A dim noisy 6x6x1 image with one bright pixel, and the half (0 left, 1 right) the pixel is in."""
    image = rng.integers(0, 40, (SIZE, SIZE, 1), dtype=np.uint8)
    row, column = rng.integers(0, SIZE, 2)
    image[row, column, 0] = 255
    return image, int(column >= SIZE // 2)


class Episodic(gym.Env):
    """Episodes of ``length`` steps, each rewarded by :meth:`reward` for the observation it answers."""

    length = 8

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observe(), {}

    def step(self, action):
        reward = self.reward(action)
        self.t += 1
        return self.observe(), reward, False, self.t >= self.length, {}


class BrightPixel(Episodic):
    def __init__(self):
        self.observation_space = spaces.Box(0, 255, (SIZE, SIZE, 1), np.uint8)
        self.action_space = spaces.Discrete(2)

    def observe(self):
        image, self.answer = bright_pixel(self.np_random)
        return image

    def reward(self, action) -> float:
        return float(int(action) == self.answer)


class ImageAndVector(Episodic):
    def __init__(self):
        self.observation_space = spaces.Dict({
            "image": spaces.Box(0, 255, (SIZE, SIZE, 1), np.uint8),
            "vector": spaces.Box(-1.0, 1.0, (2,), np.float32),
        })
        self.action_space = spaces.Discrete(2)

    def observe(self):
        image, half = bright_pixel(self.np_random)
        vector = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.answer = half ^ int(vector[0] > 0)
        return {"image": image, "vector": vector}

    def reward(self, action) -> float:
        return float(int(action) == self.answer)


class TwoPartBandit(Episodic):
    length = 10

    def __init__(self, nvec=(3, 3)):
        self.nvec = np.asarray(nvec, dtype=np.int64)
        self.observation_space = spaces.Box(0.0, 1.0, (3,), np.float32)
        self.action_space = spaces.MultiDiscrete(self.nvec)

    def observe(self):
        self.context = int(self.np_random.integers(0, 3))
        return np.eye(3, dtype=np.float32)[self.context]

    def reward(self, action) -> float:
        answers = (self.context + np.arange(len(self.nvec))) % self.nvec
        return float((np.asarray(action) == answers).sum())


ECHOES = {
    "discrete-start": (spaces.Discrete(3, start=5), lambda a: float(a)),
    "multibinary": (spaces.MultiBinary(3), lambda a: float(np.dot(a, [1, 2, 4]))),
    "box23": (spaces.Box(-1.0, 1.0, (2, 3), np.float32), lambda a: float(np.sum(a * np.arange(1, 7).reshape(2, 3)))),
    "tuple": (spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))), lambda a: 0.0),  # refused
}


class ActionEcho(Episodic):
    length = 5

    def __init__(self, space: str = "discrete-start"):
        self.action_space, self.value = ECHOES[space]
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def observe(self):
        return np.zeros(2, np.float32)

    def reward(self, action) -> float:
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)), action
        return self.value(np.asarray(action))


for name, cls in [("BrightPixel-v0", BrightPixel), ("ImageAndVector-v0", ImageAndVector),
                  ("TwoPartBandit-v0", TwoPartBandit), ("ActionEcho-v0", ActionEcho)]:
    if f"RlplugToy/{name}" not in gym.registry:
        gym.register(f"RlplugToy/{name}", cls)

#: The recipe table of a DQN with a cnn Q-network that learns ImageAndVector (the image and the vector together) in
#: a few thousand frames, whichever env gives it: the gym env's Dict or a TorchRL env's ``pixels`` beside a vector.
DQN_IMAGE_AND_VECTOR = """
[algorithm]
use = "dqn"
learning_starts = 256
batch_size = 64
target_update_interval = 256
exploration_fraction = 0.3
gamma = 0.5
lr = 1e-3
q_network = {use = "cnn"}
"""

#: This module's text: a plugin module for ``python -m rlplug`` subprocesses.
SOURCE = Path(__file__).read_text()
