"""Plain MLPs evaluated in numpy on the module's own parameters: forward, and backward for training.

On a CPU torch's float32 ``tanh`` costs several times numpy's (43 against 6 us for a 256x64 array on the
machines of BENCHMARKS.md), and for small networks the activations are a fifth of a PPO minibatch update.
:class:`NumpyMLP` computes an ``nn.Sequential`` of Linear layers with Tanh or ReLU between them as numpy
does, on numpy views of the parameters' memory (optimiser steps and ``load_state_dict`` show at once),
and gives autograd the gradients by the chain rule written out, so losses and optimisers are torch's as
before. The module itself is unchanged (state dicts, checkpoints, moving it to a GPU); where it is not
such an MLP on the CPU, the module is called instead.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch.autograd.function import once_differentiable
from torch.nn.modules import module as torch_module

FLOAT_ON_CPU = {(torch.float32, "cpu"), (torch.float64, "cpu")}


def tanh_derivative(y: np.ndarray) -> np.ndarray:
    """``1 - y^2``, tanh's derivative from its output ``y``, in one new array."""
    derivative = np.square(y)
    return np.subtract(1, derivative, out=derivative)


@functools.lru_cache(maxsize=16)
def ones(rows: int, dtype: np.dtype) -> np.ndarray:
    """A read-only vector of ones (a minibatch's column sums are ``ones @ g``)."""
    vector = np.ones(rows, dtype)
    vector.flags.writeable = False
    return vector


#: activation -> (numpy function writing into ``out``, its derivative from its output)
ACTIVATIONS = {
    torch.nn.Tanh: (np.tanh, tanh_derivative),
    torch.nn.ReLU: (lambda x, out: np.maximum(x, 0, out=out), lambda y: y > 0),
}


class NumpyMLP:
    """``module(x)`` computed in numpy, differentiable with respect to the parameters (and ``x``)."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.layers = list(module) if isinstance(module, torch.nn.Sequential) else []
        #: the hook tables torch runs when it calls the module (its own, its layers', and those for every
        #: module), filled in place by ``register_forward_hook`` and the like
        self._hook_tables = [table for m in (module, *self.layers)
                             for table in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks,
                                           m._backward_pre_hooks)]
        self._hook_tables += [torch_module._global_forward_hooks, torch_module._global_forward_pre_hooks,
                              torch_module._global_backward_hooks, torch_module._global_backward_pre_hooks]
        self.parameters = [p for layer in self.layers if isinstance(layer, torch.nn.Linear)
                           for p in (layer.weight, layer.bias) if p is not None]
        self._views_of: tuple[int, ...] = ()

    def __reduce__(self):
        """Pickled as its module: the copy takes its own views and hook tables (Ray sends algorithms to workers)."""
        return NumpyMLP, (self.module,)

    @classmethod
    def supports(cls, module: torch.nn.Module) -> bool:
        """Linear, then (Tanh or ReLU, Linear) any number of times, these very classes, on the CPU in float32
        (or float64)."""
        layers = list(module) if isinstance(module, torch.nn.Sequential) else []
        return (len(layers) % 2 == 1
                and all(type(layer) is torch.nn.Linear for layer in layers[0::2])  # a subclass may compute otherwise
                and all(type(layer) in ACTIVATIONS for layer in layers[1::2])
                and len({(p.dtype, p.device.type) for p in module.parameters()} - FLOAT_ON_CPU) == 0
                and len({p.dtype for p in module.parameters()}) == 1)

    @classmethod
    def of(cls, module: torch.nn.Module):
        """``module`` as a NumpyMLP where that is supported, else ``module`` itself."""
        return cls(module) if cls.supports(module) else module

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if (any(self._hook_tables) or not self._views_current() or x.dtype != self.parameters[0].dtype
                or x.device.type != "cpu"):
            return self.module(x)  # hooks run only when torch calls the module; other dtypes and devices are torch's
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters)):
            return _Differentiable.apply(self, x, *self.parameters)
        return self._forward_tensor(x)[0]

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The output for the rows of ``x`` (2-D), for callers in numpy."""
        self._views_current()
        return self._forward(x)[0]

    def _views_current(self) -> bool:
        """Refresh the numpy views if a parameter's memory moved (flattened into one tensor, say); False when
        the module is no longer one :meth:`supports`."""
        pointers = tuple(p.data_ptr() for p in self.parameters)
        if pointers != self._views_of:
            if not self.supports(self.module):
                return False
            #: (weight transposed, bias or None) per Linear, and (function, derivative) per activation after it
            self.linears = [(layer.weight.detach().numpy().T, None if layer.bias is None else layer.bias.detach().numpy())
                            for layer in self.layers[0::2]]
            self.activations = [ACTIVATIONS[type(layer)] for layer in self.layers[1::2]]
            self._views_of = pointers
        return True

    def _forward_tensor(self, x: torch.Tensor) -> tuple[torch.Tensor, list[np.ndarray]]:
        """:meth:`_forward` on a tensor of any leading dims: the output shaped like ``x``, and the layer inputs."""
        output, inputs = self._forward(x.detach().numpy().reshape(-1, x.shape[-1]))
        return torch.from_numpy(output).reshape(*x.shape[:-1], -1), inputs

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """The output for the rows of ``x``, and each Linear layer's input (what backward needs)."""
        h, inputs = x, []
        for index, (weight_t, bias) in enumerate(self.linears):
            inputs.append(h)
            h = h @ weight_t
            if bias is not None:
                h += bias
            if index < len(self.activations):
                self.activations[index][0](h, out=h)
        return h, inputs

    def backward(self, inputs: list[np.ndarray], grad_output: np.ndarray,
                 input_grad: bool) -> tuple[np.ndarray | None, list[np.ndarray]]:
        """The gradient of the input (when ``input_grad``) and of every parameter, in :attr:`parameters`' order,
        given the output's and the layer inputs :meth:`_forward` kept."""
        g = grad_output.reshape(-1, grad_output.shape[-1])
        grads: list[np.ndarray] = []
        for index in reversed(range(len(self.linears))):
            weight_t, bias = self.linears[index]
            if bias is not None:
                grads.append(ones(len(g), g.dtype) @ g)  # the column sums, by BLAS: 4x numpy's sum(0)
            grads.append(g.T @ inputs[index])
            if index > 0 or input_grad:
                g = g @ weight_t.T
            if index > 0:  # through the activation between Linear index - 1 and this one, from its output
                g *= self.activations[index - 1][1](inputs[index])
        return (g if input_grad else None), grads[::-1]


class _Differentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mlp: NumpyMLP, x: torch.Tensor, *parameters: torch.Tensor) -> torch.Tensor:
        output, ctx.inputs = mlp._forward_tensor(x)
        ctx.mlp, ctx.input_shape = mlp, x.shape
        ctx.save_for_backward(*parameters)  # autograd's check that nothing changes them before backward
        return output

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        ctx.saved_tensors  # raises if a parameter was modified in place since the forward pass
        input_grad, grads = ctx.mlp.backward(ctx.inputs, grad_output.numpy(), ctx.needs_input_grad[1])
        x_grad = None if input_grad is None else torch.from_numpy(input_grad).reshape(ctx.input_shape)
        return (None, x_grad, *(torch.from_numpy(g) for g in grads))
