"""Prioritised replay (Schaul et al. 2016): the ring of :class:`~rlplug.plugins.replay_buffers.buffers.ReplayBuffer`
sampled in proportion to priority^alpha, with importance weights."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rlplug.errors import UserError
from rlplug.plugins.replay_buffers.buffers import SEQUENCES_NEED_UNIFORM, ReplayBuffer


class SumPrioritySampler:
    """Proportional prioritised sampling (Schaul et al. 2016) in plain torch.

    Each stored item ``i`` has a priority ``p_i`` (``|priority| + eps`` as last given, or the largest
    priority seen so far when it was written) and is drawn with probability ``P(i) = p_i^alpha / sum_k
    p_k^alpha``, with replacement, by inverting the cumulative sum of ``p^alpha`` (float64) at uniform
    draws from ``generator`` (the buffer's). Importance weights are ``w_i = (N P(i))^-beta / max_k (N P(k))^-beta
    = (p_i^alpha / min_k p_k^alpha)^-beta`` over the ``N`` stored items (normalised by the largest weight
    in the whole buffer, as in OpenAI Baselines and TorchRL, so weights lie in ``(0, 1]``).

    Cost: O(capacity) per ``sample`` (a cumulative sum and a minimum over the stored items) and O(batch) per
    ``update_priority``. TorchRL's segment-tree sampler
    does O(log capacity), but its compiled extension does not load against every torch build.
    """

    def __init__(self, capacity: int, *, alpha: float, beta: float, eps: float,
                 generator: torch.Generator | None = None):
        self.generator = generator  # None: torch's default generator
        self.capacity = int(capacity)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.eps = float(eps)
        self.max_priority = 1.0
        self.priorities = torch.zeros(self.capacity, dtype=torch.float64)  # p_i (0: never written)
        self._powered = torch.zeros(self.capacity, dtype=torch.float64)    # p_i ** alpha

    def _set(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        self.priorities[index] = priority
        self._powered[index] = priority.pow(self.alpha)

    def add(self, index: int) -> None:
        self.extend(torch.as_tensor([index]))

    def extend(self, index: torch.Tensor) -> None:
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1).cpu()
        self._set(index, torch.full(index.shape, self.max_priority, dtype=torch.float64))

    def update_priority(self, index, priority) -> None:
        index = torch.as_tensor(index).reshape(-1).detach().to("cpu", torch.long)
        priority = torch.as_tensor(priority).detach().to("cpu", torch.float64).reshape(-1)
        if priority.numel() == 1 and index.numel() != 1:
            priority = priority.expand(index.shape)
        if priority.shape != index.shape:
            raise ValueError(f"update_priority got {index.numel()} indices and {priority.numel()} priorities")
        if not torch.isfinite(priority).all():
            raise ValueError("update_priority got a NaN or infinite priority")
        if index.numel() and (index.min() < 0 or index.max() >= self.capacity):
            raise IndexError(f"update_priority got an index outside [0, {self.capacity})")
        priority = priority.abs() + self.eps
        self._set(index, priority)  # a repeated index keeps one of its priorities
        if priority.numel():
            self.max_priority = max(self.max_priority, float(priority.max()))

    def probabilities(self, n: int) -> torch.Tensor:
        """``P(i)`` over the first ``n`` items (float64)."""
        powered = self._powered[:n]
        return powered / powered.sum()

    def sample(self, n: int, batch_size: int) -> tuple[torch.Tensor, dict]:
        """``batch_size`` indices among the first ``n`` items, and their importance ``weight`` (float32)."""
        if n == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        powered = self._powered[:n]
        cumulative = powered.cumsum(0)
        draws = torch.rand(batch_size, dtype=torch.float64, generator=self.generator) * cumulative[-1]
        index = torch.searchsorted(cumulative, draws, right=True).clamp_(max=n - 1)
        weight = (powered[index] / powered.min()).pow(-self.beta)
        return index, {"weight": weight.to(torch.float32)}

    def state_dict(self) -> dict[str, Any]:
        return {"priorities": self.priorities, "max_priority": self.max_priority, "beta": self.beta}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        priorities = state["priorities"].to(torch.float64)
        if priorities.shape != self.priorities.shape:
            raise ValueError(f"priorities of shape {tuple(priorities.shape)} for a buffer of capacity {self.capacity}")
        self.priorities = priorities.clone()
        self._powered = self.priorities.pow(self.alpha) * (self.priorities > 0)
        self.max_priority = float(state["max_priority"])
        self.beta = float(state["beta"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha}, beta={self.beta}, eps={self.eps})"


class PrioritizedReplayBuffer(ReplayBuffer):
    """A ring of transitions sampled in proportion to priority^alpha, with importance weights (see
    :class:`SumPrioritySampler`).

    ``sample`` adds ``index`` and ``weight``; give the new priorities (e.g. ``|td_error|``, ``eps`` is
    added) with ``update_priority(sample["index"], priority)``. New transitions get the largest
    priority seen so far. ``beta`` may be set at any time; ``step(frames)`` sets it on the linear way from
    its initial value to ``beta_final`` over ``total_frames`` (when known).
    """

    slot_overhead = 16  # the sampler's two float64 priorities per slot

    def __init__(self, capacity: int, *, alpha: float = 0.6, beta: float = 0.4, beta_final: float | None = None,
                 eps: float = 1e-6, total_frames: int | None = None, **kwargs: Any):
        super().__init__(capacity, **kwargs)
        self.sampler = SumPrioritySampler(capacity, alpha=alpha, beta=beta, eps=eps, generator=self.generator)
        self.beta_initial = float(beta)
        self.beta_final = float(beta) if beta_final is None else float(beta_final)
        self.total_frames = total_frames

    def _written(self, index: torch.Tensor) -> None:
        self.sampler.extend(index)  # new transitions get the largest priority seen so far

    def _draw(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        return self.sampler.sample(len(self), batch_size)

    def _generator_device(self) -> torch.device:
        return torch.device("cpu")  # priorities and draws live on the CPU

    @property
    def alpha(self) -> float:
        return self.sampler.alpha

    @property
    def eps(self) -> float:
        return self.sampler.eps

    @property
    def beta(self) -> float:
        return self.sampler.beta

    @beta.setter
    def beta(self, value: float) -> None:
        self.sampler.beta = float(value)

    def step(self, frames: int) -> None:
        """Anneal ``beta`` linearly from its initial value to ``beta_final`` at ``total_frames``."""
        if not self.total_frames:
            return
        progress = min(max(frames / self.total_frames, 0.0), 1.0)
        self.beta = self.beta_initial + (self.beta_final - self.beta_initial) * progress

    def sample(self, batch_size: int) -> TensorDictBase:
        """``batch_size`` transitions drawn by priority, with ``index`` and ``weight`` (both ``[batch_size]``)."""
        data, info = self._sample(batch_size)
        data.set("index", info["index"].to(self.device))
        data.set("weight", info["weight"].to(self.device))
        return data

    def sample_sequences(self, batch_size: int, length: int) -> TensorDictBase:
        raise UserError(SEQUENCES_NEED_UNIFORM, path="algorithm.replay_buffer")

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priorities of the transitions at ``index`` to ``|priority| + eps``."""
        self.sampler.update_priority(index, priority)

    def probabilities(self) -> torch.Tensor:
        """Each stored transition's sampling probability ``P(i)`` (float64, ``[len]``)."""
        return self.sampler.probabilities(len(self))

    def _sampler_state(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def _load_sampler_state(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)


__all__ = ["PrioritizedReplayBuffer", "SumPrioritySampler"]
