"""Building an algorithm's networks from the components its recipe names: one way for both families, so that a
network's mistake is reported at the same key whichever algorithm builds it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlplug.errors import UserError

if TYPE_CHECKING:
    from tensordict.nn import TensorDictModuleBase


def build_network(component, **context) -> TensorDictModuleBase:
    """``component.build(**context)``, its errors located at the component's key in the algorithm's table
    (``algorithm.policy``) when they name no key of their own."""
    try:
        return component.build(**context)
    except UserError as error:
        raise (error if error.path else error.located(prefix=f"algorithm.{component.path}")) from None
