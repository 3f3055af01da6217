"""Env construction helpers shared by env plugins, and the tensor-stepping gymnasium env.

:class:`VectorGymEnv` is TorchRL's ``GymWrapper`` (so it is a full ``EnvBase``, transforms and all) with one
addition: :meth:`~VectorGymEnv.step_tensors`, a step that takes and returns plain tensors. TorchRL's
TensorDict step costs about ten times gymnasium's own step for cheap envs such as CartPole; rlplug's
collector uses the tensor step whenever the env offers it (see :mod:`rlplug.collect`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torchrl.envs import EnvBase, GymWrapper


class Transition(NamedTuple):
    """One vector step: ``next_observation`` is the true last observation of an episode that ended;
    ``observation`` is where each env goes on from (the first observation of a new episode there)."""

    next_observation: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    observation: torch.Tensor


class VectorGymEnv(GymWrapper):
    """A gymnasium vector env (same-step autoreset) as a TorchRL env, with a tensor step for fast collection."""

    def __init__(self, vector_env: gym.vector.VectorEnv, **kwargs: Any):
        super().__init__(vector_env, **kwargs)
        space = vector_env.single_action_space
        self._discrete = isinstance(space, gym.spaces.Discrete)
        self._one_hot = self._discrete and self.action_spec.shape[-1:] == (space.n,) and space.n > 1 \
            and type(self.action_spec).__name__ == "OneHot"
        self.supports_tensor_steps = self._discrete or isinstance(space, gym.spaces.Box)
        obs_key = "observation" if "observation" in self.observation_spec.keys() else None
        obs_dtype = self.observation_spec[obs_key].dtype if obs_key else torch.float32
        self._obs_dtype = torch.empty((), dtype=obs_dtype).numpy().dtype  # conversions happen in numpy: cheaper
        self._on_cpu = self.device is None or torch.device(self.device).type == "cpu"

    def reset_tensors(self, seed: int | None = None) -> torch.Tensor:
        observation, _ = self._env.reset(seed=seed)
        return self._tensor(observation.astype(self._obs_dtype, copy=False))

    def step_tensors(self, action: torch.Tensor) -> Transition:
        if self._one_hot:
            action = action.argmax(-1)
        observation, reward, terminated, truncated, info = self._env.step(action.cpu().numpy())
        observation = observation.astype(self._obs_dtype, copy=False)
        next_observation = observation
        ended = terminated | truncated
        if ended.any():
            next_observation = observation.copy()
            for index in np.flatnonzero(ended):
                next_observation[index] = info["final_obs"][index]
        return Transition(self._tensor(next_observation), self._tensor(reward.astype(np.float32, copy=False)),
                          self._tensor(terminated), self._tensor(truncated), self._tensor(observation))

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        return tensor if self._on_cpu else tensor.to(self.device)


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
    return VectorGymEnv(vector_env, device=device)
