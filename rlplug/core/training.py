"""Machinery every algorithm shares: schedules, the optimiser and its step, gradient clipping, metric means, the
compiled update."""

from __future__ import annotations

import functools
import math
import operator
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlplug.errors import UserError
from rlplug.registry import protocols
from rlplug.registry.protocols import capability

#: Set while a run is asked to stop (by a signal): the update loops end at their next gradient step, so that a
#: stop never waits for the rest of an update of many epochs or gradient steps.
_stop_requested = threading.Event()


def stop_updates() -> None:
    """Make every update end after its current gradient step (safe to call from a signal handler)."""
    _stop_requested.set()


def allow_updates() -> None:
    """Let updates run whole again (a run starting to train)."""
    _stop_requested.clear()


#: Also asked before each gradient step, where a run sets it (:func:`end_updates_when`): whether something that
#: waits for the run (an ``rlplug set`` request) should end the update under way there.
_waiting: Callable[[], bool] | None = None


def end_updates_when(waiting: Callable[[], bool] | None) -> None:
    """Make every update end after its current gradient step once ``waiting()`` is true (None: never)."""
    global _waiting
    _waiting = waiting


def updates_stopped() -> bool:
    """Whether an update loop should end now: checked before each gradient step."""
    return _stop_requested.is_set() or (_waiting is not None and _waiting())


def linear_decay(start: float, progress: float) -> float:
    """``start`` scaled down linearly to 0 as ``progress`` goes from 0 to 1."""
    return start * max(0.0, 1.0 - progress)


def scheduled_lr(lr: float, schedule: str, progress: float) -> float:
    """The learning rate at ``progress`` (0..1) of the run: constant, linear to 0, or cosine to 0."""
    if schedule == "linear":
        return linear_decay(lr, progress)
    if schedule == "cosine":
        return lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return lr


#: Optimisers by recipe name, with the defaults rlplug uses unless ``optimizer_kwargs`` says otherwise:
#: ``eps=1e-5`` for Adam as in Stable-Baselines3 and CleanRL, RMSprop as in SB3's A2C; the fused kernels
#: update every parameter in one call (the per-tensor loop costs more than the arithmetic for small networks).
OPTIMIZERS: dict[str, tuple[Callable[..., torch.optim.Optimizer], dict[str, Any]]] = {
    "adam": (torch.optim.Adam, {"eps": 1e-5, "fused": True}),
    "adamw": (torch.optim.AdamW, {"eps": 1e-5, "fused": True}),
    "sgd": (torch.optim.SGD, {"foreach": True}),
    "rmsprop": (torch.optim.RMSprop, {"alpha": 0.99, "eps": 1e-5, "foreach": True}),
}


def make_optimizer(name: str, parameters: list[torch.nn.Parameter] | FlatParameters, lr: float,
                   kwargs: dict | None = None) -> torch.optim.Optimizer:

    optimizer_class, defaults = OPTIMIZERS[name]
    stepped = [parameters.flat] if isinstance(parameters, FlatParameters) else parameters
    try:
        return optimizer_class(stepped, lr=lr, **{**defaults, **(kwargs or {})})
    except TypeError as error:  # an unknown keyword in optimizer_kwargs
        raise UserError(f"{name}: {error}; see torch.optim.{optimizer_class.__name__}",
                        path="algorithm.optimizer_kwargs") from None


class FlatParameters:
    """Several modules' parameters moved into one contiguous tensor, their gradients into another.

    Each parameter becomes a view of ``flat`` (its gradient a view of ``flat.grad``), so zeroing the
    gradients, scaling them for the clip and the optimiser step over ``[flat]`` are one kernel each instead
    of one per tensor: for small networks those launches cost as much as the arithmetic (BENCHMARKS.md). The
    arithmetic is the same up to rounding: the optimisers here act element by element, and the clipping norm
    over one tensor sums in another order than over several. Parameters keep their identity, so modules,
    ``state_dict`` and ``load_state_dict`` work as before.
    """

    def __init__(self, parameters: list[torch.nn.Parameter], trained: bool = True):
        """``trained = False`` for parameters that are only ever copied or averaged into (target networks):
        no gradients."""
        self.parameters = parameters
        self.flat = torch.nn.Parameter(torch.cat([p.detach().reshape(-1) for p in parameters]), requires_grad=trained)
        self.grads: list[torch.Tensor] = []
        grad = torch.zeros_like(self.flat) if trained else None
        self.flat.grad = grad
        offset = 0
        for p in parameters:
            p.data = self.flat.data[offset: offset + p.numel()].view_as(p)
            if grad is not None:
                self.grads.append(grad[offset: offset + p.numel()].view_as(p))
            offset += p.numel()
        if trained:
            self.zero_grad()

    @classmethod
    def where_possible(cls, parameters: list[torch.nn.Parameter],
                       allowed: bool = True) -> FlatParameters | list[torch.nn.Parameter]:
        """``parameters`` flattened when ``allowed`` and one tensor can hold them (one dtype, one device),
        else the list as it is: what :func:`make_optimizer` and :func:`optimiser_step` take."""
        if allowed and len({(p.dtype, p.device) for p in parameters}) == 1:
            return cls(parameters)
        return parameters

    def gradient(self) -> torch.Tensor:
        """``flat.grad``, which every parameter's gradient is a view of."""
        if self.flat.grad is None:
            raise RuntimeError("these parameters were flattened without gradients (trained=False), or flat.grad "
                               "was set to None: nothing to zero, clip or step")
        return self.flat.grad

    def zero_grad(self) -> None:
        """Zero the gradients in place; backward then accumulates into the views. A parameter whose gradient
        was replaced (a ``module.zero_grad()`` sets it to None) is given its view back."""
        self.gradient().zero_()
        for p, grad in zip(self.parameters, self.grads):
            if p.grad is not grad:
                p.grad = grad


def storages_of(parameters: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each distinct storage holding ``parameters``, whole, as a 1-D tensor: the parameters of a
    :class:`FlatParameters` (views of one tensor) come back as that one tensor, so checking them all for
    NaN after every update is one kernel instead of a concatenation (which an off-policy loop pays every step)."""
    storages: dict[tuple, tuple] = {}
    for p in parameters:
        storage = p.untyped_storage()
        storages.setdefault((storage.data_ptr(), p.dtype), (storage, p))
    return [torch.empty(0, dtype=p.dtype, device=p.device).set_(storage) for storage, p in storages.values()]


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every element is finite, read from each tensor's float64 sum (one reduction and no mask):
    a NaN or infinity makes the sum non-finite, and float32 or narrower values cannot overflow it."""
    return all(math.isfinite(t.sum(dtype=torch.float64)) for t in tensors)


def load_optimiser_state(optimiser: torch.optim.Optimizer, state: dict) -> None:
    """``optimiser.load_state_dict(state)``, and ``ValueError`` where a per-parameter tensor (Adam's moments, a
    momentum buffer) has another shape than its parameter: torch takes such a state and fails only at the next
    step, in the middle of training."""
    optimiser.load_state_dict(state)
    for group in optimiser.param_groups:
        for parameter in group["params"]:
            for name, value in optimiser.state.get(parameter, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != parameter.shape:
                    raise ValueError(f"the optimiser's {name} has shape {list(value.shape)} for a parameter of "
                                     f"shape {list(parameter.shape)}")


def summed(terms: list[torch.Tensor]) -> torch.Tensor:
    """A loss's terms added pairwise: one autograd node per term, where stacking them and summing takes two
    nodes and a select per term in the backward pass, on every minibatch."""
    return functools.reduce(operator.add, terms)


#: Metrics that are NaN when undefined, not when training broke: the explained variance of a batch whose
#: value targets are all equal (a critic saturated on a solved task can make them so).
MAY_BE_UNDEFINED = ("explained_variance",)


def broken_metric(metrics: dict[str, float]) -> str | None:
    """The first metric that is NaN or infinite where that means training broke, or None."""
    return next((name for name, value in metrics.items()
                 if not math.isfinite(value) and name not in MAY_BE_UNDEFINED), None)


class NonFiniteError(ArithmeticError):
    """A loss or gradient became NaN or infinite; nothing was stepped."""

    def __init__(self, quantity: str):
        super().__init__(f"{quantity} is not finite")
        self.quantity = quantity


def optimiser_step(optimiser: torch.optim.Optimizer, loss: torch.Tensor,
                   parameters: list[torch.nn.Parameter] | FlatParameters,
                   max_grad_norm: float | None) -> torch.Tensor | None:
    """Backward, clip the global gradient norm (if asked), step; returns the norm before clipping.

    A non-finite loss or gradient norm raises :class:`NonFiniteError` before the parameters are touched.
    """
    if not math.isfinite(loss.item()):
        raise NonFiniteError("the loss")
    if isinstance(parameters, FlatParameters):
        parameters.zero_grad()
    else:
        optimiser.zero_grad(set_to_none=True)
    loss.backward()
    return clip_and_step(optimiser, parameters, max_grad_norm)


def clip_and_step(optimiser: torch.optim.Optimizer, parameters: list[torch.nn.Parameter] | FlatParameters,
                  max_grad_norm: float | None) -> torch.Tensor | None:
    """Clip the gradients' global norm (if asked) and step; returns the norm before clipping.

    A non-finite norm raises :class:`NonFiniteError` before the parameters are touched.
    """
    norm = None
    if max_grad_norm:
        # one norm kernel over the flat gradient, where the per-tensor norms of clip_grad_norm_ cost a dozen
        if isinstance(parameters, FlatParameters):
            flat_grad: torch.Tensor | None = parameters.gradient()
            norm = torch.linalg.vector_norm(flat_grad)
        else:
            flat_grad = None
            norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm, foreach=True)
        total = norm.item()
        if not math.isfinite(total):
            raise NonFiniteError("the gradient norm")
        # clip_grad_norm_'s rule: scale by min(1, max / (norm + 1e-6))
        if flat_grad is not None and total + 1e-6 > max_grad_norm:
            flat_grad.mul_(max_grad_norm / (total + 1e-6))
    optimiser.step()
    return norm


def set_learning_rate(optimiser: torch.optim.Optimizer, lr: float) -> None:
    for group in optimiser.param_groups:
        group["lr"] = lr


def compile_in_place(module: torch.nn.Module, device: str) -> None:
    """``module`` compiled by ``torch.compile`` where it stands: the same object afterwards (a TorchRL
    ``LossModule`` stays one), its forward and backward compiled on first call. On CUDA the compiled graphs are
    replayed as CUDA graphs ('reduce-overhead'): a small network's update is many tiny kernels, each paying a
    launch."""
    module.compile(mode="reduce-overhead" if torch.device(device).type == "cuda" else None)


def forget_former_buffers(module: torch.nn.Module, names: tuple[str, ...]) -> None:
    """Checkpoints of runs written when ``module``'s class held the buffers ``names`` still load into it: a
    ``load_state_dict`` pre-hook drops those of them the module no longer has (``rlplug resume``, ``eval``)."""

    def drop(target: torch.nn.Module, state_dict: dict, prefix: str, *rest: Any) -> None:
        own = dict(target.named_buffers(recurse=False))
        for name in names:
            if name not in own:
                state_dict.pop(prefix + name, None)

    module.register_load_state_dict_pre_hook(drop)


def share_of(size: int, copies: int) -> int:
    """Each copy's share of a minibatch (or replay sample) of ``size`` when ``copies`` copies compute its
    gradients apart (Ray's gradient workers, learners): together they make the whole."""
    return math.ceil(size / copies)


class MetricMean:
    """Running means of detached scalars, read once per update so the hot loop never syncs."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def add(self, **values: torch.Tensor | None) -> None:
        for key, value in values.items():
            if value is None:
                continue
            value = value.detach()
            if value.numel() != 1 or value.dtype != torch.float32:  # off-policy loops add a few every env step
                value = value.float().mean()
            if key in self.sums:
                self.sums[key] = self.sums[key] + value
                self.counts[key] += 1
            else:
                # a copy: a compiled loss on CUDA graphs writes its next outputs where this one's were
                self.sums[key], self.counts[key] = value.clone(), 1

    def means(self) -> dict[str, float]:
        return {key: total.item() / self.counts[key] for key, total in self.sums.items()}


def compile_update(algorithm: Any, title: str) -> None:
    """``run.compile = true``: the algorithm's own compilation of its update, or a one-line refusal."""
    compile_own = capability(algorithm, protocols.Algorithm.compile_update)
    if compile_own is None:
        raise UserError(f"{title} does not declare compile_update, so run.compile cannot compile its update; "
                        f"set run.compile = false", path="run.compile")
    compile_own()


@dataclass
class Prepared:
    """A batch made ready for the epochs: the flat tensors the loss reads, split into a fresh random partition
    of minibatches each epoch (the last may be smaller; one minibatch as large as the batch is the batch).

    Each epoch gathers the whole batch once in its random order (one ``index_select`` per key) and splits it into
    its minibatches (one ``split`` per key, views): the same minibatches as indexing each with its share of the
    permutation, at two operator calls per key and epoch instead of one gather per key and minibatch."""

    data: dict[str, torch.Tensor]
    minibatch_size: int
    #: of the critic's values at collection time against the value targets (None without a critic)
    explained_variance: float | None
    #: this epoch's minibatches of each key, in the epoch's random order
    shuffled: dict[str, tuple[torch.Tensor, ...]] = field(default_factory=dict, repr=False)
    #: the steps of each sequence where the data are sequences (``[sequences, steps, ...]``: a recurrent policy's)
    sequence_length: int | None = None

    def rows(self, size: int) -> list[int]:
        """The TensorDict batch size of ``size`` rows: a sequence's steps are a second batch dim."""
        return [size] if self.sequence_length is None else [size, self.sequence_length]

    @property
    def length(self) -> int:
        return len(self.data["advantage"])

    @property
    def steps(self) -> int:
        """Minibatches per epoch."""
        return math.ceil(self.length / self.minibatch_size)

    def minibatch(self, index: int) -> TensorDictBase:
        """The epoch's minibatch ``index`` as a TensorDict; index 0 starts an epoch with a new partition."""
        if self.minibatch_size >= self.length:
            return TensorDict(self.data, batch_size=self.rows(self.length))
        if index == 0:
            order = torch.randperm(self.length, device=self.data["advantage"].device)
            # a Dict observation's TensorDict has no index_select: it is indexed
            self.shuffled = {key: (value.index_select(0, order) if isinstance(value, torch.Tensor) else value[order])
                             .split(self.minibatch_size) for key, value in self.data.items()}
        rows = min(self.minibatch_size, self.length - index * self.minibatch_size)
        return TensorDict({key: parts[index] for key, parts in self.shuffled.items()}, batch_size=self.rows(rows))


@torch.no_grad()
def explained_variance(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(target - prediction) / Var(target): 1 is a perfect critic, 0 no better than a constant."""
    variance = target.var()
    return float("nan") if variance == 0 else (1 - (target - prediction).var() / variance).item()
