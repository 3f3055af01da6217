"""What the built-in intrinsic rewards share: the observation they read, flat, and a plain MLP."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

from rlplug.errors import UserError
from rlplug.networks import input_size, observation_entries, observation_key


def observation_size(observation_spec, name: str) -> tuple[str, int]:
    """The observation entry and one observation's flat size; a Dict observation is one line."""
    if observation_entries(observation_spec):
        raise UserError(f"{name} reads one observation tensor and this env's observation is a Dict of entries; use "
                        f"an env with a vector observation (gym's flatten_observations = true)",
                        path="algorithm.intrinsic")
    return observation_key(observation_spec), input_size(observation_spec)


def next_observations(batch: TensorDictBase, key: str, size: int) -> torch.Tensor:
    """The batch's next observations as float32 ``[*batch, size]``."""
    return batch.get(("next", key)).float().reshape(*batch.batch_size, size)


def mlp(size: int, hidden: Sequence[int], out: int, device: str) -> nn.Sequential:
    """Linear layers with ReLU between, orthogonally initialised (the RND paper's networks are so)."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(size, width), nn.ReLU()]
        size = width
    layers.append(nn.Linear(size, out))
    for layer in layers:
        if isinstance(layer, nn.Linear):
            nn.init.orthogonal_(layer.weight, gain=2 ** 0.5)
            nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers).to(device)
