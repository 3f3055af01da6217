"""Discrete IQL (Kostrikov et al. 2022, for discrete actions): IQL with a categorical actor and a critic of every
action; the value network learns an expectile of the critics' values of the data's actions. Learns from a
``[dataset]`` (an offline run) or online from what it collects. Loss: TorchRL's ``DiscreteIQLLoss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, hookimpl
from rlplug.algorithms import REPLAY_CONTEXT, Count, Distance, factory_for, loss_fits, named, serving
from rlplug.plugins.algorithms.iql import IQLConfig
from rlplug.registry.components import Loss
from rlplug.registry.networks import ValueActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.discrete_iql.algorithm import DiscreteIQL


@dataclass(frozen=True)
class DiscreteIQLConfig(IQLConfig):
    """Implicit Q-learning for discrete actions: a categorical actor, critics of every action, a value network."""

    #: what each gradient step minimises: TorchRL's DiscreteIQLLoss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("discrete-iql"))] = named(Loss, "DiscreteIQLLoss")


def discrete_iql() -> type[DiscreteIQL]:
    from rlplug.plugins.algorithms.discrete_iql.algorithm import DiscreteIQL
    return DiscreteIQL


@serving("discrete-iql")
def make_discrete_iql_loss(
    networks: ValueActorCriticNetworks, settings: Any, action_spec,
    #: how many critics (TorchRL makes them from the algorithm's first)
    num_qvalue_nets: Count = 2,
    #: the critics' distance to their target
    loss_function: Distance = "l2",
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's DiscreteIQLLoss, built with the algorithm's actor, first critic and value network."""
    from rlplug.plugins.algorithms.discrete_iql import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                                  num_qvalue_nets=num_qvalue_nets, loss_function=loss_function)


@hookimpl
def rlplug_register_algorithms(register):
    register("discrete-iql", factory_for(DiscreteIQLConfig, discrete_iql, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("DiscreteIQLLoss", make_discrete_iql_loss)
