"""Discrete CQL (Kumar et al. 2020, for discrete actions): DQN whose Q-values are also pushed down on every action
by a log-sum-exp and up on the data's own action, so that an offline greedy policy does not pick actions no data
supports. Learns from a ``[dataset]`` (an offline run) or online from what it collects, epsilon-greedy as DQN.
Loss: TorchRL's ``DiscreteCQLLoss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    Count,
    Distance,
    DQNConfig,
    Frames,
    Rate,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.registry.components import Loss
from rlplug.registry.networks import QNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.discrete_cql.algorithm import DiscreteCQL


@dataclass(frozen=True)
class DiscreteCQLConfig(DQNConfig):
    """Conservative Q-learning for discrete actions: DQN with its Q-values held down off the data."""

    #: what each gradient step minimises: TorchRL's DiscreteCQLLoss (built with this network)
    loss: Annotated[Loss, Check(loss_fits("discrete-cql"))] = named(Loss, "DiscreteCQLLoss")
    #: frames before the first gradient step (an offline run's frames are samples: learn from the first)
    learning_starts: Frames = 0
    #: frames between target network updates (samples learned from, offline)
    target_update_interval: Count = 2_000
    batch_size: Count = 256
    lr: Rate = 3e-4


def discrete_cql() -> type[DiscreteCQL]:
    from rlplug.plugins.algorithms.discrete_cql.algorithm import DiscreteCQL
    return DiscreteCQL


@serving("discrete-cql")
def make_discrete_cql_loss(
    networks: QNetworks, settings: Any, action_spec,
    #: the distance of Q to its target
    loss_function: Distance = "l2",
):
    """TorchRL's DiscreteCQLLoss, built with the algorithm's Q-network; the discount is the algorithm's gamma."""
    from rlplug.plugins.algorithms.discrete_cql import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, loss_function=loss_function)


@hookimpl
def rlplug_register_algorithms(register):
    register("discrete-cql", factory_for(DiscreteCQLConfig, discrete_cql, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("DiscreteCQLLoss", make_discrete_cql_loss)
