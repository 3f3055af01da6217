"""How a kind's protocol (:mod:`rlplug.registry.protocols`) is checked and read at run time: which members are
optional (:func:`optional`), the required ones checked when a component is built (:func:`conform`), the optional
ones read where an object has them (:func:`capability`). Kept apart from the protocols so that those read as the
contract alone; :mod:`rlplug.registry.protocols` hands all of these out too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from rlplug.errors import UserError, one_line

Member = TypeVar("Member", bound=Callable[..., Any])


def optional(member: Member) -> Member:
    """Marks a protocol member as optional: rlplug uses it where an object has it."""
    setattr(member, "__rlplug_optional__", True)  # noqa: B010 (a marker mypy cannot know functions take)
    return member


def members(protocol: type) -> dict[str, bool]:
    """``name -> required`` for every member a protocol declares (methods, properties and annotated fields)."""
    found: dict[str, bool] = {}
    for klass in reversed(protocol.__mro__):
        if klass in (object, Protocol) or not getattr(klass, "_is_protocol", False):
            continue
        for name in getattr(klass, "__annotations__", {}):
            found[name] = True
        for name, value in vars(klass).items():
            if name.startswith("_") and name not in ("__call__", "__len__"):
                continue
            function = value.fget if isinstance(value, property) else value
            if callable(function):
                found[name] = not getattr(function, "__rlplug_optional__", False)
    return found


class ContractError(UserError):
    """A plugin's component that is not what its kind must be: the plugin's mistake, named as such."""


def conform(protocol: type, value: Any, what: str) -> Any:
    """``value`` if it has every required member of ``protocol``; else :class:`ContractError` naming ``what``
    (the component and its plugin) and the first member missing."""
    missing = [name for name, required in members(protocol).items() if required and not hasattr(value, name)]
    if missing:
        shown = "None" if value is None else f"a {type(value).__name__}"
        raise ContractError(f"{what} returned {shown} without '{missing[0]}', which every {protocol.__name__.lower()} "
                            f"must have ({protocol.__module__}.{protocol.__qualname__}); this is the plugin's "
                            f"mistake: tell its author")
    return value


def optional_name(member: Callable, protocol: type | None = None) -> str:
    """The attribute name of the optional ``member`` (of ``protocol``); a TypeError (rlplug's bug) for others."""
    function = member.fget if isinstance(member, property) else member
    if not getattr(function, "__rlplug_optional__", False) or (
            protocol is not None and not function.__qualname__.startswith(f"{protocol.__name__}.")):
        raise TypeError(f"{function.__qualname__} is not an optional member of "
                        f"{'a protocol' if protocol is None else f'the {protocol.__name__} protocol'}")
    return function.__name__


def capability(value: Any, member: Callable) -> Any:
    """The optional protocol ``member`` (``Collector.metrics``, say) of ``value``, bound, or None without it."""
    return getattr(value, optional_name(member), None)


def has_member(value: Any, member: Callable) -> bool:
    """Whether ``value`` has the optional protocol ``member`` (for members that may hold a false value)."""
    return hasattr(value, optional_name(member))


def checked_metrics(metrics: Any, what: str) -> dict[str, float]:
    """An update's metrics if they are a dict of plain numbers; else :class:`ContractError` naming ``what``."""
    if not isinstance(metrics, dict):
        raise ContractError(f"{what}: update() returned {type(metrics).__name__}, not a dict of metrics")
    for name, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ContractError(one_line(f"{what}: update() returned the metric '{name}' as "
                                         f"{type(value).__name__} {value!r}; metrics must be plain numbers "
                                         f"(float(tensor) or tensor.item())"))
    return metrics
