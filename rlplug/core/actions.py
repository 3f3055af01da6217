"""What a policy acts in: an env's action spec read as one :class:`ActionLayout`, and the distribution for
actions made of several categorical parts.

TorchRL writes gymnasium's action spaces as several kinds of spec. Discrete is ``OneHot`` (or ``Categorical``
indices): one categorical, the fast path of :mod:`rlplug.core.acting`. MultiDiscrete is ``MultiOneHot`` or
``MultiCategorical`` (parts of different sizes), ``OneHot`` or ``Categorical`` with a parts dim (equal
sizes), or, from a gymnasium vector env, integer ``Bounded`` values from each part's ``start`` to its last
choice; MultiBinary is ``Binary`` or integer ``Bounded`` values in [0, 1], a part of two choices per bit. Box
is ``Bounded`` or ``Unbounded`` of any shape, a Gaussian over all of it. Every layout made of parts gets
:class:`IndependentCategoricals`, whose log-probability and entropy are the sums over the parts (a
policy that took one part's log-probability for the whole action would learn that part alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import distributions as D
from torch import nn
from torch.nn import functional
from torchrl.data import Binary, Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot, TensorSpec

Kind = Literal["categorical", "parts", "continuous"]


@dataclass(frozen=True)
class ActionLayout:
    """One env's action as a policy head sees it.

    - ``kind``: ``"categorical"`` (one choice among ``parts[0]``), ``"parts"`` (one choice per part) or
      ``"continuous"`` (floats of ``shape``);
    - ``shape``: one action's shape in the spec's layout (without the env batch dims);
    - ``one_hot``: discrete choices written as one-hot vectors (else as indices);
    - ``low``: each part's lowest value, where indices do not start at 0 (a vector env's MultiDiscrete).
    """

    kind: Kind
    shape: tuple[int, ...]
    parts: tuple[int, ...] = ()
    one_hot: bool = False
    low: tuple[int, ...] | None = None
    dtype: torch.dtype = torch.int64

    @property
    def size(self) -> int:
        """The features that parametrise the distribution: logits of every choice, or one mean per float."""
        return sum(self.parts) if self.kind != "continuous" else math.prod(self.shape)

    def describe(self) -> str:
        if self.kind == "categorical":
            return f"one categorical of {self.parts[0]} choices"
        if self.kind == "parts":
            count = f"{len(self.parts)} categorical part{'s' if len(self.parts) > 1 else ''}"
            return f"{count} of {', '.join(map(str, self.parts))} choices"
        return f"floats of shape {list(self.shape)}"

    def distribution_kwargs(self) -> dict:
        """What :class:`IndependentCategoricals` needs besides the logits."""
        return {"parts": self.parts, "shape": self.shape, "one_hot": self.one_hot, "low": self.low,
                "dtype": self.dtype}


def one_env_spec(spec: TensorSpec, env_dims: int) -> TensorSpec:
    """``spec`` of one env: its first ``env_dims`` dims (the env's batch, ``num_envs``) indexed away. What reads a
    single transition's actions (TorchRL's losses: their bounds, their size for the target entropy) needs it."""
    return spec[(0,) * env_dims] if env_dims else spec


def action_layout(action_spec: TensorSpec, env_dims: int) -> ActionLayout:
    """The layout of ``action_spec``, whose first ``env_dims`` dims are the env's batch; ``ValueError`` for a
    spec no policy head acts in."""
    shape = tuple(int(n) for n in action_spec.shape[env_dims:])
    dtype = action_spec.dtype
    if isinstance(action_spec, MultiOneHot):
        return ActionLayout("parts", shape, tuple(int(n) for n in action_spec.nvec), one_hot=True, dtype=dtype)
    if isinstance(action_spec, OneHot):
        if len(shape) == 1:
            return ActionLayout("categorical", shape, shape, one_hot=True, dtype=dtype)
        if len(shape) == 2:
            return ActionLayout("parts", shape, (shape[1],) * shape[0], one_hot=True, dtype=dtype)
    elif isinstance(action_spec, MultiCategorical):
        nvec = torch.as_tensor(action_spec.nvec).reshape(-1, shape[-1])[0]
        return ActionLayout("parts", shape, tuple(int(n) for n in nvec), dtype=dtype)
    elif isinstance(action_spec, Binary):
        return ActionLayout("parts", shape, (2,) * math.prod(shape), dtype=dtype)
    elif isinstance(action_spec, Categorical):
        n = int(action_spec.space.n)
        if not shape:
            return ActionLayout("categorical", shape, (n,), dtype=dtype)
        if len(shape) == 1:
            return ActionLayout("parts", shape, (n,) * shape[0], dtype=dtype)
    elif action_spec.domain == "discrete" and isinstance(action_spec, Bounded) and len(shape) <= 1:
        first_env = (0,) * env_dims
        low = action_spec.space.low[first_env].reshape(-1)
        high = action_spec.space.high[first_env].reshape(-1)
        return ActionLayout("parts", shape, tuple(int(n) for n in high - low + 1), dtype=dtype,
                            low=tuple(int(n) for n in low) if bool(low.any()) else None)
    elif action_spec.domain == "continuous":
        return ActionLayout("continuous", shape, dtype=dtype)
    raise ValueError(f"rlplug's policies cannot act in a {type(action_spec).__name__} action spec of shape "
                     f"{list(shape)} (they act in Discrete, MultiDiscrete, MultiBinary and Box actions)")


class IndependentCategoricals(D.Distribution):
    """One categorical per part over logits concatenated along the last dim (``sum(parts)`` features);
    samples are written as the action spec writes them (indices, shifted by ``low`` where given, or one-hot
    vectors, concatenated or with a parts dim: ``shape``). Log-probability and entropy sum over the parts."""

    arg_constraints: dict = {}

    def __init__(self, logits: torch.Tensor, *, parts: Sequence[int], shape: Sequence[int], one_hot: bool = False,
                 low: Sequence[int] | None = None, dtype: torch.dtype = torch.int64):
        self.parts, self.shape, self.one_hot, self.dtype = tuple(parts), tuple(shape), one_hot, dtype
        self.low = None if low is None else torch.tensor(low, device=logits.device)
        widest = max(self.parts)
        if len(set(self.parts)) == 1:
            grid = logits.unflatten(-1, (len(self.parts), widest))
        else:  # choices a part does not have get no probability
            grid = torch.stack([functional.pad(piece, (0, widest - size), value=-math.inf)
                                for piece, size in zip(logits.split(self.parts, -1), self.parts)], -2)
        self.categoricals = D.Categorical(logits=grid, validate_args=False)
        super().__init__(batch_shape=logits.shape[:-1], event_shape=torch.Size(self.shape), validate_args=False)

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = torch.Size()) -> torch.Tensor:  # noqa: B008
        with torch.no_grad():
            return self._action(self.categoricals.sample(sample_shape))

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.categoricals.log_prob(self._indices(action)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return self.categoricals.entropy().sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return self._action(self.categoricals.logits.argmax(-1))

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    def _indices(self, action: torch.Tensor) -> torch.Tensor:
        """``[..., parts]`` choice indices of an action in the spec's layout."""
        if self.one_hot:
            if len(self.shape) == 2:
                return action.argmax(-1)
            return torch.stack([piece.argmax(-1) for piece in action.split(self.parts, -1)], -1)
        indices = action.long().reshape(*action.shape[: action.ndim - len(self.shape)], len(self.parts))
        return indices - self.low if self.low is not None else indices

    def _action(self, indices: torch.Tensor) -> torch.Tensor:
        if self.one_hot:
            if len(self.shape) == 2:
                return functional.one_hot(indices, self.parts[0]).to(self.dtype)
            return torch.cat([functional.one_hot(indices[..., i], n) for i, n in enumerate(self.parts)],
                             -1).to(self.dtype)
        values = indices + self.low if self.low is not None else indices
        return values.reshape(*values.shape[:-1], *self.shape).to(self.dtype)


class EventShape(nn.Module):
    """Outputs whose last dim is one flat action (a mean, a scale) reshaped to the action's shape."""

    def __init__(self, shape: Sequence[int]):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, outputs):
        if isinstance(outputs, tuple):
            return tuple(output.unflatten(-1, self.shape) for output in outputs)
        return outputs.unflatten(-1, self.shape)
