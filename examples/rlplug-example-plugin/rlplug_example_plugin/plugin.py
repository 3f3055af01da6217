"""The hooks rlplug calls. Factories' signatures are the components' recipe tables.

Only ``rlplug`` and ``typing`` are imported here: torch and TorchRL are imported inside the factories,
so ``rlplug list`` stays quick and a recipe is validated before anything heavy is loaded.
"""

from __future__ import annotations

from typing import Annotated

import rlplug
from rlplug import Range

Discount = Annotated[float, Range(ge=0.0, le=1.0)]


def make_corridor(
    length: Annotated[int, Range(ge=2)] = 5,
    max_steps: Annotated[int, Range(ge=1)] = 50,
    random_start: bool = False,
    device: str = "cpu",  # a context name: rlplug passes run.device, a recipe cannot set it
):
    """A 1-D corridor: step left or right, reward 1 for reaching the right end."""
    from rlplug_example_plugin.corridor import CorridorEnv

    return CorridorEnv(length=length, max_steps=max_steps, random_start=random_start, device=device)


def make_mc_return(gamma: Discount = 0.99, bootstrap: bool = True):
    """Discounted Monte-Carlo returns within the batch; writes ``value_target`` and ``advantage``."""
    from rlplug_example_plugin.estimators import MonteCarloReturn

    return MonteCarloReturn(gamma=gamma, bootstrap=bootstrap)


@rlplug.hookimpl
def rlplug_register_envs(register):
    register("corridor", make_corridor)


@rlplug.hookimpl
def rlplug_register_estimators(register):
    register("mc-return", make_mc_return, aliases=("mc_return",))
