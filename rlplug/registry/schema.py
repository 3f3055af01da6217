"""A factory's signature is its parameter schema: this module reads it and validates values against it.

Plugin authors write a plain function; its parameters with their annotations and defaults are the only
place a component's parameters are declared. Recipes, ``--set`` overrides and ``rlplug.make`` all go
through :func:`validate`, so a wrong key or type is caught the same way everywhere, before anything runs.

Supported annotations: ``int``, ``float`` (ints accepted), ``bool``, ``str``, ``Literal[...]``,
``list[T]``/``tuple[T, ...]``/``Sequence[T]``, ``dict[str, T]``, unions and ``Optional``, frozen
dataclasses (a TOML table checked field by field), :class:`~rlplug.registry.components.Component` subclasses (a
nested component table), ``Any`` or no annotation (anything), and ``Annotated[T, check, ...]`` where each
check has ``check(value) -> str | None`` returning the problem (see :class:`Range`, :class:`Check`).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import operator
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from rlplug.errors import ParameterError, did_you_mean
from rlplug.registry.components import Component

#: Parameter names the framework fills in itself when a factory asks for them; a recipe cannot set them.
CONTEXT_NAMES = {
    "observation_spec": "the env's observation spec (TorchRL Composite), for networks and algorithms",
    "action_spec": "the env's action spec, for networks and algorithms",
    "role": "what a network is built for: 'policy', 'value', 'q_value' (observation and action in), "
            "'q_values' (one value per discrete action) or 'deterministic_policy'",
    "device": "the torch device of the run (run.device)",
    "seed": "the run's seed (run.seed)",
    "total_frames": "the run's frame budget (run.total_frames), for schedules",
    "eval_episodes": "episodes per evaluation (eval.episodes), for algorithms that report it",
    "eval_every_frames": "frames between evaluations (eval.every_frames; 0: only at the end), for algorithms that "
                         "report it",
    "frames": "the frame count training starts from (0, or where a resumed run goes on), for loggers",
    "networks": "the algorithm's networks by name (policy, critic...), for losses and for loggers that record weights",
    "settings": "the algorithm's settings (its recipe table, as its config), which a loss takes its defaults from",
    "run_dir": "the run directory (a pathlib.Path), for loggers that write files",
    "log_every_frames": "run.log_every_frames: a row of metrics comes every this many frames (0: after every "
                        "update), for loggers that print each row",
}

REQUIRED = inspect.Parameter.empty
#: Floats hold every integer up to this one: an integer parameter takes ``1e6`` as 1000000, but not ``1e18``.
EXACT_FLOAT_INTEGERS = 2**53


@dataclass(frozen=True)
class Range:
    """A numeric bound, used as ``Annotated[int, Range(ge=1)]``."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def check(self, value: Any) -> str | None:
        rules = [(self.ge, ">=", operator.ge), (self.gt, ">", operator.gt),
                 (self.le, "<=", operator.le), (self.lt, "<", operator.lt)]
        failed = [f"{symbol} {bound:g}" for bound, symbol, holds in rules
                  if bound is not None and not holds(value, bound)]
        return f"must be {' and '.join(failed)}, got {value!r}" if failed else None


@dataclass(frozen=True)
class Unbounded:
    """A marker for ``Annotated[float, Unbounded(), ...]``: ``inf`` means "no limit" here, so it is accepted
    (numbers are otherwise finite)."""

    def check(self, value: Any) -> str | None:
        return None


@dataclass(frozen=True)
class Check:
    """Any other rule: ``Annotated[str, Check(fn)]`` where ``fn(value)`` returns the problem or None."""

    fn: Callable[[Any], str | None]

    def check(self, value: Any) -> str | None:
        return self.fn(value)


@dataclass(frozen=True)
class Param:
    name: str
    annotation: Any
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Schema:
    """What a factory accepts: user parameters in order, and the context names it asks for."""

    params: dict[str, Param]
    context: frozenset[str]

    @classmethod
    def of(cls, factory: Callable) -> Schema:
        """The schema ``factory``'s signature (or a dataclass's fields) declares; :class:`SchemaError` naming the
        parameter where an annotation cannot be resolved or is not one the schema can check."""
        what = getattr(factory, "__qualname__", repr(factory))
        if dataclasses.is_dataclass(factory):
            hints = resolved_hints(factory, [f.name for f in dataclasses.fields(factory)], what)
            params = {f.name: Param(f.name, hints.get(f.name, Any), _dataclass_default(f))
                      for f in dataclasses.fields(factory)}
            context: set[str] = set()
        else:
            signature = inspect.signature(factory)
            hints = resolved_hints(factory, list(signature.parameters), what)
            params, context = {}, set()
            for p in signature.parameters.values():
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    continue
                if p.name in CONTEXT_NAMES:
                    context.add(p.name)
                    continue
                annotation = hints.get(p.name, p.annotation)
                params[p.name] = Param(p.name, Any if annotation is REQUIRED else annotation, p.default)
        for param in params.values():
            problem = unsupported(param.annotation)
            if problem:
                raise SchemaError(f"{what}: parameter '{param.name}': {problem}; supported: {SUPPORTED}")
        return cls(params, frozenset(context))

    def check_defaults(self, what: str) -> None:
        """:class:`SchemaError` naming the parameter whose default breaks its own type or bounds (``Check``
        rules are left to validation: they may import what registration must not)."""
        for param in self.params.values():
            if param.required or param.default is None:
                continue
            annotation = without_checks(param.annotation)
            if _component_kind(annotation):
                if not isinstance(param.default, (str, Mapping, Component)):
                    raise SchemaError(f"{what}: parameter '{param.name}': the default {param.default!r} names no "
                                      f"component (a name or a table with 'use')")
                continue
            try:
                convert(param.default, annotation, path=param.name, resolve=_no_components)
            except ParameterError as error:
                raise SchemaError(f"{what}: parameter '{param.name}': its default {param.default!r} breaks its own "
                                  f"annotation ({error.message})") from None


class SchemaError(ParameterError):
    """A factory whose signature is no schema rlplug can check: the plugin's mistake, found at registration."""


#: What :func:`unsupported` accepts, for messages.
SUPPORTED = ("int, float, bool, str, None, Any, Literal[...], list[T], tuple[T, ...], Sequence[T], dict[str, T], "
             "unions, frozen dataclasses, component kinds (rlplug.Network...), Annotated[T, rlplug.Range(...) or "
             "rlplug.Check(fn)]")


def resolved_hints(owner: Any, names: list[str], what: str) -> dict[str, Any]:
    """``typing.get_type_hints`` of a factory or dataclass; where one annotation cannot be resolved (a name not
    imported, under ``from __future__ import annotations`` or not), :class:`SchemaError` naming it."""
    try:
        return typing.get_type_hints(owner, include_extras=True)
    except Exception as error:
        raw = getattr(owner, "__annotations__", {})
        namespace = getattr(owner, "__globals__", None) or vars(inspect.getmodule(owner) or typing)
        for name in names:
            annotation = raw.get(name)
            if isinstance(annotation, str):
                try:
                    eval(annotation, dict(namespace))  # noqa: S307 (a plugin's own annotation text)
                except Exception as inner:
                    raise SchemaError(f"{what}: parameter '{name}': the annotation {annotation!r} cannot be "
                                      f"resolved ({type(inner).__name__}: {inner}); import what it names at the "
                                      f"module's top level") from None
        raise SchemaError(f"{what}: its annotations cannot be resolved ({type(error).__name__}: {error})") from None


def unsupported(annotation: Any) -> str | None:
    """Why the schema cannot check values against ``annotation``, or None."""

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (Any, REQUIRED, int, float, bool, str, type(None), list, tuple, dict):
        return None
    if origin is Annotated:
        rules = [rule for rule in args[1:] if not callable(getattr(rule, "check", None))]
        if rules:
            return f"Annotated takes rules with a check(value) method (rlplug.Range, rlplug.Check), got {rules[0]!r}"
        return unsupported(args[0])
    if origin in (Union, types.UnionType, list, tuple, Sequence):
        return next(filter(None, (unsupported(a) for a in args if a is not Ellipsis)), None)
    if origin is Literal:
        return None
    if origin in (dict, Mapping):
        if args and args[0] is not str:
            return f"{type_name(annotation)}: table keys are strings (dict[str, T])"
        return unsupported(args[1]) if args else None
    if isinstance(annotation, type) and issubclass(annotation, Component):
        return None
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        try:
            Schema.of(annotation)
        except SchemaError as error:
            return error.message
        return None
    return f"{type_name(annotation)} is not a type a recipe value can be checked against"


def without_checks(annotation: Any) -> Any:
    """``annotation`` with its ``Check`` rules taken out (``Range`` and the types stay)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        rules = [rule for rule in args[1:] if not isinstance(rule, Check)]
        base = without_checks(args[0])
        return Annotated[(base, *rules)] if rules else base
    if origin in (Union, types.UnionType):
        return Union[tuple(without_checks(a) for a in args)]  # noqa: UP007 (built at run time)
    if origin in (list, tuple, Sequence, dict, Mapping) and args:
        if origin is Sequence:
            return Sequence[without_checks(args[0])]  # type: ignore[misc]  # built at run time
        return origin[tuple(without_checks(a) for a in args)]
    return annotation


def _component_kind(annotation: Any) -> bool:

    union = typing.get_origin(annotation) in (Union, types.UnionType)
    options = typing.get_args(annotation) if union else (annotation,)
    return any(isinstance(o, type) and issubclass(o, Component) for o in options)


def _no_components(cls, value, path):
    return value  # defaults of nested components are checked by name when the recipe resolves them


def _dataclass_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED


def validate(schema: Schema, values: Mapping[str, Any], *, what: str, resolve: Callable | None = None) -> dict:
    """Check ``values`` against ``schema``; returns them converted, with every default filled in.

    ``what`` names the thing being configured in messages ("ppo (algorithm)"). ``resolve(kind, table,
    path)`` turns a nested component table into a validated component; it is needed only when the
    schema has component parameters.
    """
    for key in values:
        if key in schema.params:
            continue
        if key in CONTEXT_NAMES:
            raise ParameterError(f"'{key}' is set by rlplug ({CONTEXT_NAMES[key]}), not by a recipe; remove it",
                                 path=key)
        known = ", ".join(schema.params) or "none"
        raise ParameterError(f"unknown key '{key}' in {what}{did_you_mean(key, schema.params)}; keys: {known}",
                             path=key)
    converted = {}
    for name, param in schema.params.items():
        if name in values:
            converted[name] = convert(values[name], param.annotation, path=name, resolve=resolve)
        elif param.required:
            raise ParameterError(f"missing required key '{name}' ({type_name(param.annotation)}) in {what}", path=name)
        elif param.default is None:
            converted[name] = None
        else:  # defaults go through the same conversion: a default "mlp" becomes a network component
            converted[name] = convert(param.default, param.annotation, path=name, resolve=resolve)
    return converted


def convert(value: Any, annotation: Any, *, path: str, resolve: Callable | None = None) -> Any:
    """``value`` checked against ``annotation``, converted where TOML's types differ from Python's."""

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is REQUIRED:
        return value
    if origin is Annotated:
        if any(isinstance(rule, Unbounded) for rule in args[1:]) and isinstance(value, float) and math.isinf(value):
            result = value
        else:
            result = convert(value, args[0], path=path, resolve=resolve)
        for rule in args[1:]:
            problem = rule.check(result) if hasattr(rule, "check") else None
            if problem:
                raise ParameterError(problem, path=path)
        return result
    if origin in (Union, types.UnionType):
        return _convert_union(value, args, path=path, resolve=resolve)
    if origin is Literal:
        if value in args:
            return value
        options = ", ".join(repr(a) for a in args)
        hint = did_you_mean(value, [a for a in args if isinstance(a, str)]) if isinstance(value, str) else ""
        raise ParameterError(f"must be one of {options}, got {value!r}{hint}", path=path)
    if isinstance(annotation, type) and issubclass(annotation, Component):
        if resolve is None:
            raise ParameterError("nested components need a registry to resolve them", path=path)
        if isinstance(value, Component):
            return value
        if isinstance(value, str):
            value = {"use": value}
        if not isinstance(value, Mapping):
            raise ParameterError(f"expected a {annotation.kind} table with a 'use' key, got {_shown(value)}",
                                 path=path)
        return resolve(annotation, value, path)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, Mapping):
            raise ParameterError(f"expected a table, got {_shown(value)}", path=path)
        try:
            fields = validate(Schema.of(annotation), value, what=f"[{path}]" if path else "the recipe", resolve=resolve)
        except ParameterError as error:
            raise error.located(prefix=path) from None
        return annotation(**fields)
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ParameterError(f"expected a list, got {_shown(value)}", path=path)
        item_types = _item_types(origin or annotation, args, len(value), path)
        items = [convert(v, t, path=f"{path}[{i}]", resolve=resolve) for i, (v, t) in enumerate(zip(value, item_types))]
        return tuple(items) if (origin or annotation) is tuple else items
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ParameterError(f"expected a table, got {_shown(value)}", path=path)
        value_type = args[1] if len(args) == 2 else Any
        return {k: convert(v, value_type, path=f"{path}.{k}", resolve=resolve) for k, v in value.items()}
    if annotation is type(None):
        if value is None:
            return None
        raise ParameterError(f"expected nothing, got {_shown(value)}", path=path)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ParameterError(f"expected true or false, got {_shown(value)}", path=path)
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            if abs(value) <= EXACT_FLOAT_INTEGERS:
                return int(value)
            raise ParameterError(f"expected an integer, got {_shown(value)}: a float is taken as an integer only up "
                                 f"to 2**53, beyond which floats skip integers; write the integer itself", path=path)
        raise ParameterError(f"expected an integer, got {_shown(value)}", path=path)
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an integer beyond float's range
                raise ParameterError(f"{_shown(value)} is beyond the range of floating-point numbers (about "
                                     f"±1.8e308); write a smaller one", path=path) from None
            if not math.isfinite(number):
                raise ParameterError(f"expected a finite number, got {_shown(value)}", path=path)
            return number
        raise ParameterError(f"expected a number, got {_shown(value)}", path=path)
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ParameterError(f"expected a string, got {_shown(value)}", path=path)
    if isinstance(annotation, type):
        if isinstance(value, annotation):
            return value
        raise ParameterError(f"expected {type_name(annotation)}, got {_shown(value)}", path=path)
    return value  # an annotation we cannot check (a string forward reference, a protocol): trust the factory


def _convert_union(value: Any, options: tuple, *, path: str, resolve: Callable | None) -> Any:
    problems = []
    for option in options:
        try:
            return convert(value, option, path=path, resolve=resolve)
        except ParameterError as error:
            problems.append(error)
    # A problem found inside the one option that has the right shape is more useful than "expected A or B".
    deep = [e for e in problems if e.path != path or not e.message.startswith("expected")]
    if len(deep) == 1:
        raise deep[0]
    expected = " or ".join(type_name(o) for o in options if o is not type(None))
    raise ParameterError(f"expected {expected}, got {_shown(value)}", path=path)


def _item_types(container: Any, args: tuple, length: int, path: str) -> list:
    if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if length != len(args):
            raise ParameterError(f"expected a list of {len(args)} items, got {length}", path=path)
        return list(args)
    return [args[0] if args else Any] * length


def _shown(value: Any) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             tuple: "a list", dict: "a table"}
    kind = next((k for t, k in kinds.items() if type(value) is t), type(value).__name__)
    text = repr(value)
    return f"{text[:40] + '...' if len(text) > 40 else text} ({kind})"


def type_name(annotation: Any) -> str:
    """A short human name for an annotation: ``int``, ``list[int]``, ``'tanh' | 'relu'``, ``network``."""

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is REQUIRED:
        return "any"
    if origin is Annotated:
        return type_name(args[0])
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if isinstance(annotation, type) and issubclass(annotation, Component):
        return annotation.kind
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is type(None):
        return "none"
    return getattr(annotation, "__name__", str(annotation))
