"""``rlplug/PrivilegedCartPole-v1``: CartPole whose policy sees less than a simulator knows, to try an asymmetric
actor-critic (``[algorithm.policy] in_keys`` and ``[algorithm.critic] in_keys``).

The observation is a Dict: ``observation`` holds the cart's position and the pole's angle only (what a camera
would give), ``state`` the simulator's whole state, velocities included (privileged: known in simulation, not on
a real cart). A critic reading ``state`` values states the policy cannot tell apart; the policy, reading
``observation`` alone, is what gets exported and deployed. Rewards and episode ends are CartPole-v1's.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

#: Which of CartPole's four state entries (x, x_dot, theta, theta_dot) the policy observes.
OBSERVED = [0, 2]


class PrivilegedCartPole(gym.Env):
    """CartPole with a Dict observation: ``observation`` (position and angle) and ``state`` (all four)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, render_mode: str | None = None):
        self.cartpole = CartPoleEnv(render_mode=render_mode)
        self.render_mode = render_mode
        box = self.cartpole.observation_space
        assert isinstance(box, spaces.Box)
        self.observation_space = spaces.Dict({
            "observation": spaces.Box(box.low[OBSERVED], box.high[OBSERVED], dtype=np.float32),
            "state": box,
        })
        self.action_space = self.cartpole.action_space

    @staticmethod
    def _observe(state: np.ndarray) -> dict[str, np.ndarray]:
        state = np.asarray(state, dtype=np.float32)
        return {"observation": state[OBSERVED].copy(), "state": state}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        state, info = self.cartpole.reset(seed=seed, options=options)
        return self._observe(state), info

    def step(self, action):
        state, reward, terminated, truncated, info = self.cartpole.step(int(action))
        return self._observe(state), float(reward), terminated, truncated, info

    def render(self):
        return self.cartpole.render()

    def close(self):
        self.cartpole.close()
