"""gymnasium ids rlplug registers itself (``rlplug/...``): envs that show and test what rlplug reads from an env.

``rlplug/MaskedCartPole-v1``: CartPole-v1 whose push is chosen among four actions, two per side (0 and 2 push
left, 1 and 3 push right); at every step one action of each side is masked at random, so a policy acting on
the mask balances the pole as in CartPole, and one ignoring it picks a masked action about half the time. The
observation is a Dict, ``observation`` (CartPole's four floats) and ``action_mask`` (MultiBinary(4), 1 where
allowed). A masked action ends the episode at once with reward ``MASKED_REWARD``: detectably wrong, never a
crash, so random actions that ignore the mask (``rlplug check-env``'s seeding pass) still step.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

#: What taking a masked action earns (and the episode ends).
MASKED_REWARD = -100.0


class MaskedCartPole(gym.Env):
    """CartPole with four actions, two per side, one of each side masked at random every step."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, render_mode: str | None = None):
        self.cartpole = CartPoleEnv(render_mode=render_mode)
        self.render_mode = render_mode
        box = self.cartpole.observation_space
        self.observation_space = spaces.Dict({"observation": box, "action_mask": spaces.MultiBinary(4)})
        self.action_space = spaces.Discrete(4)
        self.mask = np.ones(4, dtype=np.int8)

    def _observe(self, state: np.ndarray) -> dict[str, np.ndarray]:
        left, right = self.np_random.integers(0, 2, 2)
        self.mask = np.zeros(4, dtype=np.int8)
        self.mask[[2 * left, 2 * right + 1]] = 1
        return {"observation": np.asarray(state, dtype=np.float32), "action_mask": self.mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        state, info = self.cartpole.reset(seed=seed, options=options)
        return self._observe(state), info

    def step(self, action):
        action = int(action)
        if not self.mask[action]:
            state = np.asarray(self.cartpole.state, dtype=np.float32)
            return self._observe(state), MASKED_REWARD, True, False, {"masked_action": True}
        state, reward, terminated, truncated, info = self.cartpole.step(action % 2)
        return self._observe(state), float(reward), terminated, truncated, info

    def render(self):
        return self.cartpole.render()

    def close(self):
        self.cartpole.close()

