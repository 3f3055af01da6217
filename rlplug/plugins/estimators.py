"""Advantage and value-target estimators: pure TensorDict modules over ``[*batch, time]`` data."""

from __future__ import annotations

from typing import Annotated

import rlplug
from rlplug.registry.params import Range

Discount = Annotated[float, Range(ge=0.0, le=1.0)]


def make_gae(gamma: Discount = 0.99, lmbda: Discount = 0.95):
    """Generalised advantage estimation (Schulman et al. 2016); writes ``advantage``."""
    from rlplug.estimators import GAE

    return GAE(gamma=gamma, lmbda=lmbda)


def make_from_advantage():
    """Value targets as advantage plus the critic's value; writes ``value_target``."""
    from rlplug.estimators import ValueTargetFromAdvantage

    return ValueTargetFromAdvantage()


@rlplug.hookimpl
def rlplug_register_estimators(register):
    register("gae", make_gae)
    register("from_advantage", make_from_advantage, aliases=("from-advantage",))
