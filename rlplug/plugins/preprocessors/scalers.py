"""Observation preprocessors: plain ``nn.Module`` s from a tensor to a tensor, learning only in ``train()``.

:class:`RunningStandardScaler` standardises by a running mean and variance (the ``running-standard-scaler``
component), as Stable-Baselines3's ``VecNormalize`` and skrl's ``RunningStandardScaler`` do.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class RunningStandardScaler(nn.Module):
    """``(x - mean) / sqrt(var + epsilon)``, clipped to ``[-clip, clip]``, over a running mean and variance.

    ``x`` is shaped ``[*batch, *shape]`` where ``shape`` is one observation's (from the spec, or the last dim
    of the first input when none is given). In ``train()`` mode each call first merges the batch into the
    statistics with Chan et al.'s parallel update (exact for any split of the data into batches, in float64),
    then scales ``x`` with them; in ``eval()`` mode the statistics are frozen. ``var`` is the population
    variance (divided by the count). Buffers ``mean``, ``var`` (float64, ``shape``) and ``count`` (float64, a
    scalar) are the whole state: ``state_dict()`` carries them.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor
    shape: tuple[int, ...] | None

    def __init__(self, shape: Sequence[int] | None = None, *, epsilon: float = 1e-8, clip: float | None = 5.0,
                 device: str | torch.device = "cpu"):
        super().__init__()
        self.epsilon = float(epsilon)
        self.clip = None if clip is None else float(clip)
        self.shape = None if shape is None else tuple(int(n) for n in shape)
        self._lazy = shape is None
        initial = () if self.shape is None else self.shape
        self.register_buffer("mean", torch.zeros(initial, dtype=torch.float64, device=device))
        self.register_buffer("var", torch.ones(initial, dtype=torch.float64, device=device))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64, device=device))

    def _batch_dims(self, x: torch.Tensor) -> int:
        if self.shape is None:  # no spec: features along the last dim, fixed by the first input
            self.shape = tuple(x.shape[-1:])
            self.mean = torch.zeros(self.shape, dtype=torch.float64, device=self.mean.device)
            self.var = torch.ones(self.shape, dtype=torch.float64, device=self.var.device)
        ndim = len(self.shape)
        if tuple(x.shape[x.ndim - ndim:]) != self.shape or x.ndim < ndim:
            raise ValueError(f"the scaler expects observations of shape {self.shape}, got a tensor of shape "
                             f"{tuple(x.shape)}")
        return x.ndim - ndim

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch into the statistics (Chan et al. 1979: exact for any split of the data)."""
        batch_dims = self._batch_dims(x)
        flat = x.detach().to(self.mean.device, torch.float64).reshape(-1, *x.shape[batch_dims:])
        n = flat.shape[0]
        if n == 0:
            return
        batch_mean = flat.mean(0)
        batch_m2 = ((flat - batch_mean) ** 2).sum(0)
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_m2 + delta ** 2 * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.update(x)
        else:
            self._batch_dims(x)
        mean = self.mean.to(x.dtype) if x.is_floating_point() else self.mean.float()
        std = torch.sqrt(self.var + self.epsilon).to(mean.dtype)
        y = (x - mean) / std
        if self.clip is not None:
            y = y.clamp(-self.clip, self.clip)
        return y

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a scaler built without a shape takes the saved statistics' shape
        mean = state_dict.get(prefix + "mean")
        if self._lazy and mean is not None and tuple(mean.shape) != tuple(self.mean.shape):
            self.shape = tuple(mean.shape)
            self.mean = torch.zeros_like(mean, dtype=torch.float64, device=self.mean.device)
            self.var = torch.ones_like(mean, dtype=torch.float64, device=self.var.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"shape={self.shape}, epsilon={self.epsilon}, clip={self.clip}, count={int(self.count)}"


__all__ = ["RunningStandardScaler"]
