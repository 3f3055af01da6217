"""Exploration noise for deterministic continuous policies (DDPG, TD3): Gaussian and Ornstein-Uhlenbeck.

Each is a TensorDict module reading and writing ``action``. It adds noise only while TorchRL's exploration
type is ``RANDOM`` (``torchrl.envs.utils.set_exploration_type(ExplorationType.RANDOM)``, which rlplug's
collector sets); under any other type, or none set, the action passes through untouched, so deterministic
evaluation stays clean.

Scale: ``sigma`` is a fraction of half the action range, per dimension (the Stable-Baselines3 / skrl
convention): with finite bounds ``[low, high]`` the noise added has standard deviation ``sigma * (high -
low) / 2`` (Gaussian), and the noisy action is clamped into ``[low, high]``. A dimension without finite
bounds (or whose range overflows float32, as that of TorchRL's ``Unbounded`` spec does) is scaled by 1 and
not clamped.

Schedule: ``step(frames)`` sets the progress ``p = min(frames / total_frames, 1)``; the current sigma is
``sigma`` (``constant``), ``sigma + (final_sigma - sigma) * p`` (``linear``) or ``sigma * (final_sigma /
sigma) ** p`` (``exponential``).

State (``state_dict()``, weights-only loadable): the frame count of the schedule and, for
Ornstein-Uhlenbeck, the process's current value, under ``_extra_state``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.envs.utils import ExplorationType, exploration_type

from rlplug.core.module_values import BufferedValue
from rlplug.errors import ParameterError, UserError

SCHEDULES = ("constant", "linear", "exponential")


def action_bounds(action_spec) -> tuple[torch.Tensor, torch.Tensor]:
    """One action's ``(low, high)`` from an action spec (Bounded or Unbounded, env batch dims dropped)."""
    from torchrl.data import Composite

    if action_spec is None:
        raise ValueError("exploration noise is built with the env's action_spec (context)")
    if isinstance(action_spec, Composite):
        action_spec = action_spec["action"]
    if action_spec.domain != "continuous":
        raise UserError("exploration noise is for continuous actions; this env's actions are discrete")
    space = action_spec.space
    low = torch.as_tensor(space.low, dtype=torch.float32).expand(action_spec.shape)
    high = torch.as_tensor(space.high, dtype=torch.float32).expand(action_spec.shape)
    while low.ndim > 1:  # the spec carries the env batch dims in front: every env has the same bounds
        low, high = low[0], high[0]
    return low.clone(), high.clone()


def check_schedule(sigma: float, final_sigma: float | None, schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise ParameterError(f"must be one of {', '.join(map(repr, SCHEDULES))}, got {schedule!r}", path="schedule")
    if schedule != "constant" and final_sigma is None:
        raise ParameterError(f"schedule = '{schedule}' needs final_sigma", path="final_sigma")
    if schedule == "exponential" and final_sigma is not None and (sigma <= 0 or final_sigma <= 0):
        raise ParameterError("schedule = 'exponential' needs sigma > 0 and final_sigma > 0", path="final_sigma")


def scheduled(sigma: float, final_sigma: float | None, schedule: str, progress: float) -> float:
    """The sigma at ``progress`` in [0, 1] of the schedule."""
    if schedule == "constant" or final_sigma is None:
        return sigma
    if schedule == "linear":
        return sigma + (final_sigma - sigma) * progress
    return sigma * (final_sigma / sigma) ** progress


class ScheduledNoise(TensorDictModuleBase):
    """What both noises share: bounds, schedule, the exploration-type switch, and the state."""

    in_keys = ["action"]
    out_keys = ["action"]
    #: the schedule's position (frames collected)
    frames = BufferedValue("scheduled_frames", torch.int64)
    #: the sigma the schedule starts from, and the one it ends at (NaN: none); buffers, so that a value changed
    #: during a run (``rlplug set``) reaches the Ray workers' copies with the weights
    initial_sigma = BufferedValue("scheduled_sigma", torch.float64)
    final_value = BufferedValue("scheduled_final_sigma", torch.float64)

    def __init__(self, action_spec, *, sigma: float, final_sigma: float | None = None, schedule: str = "constant",
                 total_frames: int | None = None, device: str | torch.device = "cpu"):
        super().__init__()
        check_schedule(sigma, final_sigma, schedule)
        low, high = action_bounds(action_spec)
        finite = torch.isfinite(high - low)  # TorchRL's Unbounded spec says +-float32 max: the range overflows
        scale = torch.where(finite, (high - low) / 2, torch.ones_like(low))
        low = torch.where(finite, low, torch.full_like(low, -math.inf))
        high = torch.where(finite, high, torch.full_like(high, math.inf))
        self.register_buffer("low", low.to(device), persistent=False)
        self.register_buffer("high", high.to(device), persistent=False)
        self.register_buffer("scale", scale.to(device), persistent=False)
        self.initial_sigma = float(sigma)
        self.final_sigma = None if final_sigma is None else float(final_sigma)
        self.schedule = schedule
        self.total_frames = total_frames
        self.frames = 0

    @property
    def final_sigma(self) -> float | None:
        final = self.final_value
        return None if math.isnan(final) else final

    @final_sigma.setter
    def final_sigma(self, value: float | None) -> None:
        self.final_value = math.nan if value is None else float(value)

    @property
    def progress(self) -> float:
        if not self.total_frames:
            return 0.0
        return min(max(self.frames / self.total_frames, 0.0), 1.0)

    @property
    def sigma(self) -> float:
        """The current sigma (a fraction of half the action range)."""
        return scheduled(self.initial_sigma, self.final_sigma, self.schedule, self.progress)

    def step(self, frames: int) -> None:
        """Set the schedule's position to ``frames`` collected so far."""
        self.frames = int(frames)

    def active(self) -> bool:
        return exploration_type() == ExplorationType.RANDOM

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set("action", self.act_on(tensordict.get("action")))
        return tensordict

    def act_on(self, action: torch.Tensor) -> torch.Tensor:
        """``action`` with noise added and clamped to the bounds while exploring, else as it is (what
        :meth:`forward` does to a TensorDict's action; the collector's array road calls it directly)."""
        if not self.active():
            return action
        noise = self.sample_noise(action)  # in units of half the range
        low, high, scale = (t.to(action.device, action.dtype) for t in (self.low, self.high, self.scale))
        return (action + noise.to(action.dtype) * scale).clamp(low, high)

    def sample_noise(self, action: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Restart the noise process (only Ornstein-Uhlenbeck has one)."""

    def get_extra_state(self) -> dict[str, Any]:
        return {"frames": self.frames}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.frames = int(state["frames"])

    def extra_repr(self) -> str:
        final = "" if self.schedule == "constant" else f", final_sigma={self.final_sigma}, schedule={self.schedule!r}"
        return f"sigma={self.initial_sigma}{final}, frames={self.frames}"


class GaussianNoise(ScheduledNoise):
    """Independent Gaussian noise: ``action + N(0, (sigma * half_range)^2)``, clamped to the bounds."""

    def sample_noise(self, action: torch.Tensor) -> torch.Tensor:
        return torch.randn_like(action) * self.sigma


class OrnsteinUhlenbeckNoise(ScheduledNoise):
    """Temporally correlated noise (Uhlenbeck and Ornstein 1930; as in DDPG, Lillicrap et al. 2016).

    One process per action entry of the batch it sees, ``x <- x + theta (mu - x) dt + sigma sqrt(dt) N(0, 1)``
    at each call (Baselines' form), starting from 0; the action gets ``x * half_range``. Its stationary
    standard deviation is about ``sigma / sqrt(2 theta)`` (0.37 with the defaults), reached over about
    ``1 / (theta dt)`` steps. ``reset(mask)`` restarts the entries where ``mask`` (e.g. ``("next",
    "done")``, shaped like the batch, with or without a trailing 1) is true, all of them without a mask; a
    batch of another shape restarts the process.
    """

    def __init__(self, action_spec, *, theta: float = 0.15, sigma: float = 0.2, dt: float = 1e-2, mu: float = 0.0,
                 **kwargs: Any):
        super().__init__(action_spec, sigma=sigma, **kwargs)
        self.theta = float(theta)
        self.dt = float(dt)
        self.mu = float(mu)
        self.state: torch.Tensor | None = None

    def sample_noise(self, action: torch.Tensor) -> torch.Tensor:
        if self.state is None or self.state.shape != action.shape or self.state.device != action.device:
            self.state = torch.zeros(action.shape, dtype=torch.float32, device=action.device)
        x = self.state
        x = x + self.theta * (self.mu - x) * self.dt + self.sigma * math.sqrt(self.dt) * torch.randn_like(x)
        self.state = x
        return x

    def reset(self, mask: torch.Tensor | None = None) -> None:
        if self.state is None:
            return
        if mask is None:
            self.state = None
            return
        mask = torch.as_tensor(mask, dtype=torch.bool, device=self.state.device)
        if mask.ndim == self.state.ndim and mask.shape[-1] == 1:
            pass  # [*batch, 1] broadcasts over the action dims
        elif mask.shape == self.state.shape[: mask.ndim]:
            mask = mask.reshape(mask.shape + (1,) * (self.state.ndim - mask.ndim))
        else:
            raise ValueError(f"reset mask of shape {tuple(mask.shape)} for noise of shape {tuple(self.state.shape)}")
        self.state = torch.where(mask, torch.zeros((), device=self.state.device), self.state)

    def get_extra_state(self) -> dict[str, Any]:
        state = super().get_extra_state()
        state["ou_state"] = self.state.cpu() if self.state is not None else torch.zeros(0)
        state["ou_started"] = self.state is not None
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.state = state["ou_state"].to(self.low.device).clone() if state.get("ou_started") else None

    def extra_repr(self) -> str:
        return f"theta={self.theta}, dt={self.dt}, mu={self.mu}, " + super().extra_repr()


__all__ = ["GaussianNoise", "OrnsteinUhlenbeckNoise", "ScheduledNoise", "action_bounds", "scheduled"]
