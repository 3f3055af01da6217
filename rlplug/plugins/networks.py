"""Multi-layer perceptrons for policies and critics, sized from the env's specs."""

from __future__ import annotations

from typing import Annotated, Literal

import rlplug
from rlplug.registry.params import Range

ACTIVATIONS = {"tanh": "Tanh", "relu": "ReLU", "elu": "ELU", "gelu": "GELU", "silu": "SiLU"}
#: Output-layer gains of the orthogonal initialisation (the CleanRL / Stable-Baselines3 convention).
HEAD_GAIN = {"policy": 0.01, "value": 1.0}


def make_mlp(
    observation_spec,
    action_spec,
    role: str,
    hidden: list[Annotated[int, Range(ge=1)]] = (64, 64),
    activation: Literal["tanh", "relu", "elu", "gelu", "silu"] = "tanh",
    init: Literal["orthogonal", "default"] = "orthogonal",
    device: str = "cpu",
):
    """An MLP trunk with the head its role needs (categorical or Gaussian policy, value)."""
    import math

    import torch
    from torch import nn

    from rlplug.networks import input_size, output_size, wrap

    sizes = [input_size(observation_spec), *hidden, output_size(role, action_spec)]
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        linear = nn.Linear(fan_in, fan_out)
        last = index == len(sizes) - 2
        if init == "orthogonal":
            nn.init.orthogonal_(linear.weight, HEAD_GAIN[role] if last else math.sqrt(2))
            nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(getattr(nn, ACTIVATIONS[activation])())
    trunk = nn.Sequential(*layers).to(torch.device(device))
    return wrap(trunk, role=role, observation_spec=observation_spec, action_spec=action_spec)


@rlplug.hookimpl
def rlplug_register_networks(register):
    register("mlp", make_mlp)
