"""Torch layers from recipe tables (the ``sequential`` network), and the initialised linear layer every
built-in network uses. Recipes are data: a layer type is only ever a key of :data:`LAYER_TYPES`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from torch import Tensor, nn

from rlplug.core.process import physical_memory
from rlplug.errors import ParameterError, UserError, did_you_mean
from rlplug.registry.schema import Range, convert

Init = Literal["orthogonal", "default"]
#: Hidden-layer gain of the orthogonal initialisation.
HIDDEN_GAIN = math.sqrt(2)
#: Float32 copies of a layer's parameters that training holds: the weights, their gradients, Adam's two moments.
TRAINING_COPIES = 4


def linear(fan_in: int, fan_out: int, *, init: Init = "orthogonal", gain: float = HIDDEN_GAIN,
           **options: Any) -> nn.Linear:
    """A linear layer, orthogonally initialised with ``gain`` (zero bias) unless ``init="default"``; refused in
    one line when it cannot fit in memory (an extra digit in a width), before the allocator fails or the
    system kills the process."""
    needed = (fan_in + 1) * fan_out * 4 * TRAINING_COPIES
    available = physical_memory()
    if needed > available:
        raise UserError(f"a layer of {fan_in} x {fan_out} features needs about {needed / 2**30:.3g} GiB to train "
                        f"(weights, gradients, optimiser state), more than this machine's {available / 2**30:.3g} "
                        f"GiB of memory; use smaller layers")
    layer = nn.Linear(fan_in, fan_out, **options)
    if init == "orthogonal":
        nn.init.orthogonal_(layer.weight, gain)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)
    return layer


class BatchNorm1d(nn.BatchNorm1d):
    """Batch normalisation of the last dim for inputs of any batch dims ([B, C], [envs, time, C]): torch's
    BatchNorm1d reads the channels in dim 1, so the batch dims are flattened into one and restored."""

    def forward(self, input: Tensor) -> Tensor:
        return super().forward(input.reshape(-1, input.shape[-1])).reshape(input.shape)


Shape = tuple[int, ...]


@dataclass(frozen=True)
class LayerType:
    """Everything rlplug knows of one layer type a recipe may name: adding a type is adding one record."""

    #: the module built (with the checked options as keyword arguments)
    module: type[nn.Module]
    #: the options a recipe may set, with their types (checked like any parameter); sizes are not among them
    options: Mapping[str, Any] = field(default_factory=dict)
    #: the constructor argument given the input's last dim (the previous layer's features), if any
    size: str | None = None
    #: whether it acts on each feature alone (so it may read the observation and the action concatenated)
    elementwise: bool = False
    #: the options a recipe must set, each with what it is (said when it is missing)
    required: Mapping[str, str] = field(default_factory=dict)
    #: for layers that change the shape: (input shape, options, init) -> (module, output shape)
    build: Callable[[Shape, dict[str, Any], Init], tuple[nn.Module, Shape]] | None = None


def _build_linear(shape: Shape, options: dict[str, Any], init: Init) -> tuple[nn.Module, Shape]:
    out = options.pop("out")
    return linear(shape[-1], out, init=init, **options), (*shape[:-1], out)


def _build_flatten(shape: Shape, options: dict[str, Any], init: Init) -> tuple[nn.Module, Shape]:
    if len(shape) == 1:
        return nn.Identity(), shape
    return nn.Flatten(-len(shape), -1), (math.prod(shape),)


#: The layer types a recipe may name, and nothing else: recipe text is only ever a key of this table.
LAYER_TYPES: dict[str, LayerType] = {
    "Linear": LayerType(nn.Linear, {"out": Annotated[int, Range(ge=1)], "bias": bool}, size="in_features",
                        required={"out": "its number of output features, e.g. {type = \"Linear\", out = 64}"},
                        build=_build_linear),
    "ReLU": LayerType(nn.ReLU, elementwise=True),
    "Tanh": LayerType(nn.Tanh, elementwise=True),
    "ELU": LayerType(nn.ELU, {"alpha": float}, elementwise=True),
    "GELU": LayerType(nn.GELU, {"approximate": Literal["none", "tanh"]}, elementwise=True),
    "SiLU": LayerType(nn.SiLU, elementwise=True),
    "LeakyReLU": LayerType(nn.LeakyReLU, {"negative_slope": float}, elementwise=True),
    "Sigmoid": LayerType(nn.Sigmoid, elementwise=True),
    "LayerNorm": LayerType(nn.LayerNorm, {"eps": Annotated[float, Range(gt=0)], "elementwise_affine": bool,
                                          "bias": bool}, size="normalized_shape"),
    "BatchNorm1d": LayerType(BatchNorm1d, {"eps": Annotated[float, Range(gt=0)],
                                           "momentum": Annotated[float, Range(ge=0, le=1)], "affine": bool,
                                           "track_running_stats": bool}, size="num_features"),
    "Dropout": LayerType(nn.Dropout, {"p": Annotated[float, Range(ge=0, le=1)]}, elementwise=True),
    "Flatten": LayerType(nn.Flatten, build=_build_flatten),
    "Identity": LayerType(nn.Identity, elementwise=True),
}
#: Each layer type's module (the activations of other networks are looked up here too).
LAYERS: dict[str, type[nn.Module]] = {name: kind.module for name, kind in LAYER_TYPES.items()}
#: Layers that act on each feature alone.
ELEMENTWISE = tuple(kind.module for kind in LAYER_TYPES.values() if kind.elementwise)
#: Constructor arguments a recipe might try that rlplug fills in, and what to write instead.
INFERRED = {
    **{kind.size: "inferred from the observation or the previous layer; remove it"
       for kind in LAYER_TYPES.values() if kind.size},
    "out_features": "written 'out' here, e.g. {type = \"Linear\", out = 64}",
    "start_dim": "Flatten flattens one observation's dims, whatever the batch dims; remove it",
    "end_dim": "Flatten flattens one observation's dims, whatever the batch dims; remove it",
    "device": "the run's device (run.device); remove it",
    "dtype": "float32; remove it",
}


def layer_options(index: int, table: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A layer table's type and checked, converted options; :class:`UserError` naming the layer otherwise."""
    where = f"layer {index}"
    kind = table.get("type")
    if kind is None:
        raise UserError(f"{where}: needs a 'type' naming the layer (one of: {', '.join(LAYERS)})")
    if not isinstance(kind, str) or kind not in LAYERS:
        hint = did_you_mean(kind, LAYERS) if isinstance(kind, str) else ""
        raise UserError(f"{where}: unknown layer type {kind!r}{hint}; types: {', '.join(LAYERS)}")
    allowed = LAYER_TYPES[kind].options
    options = {}
    for key, value in table.items():
        if key == "type":
            continue
        if key in INFERRED and key not in allowed:
            raise UserError(f"{where} ({kind}): '{key}' is {INFERRED[key]}")
        if key not in allowed:
            known = ", ".join(allowed) or "none"
            raise UserError(f"{where} ({kind}): unknown option '{key}'{did_you_mean(key, allowed)}; options: {known}")
        try:
            options[key] = convert(value, allowed[key], path=key)  # the same checks as any recipe value
        except ParameterError as error:
            raise UserError(f"{where} ({kind}): {error}") from None
    for key, what in LAYER_TYPES[kind].required.items():
        if key not in options:
            raise UserError(f"{where} ({kind}): needs '{key}', {what}")
    return kind, options


def layers_problem(tables: Sequence[Mapping[str, Any]]) -> str | None:
    """What is wrong with a list of layer tables, or None (a :class:`rlplug.Check` for recipes)."""
    for index, table in enumerate(tables):
        try:
            layer_options(index, table)
        except UserError as error:
            return error.message
    return None


def build_layers(tables: Sequence[Mapping[str, Any]], shape: Sequence[int], *,
                 init: Init = "orthogonal") -> tuple[list[nn.Module], tuple[int, ...]]:
    """The torch layers the tables describe for inputs of one-observation ``shape``, and their output shape.

    A layer's size argument (a Linear's ``in_features``, a norm's features) is the last dim of its input;
    each Linear is initialised like :func:`linear`; Flatten flattens one observation's dims, whatever the
    batch dims.
    """
    shape = tuple(int(n) for n in shape)
    layers: list[nn.Module] = []
    for index, table in enumerate(tables):
        name, options = layer_options(index, table)
        kind = LAYER_TYPES[name]
        if kind.size is not None or kind.build is not None:  # both read the last dim
            _last(shape, index, name)
        if kind.build is not None:
            layer, shape = kind.build(shape, options, init)
        else:
            layer = kind.module(**({kind.size: shape[-1]} if kind.size else {}), **options)
        layers.append(layer)
    return layers, shape


def _last(shape: tuple[int, ...], index: int, kind: str) -> int:
    if not shape:
        raise UserError(f"layer {index} ({kind}): the observation is a scalar; there is no feature dim to read")
    return shape[-1]


def features(shape: Sequence[int]) -> int:
    """The feature count of a layer stack's output shape, which must be one dim for the output layer."""
    if len(shape) == 1:
        return int(shape[0])
    raise UserError(f"the layers end with features of shape {tuple(shape)}, not one dim; add {{type = \"Flatten\"}} "
                    f"before the output layer")
