"""TD3+BC (Fujimoto & Gu 2021): TD3 whose actor also stays near the data's actions, ``-lambda Q(s, pi(s)) +
(pi(s) - a)^2`` with ``lambda = alpha / mean |Q|``. Learns from a ``[dataset]`` only. Loss: TorchRL's
``TD3BCLoss``, its actor and targets moved once every ``policy_delay`` critic steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    ActorCriticConfig,
    Count,
    DelayedActorConfig,
    Distance,
    LearningRate,
    NonNegative,
    PolyakTargets,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.registry.components import Loss, Noise
from rlplug.registry.networks import ActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.td3_bc.algorithm import TD3BC


@dataclass(frozen=True)
class TD3BCConfig(DelayedActorConfig, PolyakTargets, ActorCriticConfig):
    """TD3 with a behaviour-cloning term in the actor's loss, for datasets."""

    #: what each gradient step minimises: TorchRL's TD3BCLoss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("td3-bc"))] = named(Loss, "TD3BCLoss")
    #: the weight of the critic's value against cloning the data's actions (the paper's alpha)
    alpha: NonNegative = 2.5
    #: the standard deviation of the noise added to target actions, as a fraction of the action half-range
    target_policy_noise: NonNegative = 0.2
    #: the target action noise is clipped to +-this (a fraction of the action half-range)
    target_noise_clip: NonNegative = 0.5
    #: an offline learner collects nothing: no exploration noise
    exploration_noise: Noise | None = None
    batch_size: Count = 256
    #: learning rate: a number, or a pair [actor, critic]
    lr: LearningRate = 3e-4


def td3_bc() -> type[TD3BC]:
    from rlplug.plugins.algorithms.td3_bc.algorithm import TD3BC
    return TD3BC


@serving("td3-bc")
def make_td3_bc_loss(
    networks: ActorCriticNetworks, settings: Any, action_spec=None,
    #: the critics' distance to their target
    loss_function: Distance = "l2",
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's TD3BCLoss, built with the algorithm's actor and first critic (TorchRL makes the twins)."""
    from rlplug.plugins.algorithms.td3_bc import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                                  loss_function=loss_function)



@hookimpl
def rlplug_register_algorithms(register):
    factory = factory_for(TD3BCConfig, td3_bc, REPLAY_CONTEXT)
    factory.offline_only = True  # read by the recipe check: a dataset is required
    register("td3-bc", factory)


@hookimpl
def rlplug_register_losses(register):
    register("TD3BCLoss", make_td3_bc_loss)
