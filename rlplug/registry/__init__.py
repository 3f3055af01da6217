"""The plugin registry: hooks, component records, parameter schemas and their validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlplug.errors import UserError, a
from rlplug.registry.components import Component
from rlplug.registry.manager import get_registry
from rlplug.registry.registry import ComponentSpec, Registry, kind_of
from rlplug.registry.schema import convert, validate

__all__ = ["ComponentSpec", "Registry", "get_registry", "kind_of", "resolve"]


def resolve(component_type: type[Component], table: Mapping[str, Any], path: str = "",
            registry: Registry | None = None) -> Component:
    """A component table (``{"use": name, **params}``) checked all the way down, nothing built yet."""
    registry = registry or get_registry()
    kind = component_type.kind
    name = table.get("use")
    try:
        if name is None:
            raise UserError(f"{a(kind)} table needs a 'use' key naming the {kind} (one of: "
                            f"{', '.join(registry.names(kind))})")
        if not isinstance(name, str):
            raise UserError(f"'use' must be {a(kind)} name (a string), got {name!r}", path="use")
        try:
            spec = registry.lookup(kind, name)
        except UserError as error:
            raise error.located(prefix="use") from None
        params = {k: v for k, v in table.items() if k != "use" and k not in component_type.own_keys}
        what = f"{kind} '{spec.name}'"
        nested = lambda cls, sub, sub_path: resolve(cls, sub, sub_path, registry)  # noqa: E731
        checked = validate(spec.schema, params, what=what, resolve=nested)
        own = {key: convert(table[key], annotation, path=key, resolve=nested)
               for key, annotation in component_type.own_keys.items() if key in table}
    except UserError as error:
        raise error.located(prefix=path) from None
    return component_type(spec, checked, path, **{key: tuple(value) if isinstance(value, list) else value
                                                  for key, value in own.items()})
