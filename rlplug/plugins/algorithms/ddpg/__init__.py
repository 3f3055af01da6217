"""DDPG (Lillicrap et al. 2016): a deterministic actor, one Q-critic, their target copies moved by polyak
averaging, and noise to explore. Losses: rlplug's ``ddpg-loss`` (the default) or TorchRL's ``DDPGLoss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    ActorCriticConfig,
    Distance,
    PolyakTargets,
    SequencesConfig,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.registry.components import Loss
from rlplug.registry.networks import ActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.ddpg.algorithm import DDPG


@dataclass(frozen=True)
class DDPGConfig(SequencesConfig, PolyakTargets, ActorCriticConfig):
    """Deep deterministic policy gradient: a deterministic actor, one Q-critic, noise to explore."""

    #: what each gradient step minimises: rlplug's DDPG loss, or TorchRL's DDPGLoss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("ddpg"))] = named(Loss, "ddpg-loss")


def ddpg() -> type[DDPG]:
    from rlplug.plugins.algorithms.ddpg.algorithm import DDPG
    return DDPG


@serving("ddpg")
def make_ddpg_objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
                        device: str = "cpu"):
    """rlplug's DDPG loss: the critic on one-step targets from the target networks, the actor ascending the
    critic. Its options are the algorithm's keys."""
    from rlplug.plugins.algorithms.ddpg import algorithm

    return algorithm.objective(networks, settings)


@serving("ddpg")
def make_ddpg_loss(
    networks: ActorCriticNetworks, settings: Any, action_spec=None,
    #: the critic's distance to its target
    loss_function: Distance = "l2",
    #: keep a target copy of the actor
    delay_actor: bool = False,
    #: keep a target copy of the critic
    delay_value: bool = True,
):
    """TorchRL's DDPGLoss, built with the algorithm's actor and critic; the discount is the algorithm's gamma."""
    from rlplug.plugins.algorithms.ddpg import algorithm

    return algorithm.torchrl_loss(networks, settings, loss_function=loss_function, delay_actor=delay_actor,
                                  delay_value=delay_value)


@hookimpl
def rlplug_register_algorithms(register):
    register("ddpg", factory_for(DDPGConfig, ddpg, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("ddpg-loss", make_ddpg_objective)
    register("DDPGLoss", make_ddpg_loss)
