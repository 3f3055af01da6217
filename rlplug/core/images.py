"""Encoders of image observations, for the ``cnn`` network: one observation (an image, or a Dict observation's
TensorDict of entries) to one vector of features.

Images arrive as envs give them: gymnasium's ``H x W x C`` uint8, ``H x W`` grey, ``k x H x W`` stacked
frames, MinAtar's ``10 x 10 x C`` booleans, or channels-first floats in [0, 1] after TorchRL's
``ToTensorImage``. :class:`ImageInput` makes each a float ``C x H x W`` in [0, 1] inside the network (uint8
divided by 255; channels moved first where they are last; stacked frames folded into the channels), so no
recipe has to transform them and replay buffers keep the compact uint8. Which dim holds the channels is read
from the shape: of a 3-dim image's first and last dims, the smaller (on a tie, the last for integers and
booleans, gymnasium's layout, the first for floats, TorchRL's).

Convolutions are TorchRL's ``ConvNet``. Unless the recipe chooses, an image of at least :data:`LARGE_FRAME`
pixels on its shorter side gets the Nature DQN encoder (Mnih et al. 2015: 32 8x8 stride 4, 64 4x4 stride 2,
64 3x3 stride 1, then 512 features), a smaller one MinAtar's (Young and Tian 2019: 16 3x3 stride 1, then 128).
In a Dict observation each image entry has its own encoder and the other entries (vectors, scalars) join the
image features before the hidden layers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.data import Composite
from torchrl.modules import ConvNet

from rlplug.core.layers import HIDDEN_GAIN, LAYERS, Init
from rlplug.core.observations import is_image, key_name
from rlplug.errors import UserError

#: Images at least this many pixels on their shorter side get the Nature DQN encoder (the least it fits).
LARGE_FRAME = 36


@dataclass(frozen=True)
class Architecture:
    """Convolutions (output channels, square kernel sizes, strides) and the hidden layers after them."""

    channels: tuple[int, ...]
    kernels: tuple[int, ...]
    strides: tuple[int, ...]
    hidden: tuple[int, ...]


NATURE = Architecture(channels=(32, 64, 64), kernels=(8, 4, 3), strides=(4, 2, 1), hidden=(512,))
SMALL = Architecture(channels=(16,), kernels=(3,), strides=(1,), hidden=(128,))


@dataclass(frozen=True)
class ImageShape:
    """How one image entry is laid out: ``channels x height x width`` once :class:`ImageInput` is done."""

    shape: tuple[int, ...]
    channels_last: bool
    scale: float | None  # 1/255 for uint8
    channels: int
    height: int
    width: int

    @classmethod
    def of(cls, shape: Sequence[int], dtype: torch.dtype) -> ImageShape:
        shape = tuple(int(n) for n in shape)
        scale = 1 / 255 if dtype == torch.uint8 else None
        if len(shape) == 2:
            return cls(shape, False, scale, 1, *shape)
        frames, image = (1, shape) if len(shape) == 3 else (shape[0], shape[1:])
        channels_last = image[-1] < image[0] or (image[-1] == image[0] and not dtype.is_floating_point)
        channels, height, width = (image[2], image[0], image[1]) if channels_last else image
        return cls(shape, channels_last, scale, frames * channels, height, width)


class ImageInput(nn.Module):
    """An image as its env gives it -> float ``[..., C, H, W]`` in [0, 1] (see :class:`ImageShape`)."""

    def __init__(self, image: ImageShape):
        super().__init__()
        self.image = image

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        layout = self.image
        x = image.to(torch.float32)
        if layout.scale is not None:
            x = x * layout.scale
        if len(layout.shape) == 2:
            return x.unsqueeze(-3)
        if layout.channels_last:
            x = x.movedim(-1, -3)
        return x.flatten(-4, -3) if len(layout.shape) == 4 else x


class ImageEncoder(nn.Sequential):
    """:class:`ImageInput`, then TorchRL's ``ConvNet`` (its features flattened): ``out_features`` per image."""

    def __init__(self, image: ImageShape, architecture: Architecture, activation: type[nn.Module], init: Init,
                 name: str):
        height, width = image.height, image.width
        for index, (kernel, stride) in enumerate(zip(architecture.kernels, architecture.strides)):
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
            if height < 1 or width < 1:
                raise UserError(f"the {image.height} x {image.width} image '{name}' is smaller than what convolution "
                                f"{index} reads (kernel {kernel}, stride {stride}, after the ones before it); "
                                f"choose smaller kernels or strides")
        convolutions = ConvNet(in_features=image.channels, num_cells=list(architecture.channels),
                               kernel_sizes=list(architecture.kernels), strides=list(architecture.strides),
                               activation_class=activation)
        if init == "orthogonal":
            for layer in convolutions.modules():
                if isinstance(layer, nn.Conv2d):
                    nn.init.orthogonal_(layer.weight, HIDDEN_GAIN)
                    if layer.bias is not None:
                        nn.init.zeros_(layer.bias)
        super().__init__(ImageInput(image), convolutions)
        self.out_features = architecture.channels[-1] * height * width


class EntriesEncoder(nn.Module):
    """A Dict observation (a TensorDict of entries) -> its image entries' features, then its other entries
    (as float32, a scalar as one feature), concatenated."""

    def __init__(self, images: Mapping[str, ImageEncoder], vectors: Mapping[str, tuple[int, ...]]):
        super().__init__()
        self.image_names = list(images)
        self.encoders = nn.ModuleList(images.values())
        self.vectors = [(name, len(shape)) for name, shape in vectors.items()]  # dims: 0 a scalar, 1 a vector
        self.out_features = sum(encoder.out_features for encoder in images.values()) + sum(
            math.prod(shape) for shape in vectors.values())

    def forward(self, observation: TensorDictBase) -> torch.Tensor:
        features = [encoder(observation.get(name)) for name, encoder in zip(self.image_names, self.encoders)]
        for name, dims in self.vectors:
            value = observation.get(name).to(torch.float32)
            features.append(value.unsqueeze(-1) if dims == 0 else value)
        return torch.cat(features, -1)


def default_architecture(images: Sequence[ImageShape]) -> Architecture:
    """Nature DQN's where every image is at least :data:`LARGE_FRAME` pixels a side, else the small one."""
    return NATURE if all(min(image.height, image.width) >= LARGE_FRAME for image in images) else SMALL


def architecture(images: Sequence[ImageShape], channels: Sequence[int] | None, kernels: Sequence[int] | None,
                 strides: Sequence[int] | None, hidden: Sequence[int] | None) -> Architecture:
    """The recipe's choices, the rest from :func:`default_architecture`: kernels and strides left unset follow
    the default where ``channels`` has its length, else 3 and 1 for every layer."""
    default = default_architecture(images)
    channels = tuple(channels) if channels is not None else default.channels
    fits = len(channels) == len(default.channels)
    kernels = tuple(kernels) if kernels is not None else default.kernels if fits else (3,) * len(channels)
    strides = tuple(strides) if strides is not None else default.strides if fits else (1,) * len(channels)
    for name, values in (("kernels", kernels), ("strides", strides)):
        if len(values) != len(channels):
            raise UserError(f"{name} has {len(values)} values for {len(channels)} convolutions (channels "
                            f"{list(channels)}); give one per convolution")
    return Architecture(channels, kernels, strides, tuple(hidden) if hidden is not None else default.hidden)


def image_encoder(observation_spec: Composite, key, *, channels=None, kernels=None, strides=None, hidden=None,
                  activation: str = "ReLU", init: Init = "orthogonal") -> tuple[nn.Module, Architecture]:
    """The encoder of the observation ``key`` (an image, or a Dict of entries with at least one image) and the
    architecture it follows (its ``hidden`` for the layers after it); ``UserError`` where there is no image."""
    env_dims = observation_spec.ndim
    spec = observation_spec[key]
    entries = {name: spec[name] for name in spec.keys()} if isinstance(spec, Composite) else {key: spec}
    for name, entry in entries.items():
        if isinstance(entry, Composite) or len(entry.shape) - env_dims > 4:
            raise UserError(f"cnn reads images of 2 to 4 dims and vectors, and entry '{name}' is "
                            f"{'a nested Dict' if isinstance(entry, Composite) else list(entry.shape[env_dims:])}")
    images = {name: ImageShape.of(entry.shape[env_dims:], entry.dtype) for name, entry in entries.items()
              if is_image(entry, env_dims)}
    if not images:
        shapes = ", ".join(f"'{name}' {list(entry.shape[env_dims:])}" for name, entry in entries.items())
        beside = [f"'{key_name(name)}' {list(entry.shape[env_dims:])}" for name, entry in
                  observation_spec.items(True, True) if name != key and is_image(entry, env_dims)]
        if beside:  # a spec read as the env gives it, before one_observation gathered its entries
            raise UserError(f"cnn reads the observation entry {shapes}, and the env's images ({', '.join(beside)}) "
                            f"are beside it; build the env with rlplug.envs.one_observation (as a run does), "
                            f"which gathers them into it")
        raise UserError(f"cnn encodes images (entries of 2 or more dims), and this env observes none ({shapes}); "
                        f"use mlp")
    chosen = architecture(list(images.values()), channels, kernels, strides, hidden)
    encoders = {name: ImageEncoder(image, chosen, LAYERS[activation], init, name) for name, image in images.items()}
    if not isinstance(spec, Composite):
        return encoders[key], chosen
    vectors = {name: tuple(entry.shape[env_dims:]) for name, entry in entries.items() if name not in images}
    return EntriesEncoder(encoders, vectors), chosen
