"""``rlplug.make``: one component built through the same validation and building a recipe's components get."""

from __future__ import annotations

from typing import Any

from rlplug.registry import resolve
from rlplug.registry.components import COMPONENT_TYPES, Env
from rlplug.registry.registry import kind_of
from rlplug.registry.schema import CONTEXT_NAMES


def make(kind: str, name: str, **params: Any) -> Any:
    """Build one component through the same validation a recipe gets; an env inside its ``transforms`` too.

    Context names (``observation_spec``, ``role``, ...) may be passed too; they go to the factory as context.
    """
    component_type = COMPONENT_TYPES[kind_of(kind)]
    context = {k: params.pop(k) for k in list(params) if k in CONTEXT_NAMES}
    component = resolve(component_type, {"use": name, **params})
    if isinstance(component, Env) and component.transforms:
        from rlplug.core.transformed import build_transformed  # TorchRL is loaded only where it is needed

        return build_transformed(component, **context)
    return component.build(**context)
