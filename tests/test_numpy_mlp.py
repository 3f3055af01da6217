"""NumpyMLP: an MLP's forward and backward in numpy give what torch's autograd gives for the same module."""

from __future__ import annotations

import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlplug.core.numpy_mlp import NumpyMLP
from rlplug.core.training import FlatParameters


def mlp(sizes: list[int], activations: list[type], biases: list[bool], dtype=torch.float32) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        if index:
            layers.append(activations[index - 1]())
        layers.append(torch.nn.Linear(fan_in, fan_out, bias=biases[index], dtype=dtype))
    return torch.nn.Sequential(*layers)


architectures = st.integers(1, 4).flatmap(lambda linears: st.tuples(
    st.lists(st.integers(1, 12), min_size=linears + 1, max_size=linears + 1),
    st.lists(st.sampled_from([torch.nn.Tanh, torch.nn.ReLU]), min_size=linears - 1, max_size=linears - 1),
    st.lists(st.booleans(), min_size=linears, max_size=linears)))


@settings(max_examples=60, deadline=None)
@given(architecture=architectures, batch=st.lists(st.integers(1, 5), max_size=2), input_grad=st.booleans(),
       seed=st.integers(0, 2**16))
def test_output_and_gradients_match_torch_autograd(architecture, batch, input_grad, seed):
    torch.manual_seed(seed)
    module = mlp(*architecture)
    x = torch.randn(*batch, architecture[0][0]) * 2
    weights = torch.randn(*batch, architecture[0][-1])  # a loss that weighs each output differently

    def gradients(forward):
        module.zero_grad(set_to_none=True)
        inputs = x.clone().requires_grad_(input_grad)
        output = forward(inputs)
        (output * weights).sum().backward()
        return output.detach(), [p.grad for p in module.parameters()], inputs.grad

    expected_output, expected_grads, expected_input_grad = gradients(module)
    output, grads, input_grad_found = gradients(NumpyMLP(module))
    torch.testing.assert_close(output, expected_output, rtol=1e-4, atol=1e-5)
    for found, expected in zip(grads, expected_grads):
        torch.testing.assert_close(found, expected, rtol=1e-4, atol=1e-4)
    if input_grad:
        torch.testing.assert_close(input_grad_found, expected_input_grad, rtol=1e-4, atol=1e-4)
    else:
        assert input_grad_found is None
    with torch.no_grad():
        torch.testing.assert_close(NumpyMLP(module)(x), expected_output, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", [torch.nn.Tanh, torch.nn.ReLU])
def test_the_gradients_are_the_derivatives_in_double_precision(activation):
    """Against finite differences: the input's by torch's gradcheck, each parameter element's by hand."""
    torch.manual_seed(0)
    module = mlp([3, 5, 4, 2], [activation, activation], [True, False, True], dtype=torch.float64)
    numpy_mlp = NumpyMLP(module)
    x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(numpy_mlp, (x,))

    def loss() -> torch.Tensor:
        return (numpy_mlp(x.detach()) ** 2).sum()

    module.zero_grad()
    loss().backward()
    for p in module.parameters():
        numeric = torch.zeros_like(p).view(-1)
        with torch.no_grad():
            for index in range(p.numel()):
                original = p.view(-1)[index].item()
                p.view(-1)[index] = original + 1e-6
                plus = loss().item()
                p.view(-1)[index] = original - 1e-6
                minus = loss().item()
                p.view(-1)[index] = original
                numeric[index] = (plus - minus) / 2e-6
        torch.testing.assert_close(p.grad.view(-1), numeric, rtol=1e-5, atol=1e-6)


def test_it_follows_the_parameters_wherever_their_memory_goes():
    """Flattened into one tensor (FlatParameters), stepped in place, loaded from a state dict: the numpy
    views always read the module's current values."""
    torch.manual_seed(0)
    module = mlp([4, 8, 2], [torch.nn.Tanh], [True, True])
    numpy_mlp, x = NumpyMLP(module), torch.randn(5, 4)
    state = {k: v.clone() for k, v in module.state_dict().items()}
    torch.testing.assert_close(numpy_mlp(x), module(x))
    flat = FlatParameters(list(module.parameters()))
    with torch.no_grad():
        flat.flat.add_(0.5)
    torch.testing.assert_close(numpy_mlp(x), module(x))
    module.load_state_dict(state)
    torch.testing.assert_close(numpy_mlp(x), module(x))


class ScaledLinear(torch.nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(x)


@pytest.mark.parametrize("layers", [
    [torch.nn.Linear(3, 3), torch.nn.Linear(3, 2)],  # no activation between
    [torch.nn.Tanh(), torch.nn.Linear(3, 2)],  # an activation before the first Linear
    [torch.nn.Linear(3, 3), torch.nn.GELU(), torch.nn.Linear(3, 2)],  # an activation it has no numpy form of
    [torch.nn.Linear(3, 3), torch.nn.Tanh()],  # ending in an activation
    [torch.nn.Linear(3, 3).half()],
    [ScaledLinear(3, 2)],  # a subclass of Linear with a forward of its own
])
def test_other_modules_are_left_to_torch(layers):
    module = torch.nn.Sequential(*layers)
    assert NumpyMLP.of(module) is module


def test_an_input_of_another_dtype_goes_to_the_module():
    module = mlp([3, 2], [], [True])
    with pytest.raises(RuntimeError):  # torch's own complaint, not a silent cast
        NumpyMLP(module)(torch.randn(2, 3, dtype=torch.float64))


def test_a_module_with_hooks_runs_as_torch_runs_it():
    """Hooks (wandb.watch's, a user's) only run when torch calls the module: then torch does."""
    module = mlp([3, 4, 2], [torch.nn.Tanh], [True, True])
    numpy_mlp, seen = NumpyMLP(module), []
    handle = module[0].register_forward_hook(lambda layer, inputs, output: seen.append(output.shape))
    numpy_mlp(torch.randn(5, 3))
    handle.remove()
    everywhere = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: seen.append("global"))
    numpy_mlp(torch.randn(5, 3))
    everywhere.remove()
    numpy_mlp(torch.randn(5, 3))
    assert seen == [(5, 4), "global", "global", "global", "global"]  # the global hook: the Sequential and its 3 layers


def test_a_pickled_copy_reads_its_own_module():
    """Ray sends algorithms to its workers pickled: the copy's views and hook tables are its own module's."""
    torch.manual_seed(0)
    copy = pickle.loads(pickle.dumps(NumpyMLP(mlp([3, 4, 2], [torch.nn.Tanh], [True, True]))))
    x = torch.randn(5, 3)
    with torch.no_grad():
        copy.module[0].weight.add_(1.0)  # in place, as an optimiser steps
    torch.testing.assert_close(copy(x), copy.module(x))
    seen = []
    copy.module.register_forward_hook(lambda module, inputs, output: seen.append(True))
    copy(x)
    assert seen == [True]


def test_a_parameter_changed_between_forward_and_backward_is_an_error():
    """As with torch's own layers: the backward pass would otherwise use weights the forward pass did not."""
    module = mlp([3, 4, 2], [torch.nn.Tanh], [True, True])
    loss = NumpyMLP(module)(torch.randn(5, 3)).sum()
    with torch.no_grad():
        module[2].weight.add_(1.0)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()
