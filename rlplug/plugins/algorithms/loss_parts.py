"""What every loss factory and every build of a TorchRL loss shares, for both families: the mark of the algorithms a
factory serves, the types of common loss options, unset recipe keys taking the algorithm's settings, and target
updates through TorchRL's ``SoftUpdate``. Torch-free at import (registrations read it); torchrl is imported where
a loss is built. ``rlplug.plugins.losses`` (TorchRL's on-policy losses) builds on it, never the other way.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from rlplug.registry.schema import Range

Coefficient = Annotated[float, Range(ge=0.0)]
Distance = Literal["l1", "l2", "smooth_l1"]
Samples = Annotated[int, Range(ge=1)]


def serving(*algorithms: str):
    """Marks a loss factory with the algorithms it fits (read by their ``loss`` key's check)."""
    def mark(factory):
        factory.serves = algorithms
        return factory
    return mark


def unset_to(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each None replaced from ``defaults`` (then dropped if still None: TorchRL's default)."""
    merged = {key: defaults.get(key) if value is None else value for key, value in values.items()}
    merged.update({key: value for key, value in defaults.items() if key not in values})
    return {key: value for key, value in merged.items() if value is not None}


def with_target_updates(loss):
    """``loss`` with ``update_targets(tau)``: its target parameters moved towards the online ones by TorchRL's
    ``SoftUpdate`` (``tau = 1``: a copy)."""
    from torchrl.objectives import SoftUpdate

    updater = SoftUpdate(loss, eps=0.5)

    def update_targets(tau: float) -> None:
        updater.eps = 1.0 - tau
        updater.step()

    loss.update_targets = update_targets
    return loss
