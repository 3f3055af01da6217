"""Observation preprocessors: modules from a tensor to a tensor whose statistics learn only in ``train()``.

See :mod:`rlplug.plugins.preprocessors.scalers`.
"""

from __future__ import annotations

from typing import Annotated

from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Range


def make_running_standard_scaler(
    #: added to the variance under the square root
    epsilon: Annotated[float, Range(gt=0.0)] = 1e-8,
    #: the scaled values are clipped to [-clip, clip]; none: not clipped
    clip: Annotated[float, Range(gt=0.0)] | None = 5.0,
    observation_spec=None,
    device="cpu",
):
    """Standardise observations by a running mean and variance (frozen in evaluation), then clip."""
    from rlplug.plugins.preprocessors.scalers import RunningStandardScaler

    shape = None
    if observation_spec is not None:
        from rlplug.networks import observation_entries, observation_shape

        if observation_entries(observation_spec) is not None:
            from rlplug.errors import UserError

            raise UserError("standardises one observation tensor, and this env's observation is a Dict of entries; "
                            "leave it unset, or set env.flatten_observations = true")
        shape = observation_shape(observation_spec)
    return RunningStandardScaler(shape, epsilon=epsilon, clip=clip, device=device)


@hookimpl
def rlplug_register_preprocessors(register):
    register("running-standard-scaler", make_running_standard_scaler, aliases=("running_standard_scaler",))
