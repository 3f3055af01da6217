"""Torch layers from recipe tables (the ``sequential`` network), and the initialised linear layer every
built-in network uses. Recipes are data: a layer type is only ever a key of :data:`LAYERS`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from torch import nn

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


#: The torch.nn layers a recipe may name, and nothing else: recipe text is only ever a key of this table.
LAYERS: dict[str, type[nn.Module]] = {
    "Linear": nn.Linear, "ReLU": nn.ReLU, "Tanh": nn.Tanh, "ELU": nn.ELU, "GELU": nn.GELU, "SiLU": nn.SiLU,
    "LeakyReLU": nn.LeakyReLU, "Sigmoid": nn.Sigmoid, "LayerNorm": nn.LayerNorm, "Dropout": nn.Dropout,
    "Flatten": nn.Flatten, "Identity": nn.Identity,
}
#: Layers that act on each feature alone (so they may read the observation and the action concatenated).
ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.ELU, nn.GELU, nn.SiLU, nn.LeakyReLU, nn.Sigmoid)
#: Each layer's options a recipe may set, passed to its constructor, with their types (checked like any
#: parameter). Sizes are not among them: they follow from the observation and the previous layer.
LAYER_OPTIONS: dict[str, dict[str, Any]] = {
    "Linear": {"out": Annotated[int, Range(ge=1)], "bias": bool},
    "ReLU": {}, "Tanh": {}, "SiLU": {}, "Sigmoid": {}, "Flatten": {}, "Identity": {},
    "ELU": {"alpha": float},
    "GELU": {"approximate": Literal["none", "tanh"]},
    "LeakyReLU": {"negative_slope": float},
    "LayerNorm": {"eps": Annotated[float, Range(gt=0)], "elementwise_affine": bool, "bias": bool},
    "Dropout": {"p": Annotated[float, Range(ge=0, le=1)]},
}
REQUIRED_OPTIONS = {"Linear": ("out",)}
#: Constructor arguments a recipe might try that rlplug fills in, and what to write instead.
INFERRED = {
    "in_features": "inferred from the observation or the previous layer; remove it",
    "out_features": "written 'out' here, e.g. {type = \"Linear\", out = 64}",
    "normalized_shape": "inferred from the previous layer; remove it",
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
    allowed = LAYER_OPTIONS[kind]
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
    for key in REQUIRED_OPTIONS.get(kind, ()):
        if key not in options:
            raise UserError(f"{where} ({kind}): needs '{key}', its number of output features, "
                            f"e.g. {{type = \"{kind}\", {key} = 64}}")
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

    Each Linear reads the last dim (``in_features`` inferred) and is initialised like :func:`linear`;
    LayerNorm normalises the last dim; Flatten flattens one observation's dims, whatever the batch dims.
    """
    shape = tuple(int(n) for n in shape)
    layers: list[nn.Module] = []
    for index, table in enumerate(tables):
        kind, options = layer_options(index, table)
        if kind == "Linear":
            out = options.pop("out")
            layers.append(linear(_last(shape, index, kind), out, init=init, **options))
            shape = (*shape[:-1], out)
        elif kind == "LayerNorm":
            layers.append(nn.LayerNorm(_last(shape, index, kind), **options))
        elif kind == "Flatten":
            layers.append(nn.Flatten(-len(shape), -1) if len(shape) > 1 else nn.Identity())
            shape = (math.prod(shape),) if shape else (_last(shape, index, kind),)
        else:
            layers.append(LAYERS[kind](**options))
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
