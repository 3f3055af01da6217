"""Machinery every algorithm shares: schedules, minibatches, the optimiser step, metric averaging."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from tensordict import TensorDictBase


def linear_decay(start: float, progress: float) -> float:
    """``start`` scaled down linearly to 0 as ``progress`` goes from 0 to 1."""
    return start * max(0.0, 1.0 - progress)


def minibatches(batch: TensorDictBase, size: int, generator: torch.Generator | None = None) -> Iterator[TensorDictBase]:
    """A fresh random partition of a flat batch into minibatches of ``size`` (the last may be smaller)."""
    order = torch.randperm(batch.shape[0], generator=generator, device=batch.device)
    for indices in order.split(size):
        yield batch[indices]


def optimiser_step(optimiser: torch.optim.Optimizer, loss: torch.Tensor, parameters: list[torch.nn.Parameter],
                   max_grad_norm: float | None) -> torch.Tensor:
    """Backward, clip the global gradient norm, step; returns the norm before clipping."""
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm if max_grad_norm else float("inf"))
    optimiser.step()
    return norm


def set_learning_rate(optimiser: torch.optim.Optimizer, lr: float) -> None:
    for group in optimiser.param_groups:
        group["lr"] = lr


class MetricMean:
    """Running means of detached scalars, read once per update so the hot loop never syncs."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def add(self, **values: torch.Tensor) -> None:
        for key, value in values.items():
            value = value.detach().float().mean()
            self.sums[key] = self.sums[key] + value if key in self.sums else value
            self.counts[key] = self.counts.get(key, 0) + 1

    def means(self) -> dict[str, float]:
        return {key: (total / self.counts[key]).item() for key, total in self.sums.items()}
