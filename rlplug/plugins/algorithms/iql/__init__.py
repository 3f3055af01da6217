"""IQL (Kostrikov et al. 2022, implicit Q-learning): a value network regressed on an expectile of the critics'
values, critics on ``r + gamma V(s')`` (never querying actions outside the data), and an actor that clones the
data's actions weighted by ``exp(temperature x advantage)``. Learns from a ``[dataset]`` (an offline run) or
online from what it collects, as TorchRL's recipes go on after offline training. Loss: TorchRL's ``IQLLoss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    ActorCriticConfig,
    Count,
    Distance,
    LearningRate,
    NonNegative,
    PolyakTargets,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.registry.components import Loss, Network, Noise
from rlplug.registry.networks import ValueActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.iql.algorithm import IQL


def expectile_problem(value: float) -> str | None:
    return None if 0.0 < value < 1.0 else f"must be in (0, 1), got {value!r}"


@dataclass(frozen=True)
class IQLConfig(PolyakTargets, ActorCriticConfig):
    """Implicit Q-learning: expectile value regression, critics on the value, advantage-weighted cloning."""

    #: what each gradient step minimises: TorchRL's IQLLoss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("iql"))] = named(Loss, "IQLLoss")
    #: the value network, of the observation (writes state_value)
    value: Network = named(Network, "mlp")
    #: the expectile of the critics' values the value network learns (0.5: their mean; towards 1: their maximum)
    expectile: Annotated[float, Check(expectile_problem)] = 0.7
    #: the inverse temperature of the actor's advantage weights (0: plain cloning of the data's actions)
    temperature: NonNegative = 3.0
    #: the actor explores by sampling its policy online: no added noise unless set
    exploration_noise: Noise | None = None
    batch_size: Count = 256
    #: learning rate: a number, or a pair [actor, critic] (the value network's is the critic's)
    lr: LearningRate = 3e-4


def iql() -> type[IQL]:
    from rlplug.plugins.algorithms.iql.algorithm import IQL
    return IQL


@serving("iql")
def make_iql_loss(
    networks: ValueActorCriticNetworks, settings: Any,
    #: how many critics (TorchRL makes them from the algorithm's first)
    num_qvalue_nets: Count = 2,
    #: the critics' distance to their target
    loss_function: Distance = "l2",
):
    """TorchRL's IQLLoss, built with the algorithm's actor, first critic and value network."""
    from rlplug.plugins.algorithms.iql import algorithm

    return algorithm.torchrl_loss(networks, settings, num_qvalue_nets=num_qvalue_nets, loss_function=loss_function)


@hookimpl
def rlplug_register_algorithms(register):
    register("iql", factory_for(IQLConfig, iql, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("IQLLoss", make_iql_loss)
