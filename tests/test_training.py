"""FlatParameters: one tensor for all parameters changes nothing but the speed of the optimiser step."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlplug.core.training import FlatParameters, make_optimizer, optimiser_step


def networks(seed: int) -> list[torch.nn.Module]:
    torch.manual_seed(seed)
    body = torch.nn.Linear(3, 8)  # shared by both, as a shared body is
    return [torch.nn.Sequential(body, torch.nn.Tanh(), torch.nn.Linear(8, 2)),
            torch.nn.Sequential(body, torch.nn.Tanh(), torch.nn.Linear(8, 1))]


def train(modules, flat: bool, optimizer: str, max_grad_norm: float | None, data: torch.Tensor, steps: int):
    parameters = list({id(p): p for m in modules for p in m.parameters()}.values())
    trained = FlatParameters(parameters) if flat else parameters
    optimiser = make_optimizer(optimizer, trained, 1e-2)
    for step in range(steps):
        loss = sum(m(data).pow(2).mean() for m in modules) * (1 + step)
        optimiser_step(optimiser, loss, trained, max_grad_norm)
    return parameters


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), optimizer=st.sampled_from(["adam", "adamw", "sgd", "rmsprop"]),
       max_grad_norm=st.sampled_from([None, 0.05, 10.0]), steps=st.integers(1, 5))
def test_flat_parameters_train_exactly_as_separate_ones(seed, optimizer, max_grad_norm, steps):
    data = torch.randn(16, 3, generator=torch.Generator().manual_seed(seed))
    separate = train(networks(seed), False, optimizer, max_grad_norm, data, steps)
    flat = train(networks(seed), True, optimizer, max_grad_norm, data, steps)
    assert len(separate) == len(flat) == 6  # the shared body counted once
    for a, b in zip(separate, flat):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # the same arithmetic, up to rounding


def test_parameters_become_views_and_survive_zero_grad_and_load_state_dict():
    modules = networks(0)
    parameters = list({id(p): p for m in modules for p in m.parameters()}.values())
    flat = FlatParameters(parameters)
    state = copy.deepcopy(modules[0].state_dict())
    modules[0].zero_grad()  # sets the gradients to None: they are given their views back at the next step
    optimiser = make_optimizer("sgd", [flat.flat], 0.1)
    optimiser_step(optimiser, modules[0](torch.ones(1, 3)).sum(), flat, None)
    assert flat.flat.grad.abs().sum() > 0  # the gradients reached the one tensor the optimiser steps
    assert not torch.equal(modules[0][0].weight, state["0.weight"])  # stepped through the views
    modules[0].load_state_dict(state)  # copies in place: still the views
    assert torch.equal(flat.flat[: 24].view(8, 3), state["0.weight"])
    assert pickle.loads(pickle.dumps(modules[1]))[2].weight.shape == (1, 8)


def test_a_non_finite_gradient_norm_touches_no_parameter():
    modules = networks(0)
    parameters = list(modules[0].parameters())
    flat = FlatParameters(parameters)
    before = flat.flat.detach().clone()
    optimiser = make_optimizer("adam", [flat.flat], 0.1)
    loss = modules[0](torch.full((1, 3), float("inf"))).sum() * 0 + parameters[0].sum() * float("inf")
    with pytest.raises(ArithmeticError):
        optimiser_step(optimiser, loss.clamp(max=1.0), flat, 1.0)
    assert torch.equal(flat.flat.detach(), before)


def test_parameters_flattened_without_gradients_refuse_a_step_in_one_line():
    """``trained=False`` (target networks) gives no gradient: zeroing or clipping one is a clear error."""
    modules = networks(0)
    flat = FlatParameters(list(modules[0].parameters()), trained=False)
    assert flat.flat.grad is None and not flat.grads
    with pytest.raises(RuntimeError, match="without gradients"):
        flat.zero_grad()


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=5), flat=st.booleans(), poisoned=st.integers(0, 4),
       poison=st.sampled_from([float("nan"), float("inf"), -float("inf")]))
def test_the_nan_check_reads_every_parameter_once_per_storage(sizes, flat, poisoned, poison):
    """After every update the trainer checks the parameters by storage: a flat set is one tensor, and a NaN
    anywhere in any parameter is still seen."""
    from rlplug.core.training import all_finite, storages_of

    parameters = [torch.nn.Parameter(torch.randn(size)) for size in sizes]
    if flat:
        FlatParameters(parameters)
    storages = storages_of(parameters)
    assert len(storages) == (1 if flat else len(parameters))
    assert sum(s.numel() for s in storages) == sum(sizes)
    assert all_finite(storages)
    with torch.no_grad():
        for p in parameters:
            p.fill_(3e38)  # the largest float32s: finite, and so is their sum (taken in float64)
    assert all_finite(storages)
    with torch.no_grad():
        parameters[poisoned % len(parameters)][-1] = poison
    assert not all_finite(storages)


def test_compute_threads_set_torch_and_numpy_blas_alike():
    """The numpy networks run on numpy's BLAS, whose threads would otherwise spin on every core."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from rlplug.core.process import set_compute_threads

    before = torch.get_num_threads()
    with threadpool_limits():  # restores the BLAS thread counts afterwards
        set_compute_threads(1)
        blas = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
        assert torch.get_num_threads() == 1 and blas and set(blas) == {1}
    torch.set_num_threads(before)
