"""CQL (Kumar et al. 2020, conservative Q-learning): SAC whose critics are also pushed down on actions away from
the data (a log-sum-exp over random and policy actions) and up on the data's own, so that an offline policy does
not chase values no data supports. Learns from a ``[dataset]`` (an offline run) or online from what it collects,
as TorchRL's recipes go on after offline training. Loss: TorchRL's ``CQLLoss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    Count,
    Distance,
    EntropyConfig,
    Frames,
    LearningRate,
    NonNegative,
    PolyakTargets,
    Positive,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.registry.components import Loss
from rlplug.registry.networks import ActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.cql.algorithm import CQL


@dataclass(frozen=True)
class CQLConfig(PolyakTargets, EntropyConfig):
    """Conservative Q-learning: SAC with critics held down on actions the data does not take."""

    #: what each gradient step minimises: TorchRL's CQLLoss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("cql"))] = named(Loss, "CQLLoss")
    #: the weight of the conservative term in the critics' loss
    min_q_weight: NonNegative = 5.0
    #: the temperature of the log-sum-exp over sampled actions
    cql_temperature: Positive = 1.0
    #: random and policy actions sampled per observation for the conservative term
    num_random: Count = 10
    #: the target takes the maximum over sampled next actions (CQL's max-backup) instead of the policy's
    max_q_backup: bool = False
    #: the target leaves out the entropy bonus
    deterministic_backup: bool = True
    #: gradient steps at the start in which the actor learns the data's actions (CQLLoss's loss_actor_bc: their
    #: log-likelihood, with the entropy bonus) instead of the critics' values, the critics learning as after
    #: (the CQL paper's policy_eval_start, TorchRL's offline example's; 0: none)
    bc_steps: Frames = 0
    batch_size: Count = 256
    #: learning rate: a number, or a pair [actor, critic]
    lr: LearningRate = 3e-4


def cql() -> type[CQL]:
    from rlplug.plugins.algorithms.cql.algorithm import CQL
    return CQL


@serving("cql")
def make_cql_loss(
    networks: ActorCriticNetworks, settings: Any, action_spec=None,
    #: the critics' distance to their target
    loss_function: Distance = "l2",
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's CQLLoss, built with the algorithm's actor and first critic (TorchRL makes the twins)."""
    from rlplug.plugins.algorithms.cql import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                                  loss_function=loss_function)


@hookimpl
def rlplug_register_algorithms(register):
    register("cql", factory_for(CQLConfig, cql, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("CQLLoss", make_cql_loss)
