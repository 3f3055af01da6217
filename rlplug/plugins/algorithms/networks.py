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
        network = component.build(**context)
    except UserError as error:
        raise (error if error.path else error.located(prefix=f"algorithm.{component.path}")) from None
    check_masked(network, component, context)
    return network


def check_masked(network, component, context: dict) -> None:
    """A policy of an env with an ``action_mask`` must read it (the heads of :mod:`rlplug.networks` do): one
    that does not, a recurrent one or a network plugin's own head, would choose disallowed actions, so it is
    refused in one line at its key."""
    from rlplug.core.acting import ActorView
    from rlplug.core.masks import MASK

    spec = context.get("observation_spec")
    if context.get("role") != "policy" or spec is None or MASK not in spec.keys():
        return
    try:
        masked = ActorView.of(network).mask_key is not None
    except TypeError:
        masked = False
    if not masked:
        raise UserError(f"the env allows only some actions at each step ('{MASK}'), and this policy network does "
                        f"not read the mask (recurrent policies and heads not made by rlplug.networks.wrap do "
                        f"not yet)", path=f"algorithm.{component.path}")
