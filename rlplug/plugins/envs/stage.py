"""The vector-level stage under rlplug's gymnasium env: what must give the same numbers on TorchRL's
TensorDict step and on the array step (observation normalisation and clipping, reward scaling, and the
statistics behind them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.utils import RunningMeanStd

from rlplug.errors import UserError

#: ``reset(options={CONTINUE: True})`` on a :class:`VectorStage`: go on from the autoreset observations.
CONTINUE = "rlplug_continue"
_FINAL_KEYS = ("final_obs", "_final_obs", "final_info", "_final_info")


class Transition(NamedTuple):
    """One vector step (numpy arrays or tensors): ``next_observation`` is the true last observation of an
    episode that ended; ``observation`` is where each env goes on from (the first of a new episode there)."""

    next_observation: Any
    reward: Any
    terminated: Any
    truncated: Any
    observation: Any


class VectorStage(gym.vector.VectorWrapper):
    """The vector-level stage under :class:`VectorGymEnv`: what must be identical on both stepping roads.

    - ``observations``: ``"none"``; ``"fixed"``, rescaled to [-1, 1] from the space's (finite) bounds;
      ``"running"``, centred and scaled by a running mean and variance of every observation seen (resets
      and the final observations of ended episodes included), as gymnasium's ``NormalizeObservation``.
    - ``clip``: observations (after normalisation) clipped to ``[-clip, clip]``.
    - ``rewards``: rewards divided by the running standard deviation of the discounted return, exactly
      gymnasium's vector ``NormalizeReward`` (``gamma``, epsilon 1e-8) under same-step autoreset.
    - ``clip_rewards``: rewards clipped to ``[-c, c]`` (before ``rewards`` scales them), Atari's sign of the
      score's change for c = 1.
    - ``episodic_life``: a lost life (``info["lives"]`` falls, as Atari envs report it) ends the episode the
      algorithm sees, the game going on from where it is: the final observation is the one it goes on from.

The last two, and the reward scaling, are training's only: out of training (evaluation) episodes are whole
games and rewards the env's own.

    Final observations in ``info["final_obs"]`` go through the same transform as the others. Statistics
    update only while :attr:`training`; out of training rewards are also left unscaled, so evaluation
    returns are in the env's own units. :meth:`state_dict` holds only the statistics (no per-env state), so
    it moves between envs with different numbers of copies.

    It also remembers a step in which every env ended, so that a reset right after it
    (``reset(options={CONTINUE: True})``) goes on from the autoreset observations instead of resetting the
    envs a second time (what TorchRL's road asks for when all envs are done at once).
    """

    def __init__(self, env: gym.vector.VectorEnv, *, observations: str = "none", clip: float | None = None,
                 rewards: bool = False, gamma: float = 0.99, epsilon: float = 1e-8, clip_rewards: float | None = None,
                 episodic_life: bool = False):
        super().__init__(env)
        self.clip_rewards, self.episodic_life = clip_rewards, episodic_life
        self.lives: np.ndarray | None = None
        if observations not in ("none", "fixed", "running"):
            raise ValueError(f"observations must be 'none', 'fixed' or 'running', got {observations!r}")
        space = env.single_observation_space
        self.observations, self.clip, self.gamma, self.epsilon = observations, clip, gamma, epsilon
        self.transforms_observations = observations != "none" or clip is not None
        self.training = True
        self.obs_rms: RunningMeanStd | None = None
        self.return_rms: RunningMeanStd | None = None
        if self.transforms_observations:
            if not isinstance(space, gym.spaces.Box):
                raise ValueError(f"observation normalisation and clipping need a Box observation space, got {space}")
            low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
            if observations == "fixed":
                if not (np.isfinite(low).all() and np.isfinite(high).all()):
                    raise ValueError(f"'fixed' observation normalisation needs finite bounds, got {space}")
                span = high.astype(np.float64) - low
                self._center = (low + span / 2).astype(np.float64)
                self._inverse_half_span = np.divide(2.0, span, out=np.zeros_like(span), where=span > 0)
                low, high = -np.ones(space.shape), np.ones(space.shape)
            elif observations == "running":
                self.obs_rms = RunningMeanStd(shape=space.shape, dtype=np.float64)
                low, high = np.full(space.shape, -np.inf), np.full(space.shape, np.inf)
            if clip is not None:
                low, high = np.maximum(low, -clip), np.minimum(high, clip)
            self.single_observation_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32),
                                                           dtype=np.float32)
            self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        if rewards:
            self.return_rms = RunningMeanStd(shape=())
        self.returns = np.zeros(self.num_envs)
        #: the rewards of the steps since :meth:`take_own_rewards`, before reward scaling: kept once a collector
        #: asks for them (:attr:`keep_own_rewards`), which reports returns in the env's units, as evaluation does
        self.keep_own_rewards = False
        self._own_rewards: list[np.ndarray] = []
        self._continuable = False
        self._last: tuple[Any, dict] | None = None

    def take_own_rewards(self) -> np.ndarray | None:
        """``[steps, envs]``: the rewards of the steps since the last call as the algorithm would see them without
        ``rewards``' scaling (clipped where ``clip_rewards`` says), or None where no step was scaled."""
        if not self._own_rewards:
            return None
        taken, self._own_rewards = np.stack(self._own_rewards), []
        return taken

    @property
    def autoreset_mode(self):
        return self.env.autoreset_mode

    @property
    def can_continue(self) -> bool:
        """Whether every env ended in the last step, with no reset since: ``reset(options={CONTINUE: True})``
        may go on from there."""
        return self._continuable

    # -- statistics ---------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The running statistics as tensors and floats (empty when nothing is normalised by statistics)."""
        state: dict[str, Any] = {}
        for prefix, rms in (("observation", self.obs_rms), ("return", self.return_rms)):
            if rms is not None:
                state[f"{prefix}_mean"] = torch.tensor(np.asarray(rms.mean, dtype=np.float64))
                state[f"{prefix}_var"] = torch.tensor(np.asarray(rms.var, dtype=np.float64))
                state[f"{prefix}_count"] = float(rms.count)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Statistics from :meth:`state_dict` (of an env with the same options and observation shape)."""
        expected = self.state_dict()
        missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        if missing or unexpected:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + \
                    ([f"unexpected {', '.join(unexpected)}"] if unexpected else [])
            raise UserError(f"the env statistics do not fit this env ({'; '.join(parts)}); were they saved "
                            "with the same normalize_observations and normalize_rewards?")
        loaded: dict[str, Any] = {}
        for key, current in expected.items():
            value = state[key]
            if key.endswith("_count"):
                loaded[key] = float(value)
                continue
            array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            if array.shape != tuple(current.shape):
                raise UserError(f"the env statistics do not fit this env: '{key}' has shape {list(array.shape)}, "
                                f"this env's is {list(current.shape)}")
            loaded[key] = array.astype(np.float64, copy=True)
        for prefix, rms in (("observation", self.obs_rms), ("return", self.return_rms)):
            if rms is not None:
                rms.mean, rms.var, rms.count = (loaded[f"{prefix}_mean"], loaded[f"{prefix}_var"],
                                                loaded[f"{prefix}_count"])

    def reset_statistics(self) -> None:
        """Back to no observations seen (statistics only; the envs are not touched)."""
        if self.obs_rms is not None:
            self.obs_rms = RunningMeanStd(shape=self.obs_rms.mean.shape, dtype=np.float64)
        if self.return_rms is not None:
            self.return_rms = RunningMeanStd(shape=())
        self.returns[:] = 0

    # -- stepping -----------------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if options and options.get(CONTINUE):
            if not self._continuable or self._last is None:
                raise RuntimeError("reset(options={CONTINUE: True}) needs a step in which every env ended just before")
            self._continuable = False
            return self._last
        self._continuable = False
        observation, info = self.env.reset(seed=seed, options=options)
        self.returns[:] = 0
        self.lives = np.array(info["lives"]) if "lives" in info else None
        if self.transforms_observations:
            if self.obs_rms is not None and self.training:
                self.obs_rms.update(observation)
            observation = self._transform(observation)
        return observation, info

    def step(self, actions):
        observation, reward, terminated, truncated, info = self.env.step(actions)
        if self.episodic_life and "lives" in info:
            terminated, info = self._end_lost_lives(observation, terminated, truncated, info)
        if self.clip_rewards is not None and self.training:
            reward = np.clip(reward, -self.clip_rewards, self.clip_rewards)
        ended = terminated | truncated
        if self.transforms_observations:
            final = info.get("final_obs") if ended.any() else None
            rows = np.flatnonzero(info["_final_obs"]) if final is not None else ()
            finals = np.stack([final[i] for i in rows]) if len(rows) else None
            if self.obs_rms is not None and self.training:
                self.obs_rms.update(observation if finals is None else np.concatenate([observation, finals]))
            observation = self._transform(observation)
            if finals is not None:
                finals, final = self._transform(finals), final.copy()
                for row, index in enumerate(rows):
                    final[index] = finals[row]
                info = {**info, "final_obs": final}
        if self.return_rms is not None:
            # gymnasium's NormalizeReward under same-step autoreset, step for step
            self.returns = self.returns * self.gamma * (1 - terminated) + reward
            if self.training:
                self.return_rms.update(self.returns)
            self.returns[ended] = 0
            if self.training:
                if self.keep_own_rewards:
                    self._own_rewards.append(np.asarray(reward, dtype=np.float32).copy())
                reward = reward / np.sqrt(self.return_rms.var + self.epsilon)
        self._continuable = bool(ended.all())
        if self._continuable:  # a copy: TorchRL's road writes the final observations into the step's array
            self._last = np.copy(observation), {k: v for k, v in info.items() if k not in _FINAL_KEYS}
        return observation, reward, terminated, truncated, info

    def _end_lost_lives(self, observation, terminated, truncated, info):
        """``terminated`` where a life was lost in training, with the observation the game goes on from as
        the episode's final one (both roads read ``final_obs``); the lives are followed out of training too."""
        lives = np.array(info["lives"])
        lost = np.zeros_like(terminated) if self.lives is None else (lives < self.lives) & ~(terminated | truncated)
        self.lives = lives
        if not (self.training and lost.any()):
            return terminated, info
        final = info.get("final_obs")
        final = np.full(self.num_envs, None, dtype=object) if final is None else final.copy()
        has_final = np.zeros(self.num_envs, dtype=bool) if "_final_obs" not in info else info["_final_obs"].copy()
        for index in np.flatnonzero(lost):
            final[index], has_final[index] = np.copy(observation[index]), True
        return terminated | lost, {**info, "final_obs": final, "_final_obs": has_final}

    def frozen_transform(self) -> ObservationTransform | None:
        """:meth:`_transform` with the current statistics, as a torch module (float32 in and out, float64
        inside, the same numbers as numpy's); None when observations pass unchanged. For exporting a policy."""
        if not self.transforms_observations:
            return None
        if self.observations == "running":
            rms = self._running_statistics()
            center, divisor = rms.mean, np.sqrt(rms.var + self.epsilon)
            return ObservationTransform(center, divisor=divisor, clip=self.clip)
        if self.observations == "fixed":
            return ObservationTransform(self._center, multiplier=self._inverse_half_span, clip=self.clip)
        return ObservationTransform(clip=self.clip)

    def _running_statistics(self) -> RunningMeanStd:
        if self.obs_rms is None:
            raise RuntimeError("observations = 'running' without running statistics")
        return self.obs_rms

    def _transform(self, observation: np.ndarray) -> np.ndarray:
        if self.observations == "running":
            rms = self._running_statistics()
            observation = (observation - rms.mean) / np.sqrt(rms.var + self.epsilon)
        elif self.observations == "fixed":
            observation = (observation - self._center) * self._inverse_half_span
        if self.clip is not None:
            observation = np.clip(observation, -self.clip, self.clip)
        return observation.astype(np.float32)


class ObservationTransform(torch.nn.Module):
    """``(x - center) / divisor`` or ``(x - center) * multiplier``, then clipped to ``[-clip, clip]``: the
    observation transform of :class:`VectorStage` with its statistics frozen into buffers. Computed in float64
    as the stage computes it in numpy, so an exported policy sees the very observations training saw."""

    center: torch.Tensor | None
    divisor: torch.Tensor | None
    multiplier: torch.Tensor | None

    def __init__(self, center: np.ndarray | None = None, *, divisor: np.ndarray | None = None,
                 multiplier: np.ndarray | None = None, clip: float | None = None):
        super().__init__()
        def as_buffer(array):
            return None if array is None else torch.tensor(np.asarray(array, dtype=np.float64))

        self.register_buffer("center", as_buffer(center))
        self.register_buffer("divisor", as_buffer(divisor))
        self.register_buffer("multiplier", as_buffer(multiplier))
        self.clip = None if clip is None else float(clip)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        x = observation.to(torch.float64)
        if self.center is not None:
            x = x - self.center
        if self.divisor is not None:
            x = x / self.divisor
        if self.multiplier is not None:
            x = x * self.multiplier
        if self.clip is not None:
            x = x.clamp(-self.clip, self.clip)
        return x.to(torch.float32)
