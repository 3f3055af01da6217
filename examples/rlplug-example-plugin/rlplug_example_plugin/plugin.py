"""The hooks rlplug calls. Factories' signatures are the components' recipe tables.

Only ``rlplug``, its torch-free algorithm kit (``rlplug.algorithms``) and the standard library are imported here:
torch and TorchRL are imported inside the factories, so ``rlplug list`` stays quick and a recipe is validated before
anything heavy is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import rlplug
from rlplug import Check, Loss, Range
from rlplug.algorithms import REPLAY_CONTEXT, EntropyConfig, PolyakTargets, factory_for, loss_fits, named, serving

if TYPE_CHECKING:
    from rlplug_example_plugin.sac_n import SACN

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


@dataclass(frozen=True)
class SACNConfig(PolyakTargets, EntropyConfig):
    """SAC-N: soft actor-critic with an ensemble of N critics, targets and actor on the lowest of all N."""

    #: the critics of the ensemble (N), each a copy of the critic network
    critics: Annotated[int, Range(ge=2, le=100)] = 5
    #: what each gradient step minimises: the plugin's SAC-N loss
    loss: Annotated[Loss, Check(loss_fits("sac-n"))] = named(Loss, "example:sac-n-loss")


def sac_n() -> type[SACN]:
    from rlplug_example_plugin.sac_n import SACN

    return SACN


@serving("sac-n")
def make_sac_n_loss(networks, settings, observation_spec, action_spec, device: str = "cpu"):
    """SAC-N's loss: every critic on the lowest target of the ensemble, the actor and the entropy coefficient."""
    from rlplug_example_plugin.sac_n import build_loss

    return build_loss(networks, settings, observation_spec, action_spec)


@rlplug.hookimpl
def rlplug_register_algorithms(register):
    register("sac-n", factory_for(SACNConfig, sac_n, REPLAY_CONTEXT))


@rlplug.hookimpl
def rlplug_register_losses(register):
    register("sac-n-loss", make_sac_n_loss)


@rlplug.hookimpl
def rlplug_register_envs(register):
    register("corridor", make_corridor)


@rlplug.hookimpl
def rlplug_register_estimators(register):
    register("mc-return", make_mc_return, aliases=("mc_return",))
