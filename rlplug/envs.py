"""Env construction helpers shared by env plugins."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from torchrl.envs import EnvBase, GymWrapper


def make_gym_vector_env(env_id: str, *, num_envs: int, max_episode_steps: int | None,
                        make_kwargs: dict[str, Any], device: str = "cpu") -> EnvBase:
    """A TorchRL env over gymnasium's synchronous vector env.

    TorchRL's wrapper needs the same-step autoreset (the final observation of an episode and the first of
    the next arrive in one step); gymnasium's native vector envs (CartPole's) only do next-step autoreset,
    so the synchronous vector env is used for every id.
    """
    vector_env = gym.make_vec(
        env_id, num_envs=num_envs, vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        **({"max_episode_steps": max_episode_steps} if max_episode_steps else {}), **make_kwargs,
    )
    return GymWrapper(vector_env, device=device)
