"""Several seeds' copies of one set of networks, stacked: what ``rlplug run --seeds --batched`` trains at once.

Each seed's algorithm is built as a run of that seed builds it, so its parameters sit in one
:class:`~rlplug.core.training.FlatParameters` of the same layout as every other seed's. :class:`StackedParameters`
moves those flat tensors into the rows of one ``[seeds, P]`` tensor: each seed's parameters stay views (its
modules, its ``state_dict`` and its evaluation read the live values), and the update works on the stack,
calling one seed's modules through ``torch.vmap`` with the stacked parameters swapped in
(:meth:`StackedParameters.vmapped`, ``torch.func.functional_call``). Gradient norms are clipped per seed, so one
optimiser over the stack, acting element by element (Adam, RMSprop, SGD), takes each seed's own step. A plain
MLP called alone (acting, at every step of collection) skips vmap's cost per call: :func:`stacked_mlp`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from rlplug.core.training import FlatParameters

#: the way out every refusal of seeds trained together offers
RETRY = "run --seeds without --batched"


class StackedParameters:
    """The rows of one ``[seeds, P]`` parameter, each seed's :class:`FlatParameters` made a view of its row."""

    def __init__(self, flats: list[FlatParameters], trained: bool = True):
        """``trained = False`` for target networks' parameters: no gradient, moved only in place."""
        first = flats[0]
        self.shapes = [p.shape for p in first.parameters]
        self.numels = [p.numel() for p in first.parameters]
        if any([p.shape for p in flat.parameters] != self.shapes for flat in flats):
            raise ValueError("the seeds' networks differ in shape; they cannot be stacked")
        self.stacked = torch.nn.Parameter(torch.stack([flat.flat.detach() for flat in flats]), requires_grad=trained)
        if trained:
            self.stacked.grad = torch.zeros_like(self.stacked)
        for row, flat in zip(self.stacked.data, flats):
            flat.flat.data = row
            for p, view in zip(flat.parameters, self._split(row, 0)):
                p.data = view

    def _split(self, tensor: torch.Tensor, dim: int) -> list[torch.Tensor]:
        # view, not unflatten: a 0-dim parameter (SAC's log alpha) is one element of the row
        return [piece.view((*piece.shape[:dim], *shape)) for piece, shape in zip(tensor.split(self.numels, dim),
                                                                               self.shapes)]

    def leaves(self, trained: bool = True) -> list[torch.Tensor]:
        """Every parameter stacked ``[seeds, *shape]``, views of the stack (differentiable where ``trained``)."""
        return self._split(self.stacked if trained else self.stacked.detach(), 1)

    def clip_and_step(self, optimiser: torch.optim.Optimizer, max_grad_norm: float | None) -> torch.Tensor:
        """Each seed's gradient norm clipped to ``max_grad_norm`` on its own (clip_grad_norm_'s rule), then one
        step; returns the norms before clipping ``[seeds]``. A seed with a non-finite norm is stepped with its
        NaN (the caller stops it); the other seeds' rows never see it."""
        grad = self.stacked.grad
        if grad is None:
            raise RuntimeError("clip_and_step needs the stack's gradient: a stack built with trained = False has none")
        norms = torch.linalg.vector_norm(grad, dim=1)
        if max_grad_norm:
            grad.mul_((max_grad_norm / (norms + 1e-6)).clamp(max=1.0).unsqueeze(1))
        optimiser.step()
        return norms

    @torch.no_grad()
    def finite(self) -> list[bool]:
        """Whether each seed's row is all finite (its float64 sum, as :func:`rlplug.core.training.all_finite`)."""
        return torch.isfinite(self.stacked.sum(dim=1, dtype=torch.float64)).tolist()

    def vmapped(self, module: torch.nn.Module, parameters: list[torch.Tensor], function: Callable,
                randomness: str = "error") -> Callable:
        """``function(*args)`` for every seed at once: ``module`` (one seed's, whose parameters are among
        ``parameters``, that seed's in stacking order) called with each seed's parameters swapped in. The result
        takes ``(leaves, *args)``, each arg with the seeds first, and returns ``function``'s results stacked."""
        position = {id(p): i for i, p in enumerate(parameters)}
        direct = stacked_mlp(module, position) if function is module else None
        if direct is not None:
            return direct
        holder = Calling(module, function)
        names, indices = [], []
        # each place a parameter is held, once: a module reached by two paths (a critic also held as the loss's
        # value function) is one place, swapped and put back once; one parameter in two modules (a shared body)
        # is two places, both swapped
        for prefix, owner in holder.named_modules():
            for name, value in owner.named_parameters(recurse=False):
                if id(value) not in position:
                    raise ValueError(f"{type(module).__name__} holds a parameter ({prefix}.{name}) that is not the "
                                     f"algorithm's")
                names.append(f"{prefix}.{name}")
                indices.append(position[id(value)])

        def one_seed(leaves: list[torch.Tensor], *args: Any) -> Any:
            return functional_call(holder, {name: leaves[i] for name, i in zip(names, indices)}, args,
                                   tie_weights=False)

        return torch.vmap(one_seed, randomness=randomness)


#: parameter-free modules applied element by element, which :func:`stacked_mlp` applies to every seed's rows at once
ELEMENTWISE = (nn.Tanh, nn.ReLU, nn.ELU, nn.GELU, nn.SiLU, nn.LeakyReLU, nn.Sigmoid, nn.Softplus, nn.Mish,
               nn.Identity)


def stacked_mlp(module: nn.Module, position: dict[int, int]) -> Callable | None:
    """``module`` for every seed at once by batched matrix products where it is a plain MLP (an ``nn.Sequential``
    of ``nn.Linear`` and :data:`ELEMENTWISE` activations), as :meth:`StackedParameters.vmapped` calls it: vmap's
    very numbers (it lowers each Linear to the same products) without its cost per call, which acting pays at
    every step. ``position``: each parameter's index among the leaves. None for any other module."""
    if type(module) is not nn.Sequential:
        return None
    layers: list[tuple[int, int] | nn.Module] = []
    for layer in module:
        if type(layer) is nn.Linear and layer.bias is not None:
            if id(layer.weight) not in position or id(layer.bias) not in position:
                return None
            layers.append((position[id(layer.weight)], position[id(layer.bias)]))
        elif type(layer) in ELEMENTWISE:
            layers.append(layer)
        else:
            return None

    def forward(leaves: list[torch.Tensor], observation: torch.Tensor) -> torch.Tensor:
        hidden = observation.reshape(observation.shape[0], -1, observation.shape[-1])  # [seeds, rows, features]
        for layer in layers:
            if isinstance(layer, tuple):
                weight, bias = leaves[layer[0]], leaves[layer[1]]
                hidden = torch.baddbmm(bias.unsqueeze(1), hidden, weight.transpose(1, 2))
            else:
                hidden = layer(hidden)
        return hidden.reshape(*observation.shape[:-1], hidden.shape[-1])

    return forward


class Calling(torch.nn.Module):
    """``function`` as the forward of a module holding ``module``: what ``torch.func.functional_call`` swaps
    parameters into (a TorchRL loss's own ``named_parameters`` takes none of the arguments it passes)."""

    function: Callable

    def __init__(self, module: torch.nn.Module, function: Callable):
        super().__init__()
        self.module = module
        self.__dict__["function"] = function  # not a second child, were it a module: its parameters once

    def forward(self, *args: Any) -> Any:
        return self.function(*args)


def stacked_optimiser(optimisers: list[torch.optim.Optimizer], stacked: torch.nn.Parameter) -> torch.optim.Optimizer:
    """An optimiser of the seeds' optimisers' class and settings over ``stacked``, holding their states as rows
    (each seed's optimiser steps one flat parameter, the row of ``stacked`` its parameters now view)."""
    first = optimisers[0]
    optimiser = type(first)([stacked], **first.defaults)
    states = [o.state.get(o.param_groups[0]["params"][0], {}) for o in optimisers]
    if states[0]:
        optimiser.state[stacked] = {
            name: torch.stack([s[name] for s in states]) if _per_element(value, stacked) else value.clone()
            for name, value in states[0].items()}
    return optimiser


def store_rows(optimiser: torch.optim.Optimizer, stacked: torch.nn.Parameter,
               optimisers: list[torch.optim.Optimizer]) -> None:
    """Each seed's optimiser given its row of the stacked optimiser's state (copies: a checkpoint holds its own)."""
    state = optimiser.state.get(stacked, {})
    for row, seed_optimiser in enumerate(optimisers):
        parameter = seed_optimiser.param_groups[0]["params"][0]
        seed_optimiser.state[parameter] = {
            name: value[row].clone() if value.dim() == 2 and value.shape == stacked.shape else value.clone()
            for name, value in state.items()}
        for group in seed_optimiser.param_groups:
            group["lr"] = optimiser.param_groups[0]["lr"]


def _per_element(value: Any, stacked: torch.Tensor) -> bool:
    """Whether an optimiser's state entry has one number per parameter (Adam's moments; not its step)."""
    return isinstance(value, torch.Tensor) and value.shape == stacked.shape[1:]


def one_flat_parameter(optimiser: torch.optim.Optimizer, flat: Any) -> bool:
    """Whether ``optimiser`` steps exactly the one flat tensor of ``flat`` (what stacking takes)."""
    if not isinstance(flat, FlatParameters) or len(optimiser.param_groups) != 1:
        return False
    stepped = optimiser.param_groups[0]["params"]
    return len(stepped) == 1 and stepped[0] is flat.flat
