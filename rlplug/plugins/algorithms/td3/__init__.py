"""TD3 (Fujimoto et al. 2018): DDPG with twin critics, target policy smoothing and delayed actor updates. Losses:
rlplug's ``td3-loss`` (the default) or TorchRL's ``TD3Loss``, its actor's term left out between delays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, Range, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    ActorCriticConfig,
    Count,
    DelayedActorConfig,
    Distance,
    NonNegative,
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
    from rlplug.plugins.algorithms.td3.algorithm import TD3


@dataclass(frozen=True)
class TD3Config(DelayedActorConfig, SequencesConfig, PolyakTargets, ActorCriticConfig):
    """Twin delayed DDPG: twin critics (the lower target), target policy smoothing, delayed actor updates."""

    #: what each gradient step minimises: rlplug's TD3 loss, or TorchRL's TD3Loss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("td3"))] = named(Loss, "td3-loss")
    #: the standard deviation of the noise added to target actions, as a fraction of the action half-range
    target_policy_noise: NonNegative = 0.2
    #: the target action noise is clipped to +-this (a fraction of the action half-range)
    target_noise_clip: NonNegative = 0.5


def td3() -> type[TD3]:
    from rlplug.plugins.algorithms.td3.algorithm import TD3
    return TD3


@serving("td3")
def make_td3_objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
                       device: str = "cpu"):
    """rlplug's TD3 loss: twin critics on the lower smoothed target, the actor ascending the first critic. Its
    options are the algorithm's keys."""
    from rlplug.plugins.algorithms.td3 import algorithm

    return algorithm.objective(networks, settings, observation_spec, action_spec, device)


@serving("td3")
def make_td3_loss(
    networks: ActorCriticNetworks, settings: Any, action_spec=None,
    #: the target action's noise scale, in action units (unset: the algorithm's target_policy_noise)
    policy_noise: Annotated[float, Range(ge=0.0)] | None = None,
    #: the target noise's clip (unset: the algorithm's target_noise_clip)
    noise_clip: Annotated[float, Range(ge=0.0)] | None = None,
    #: the critics' distance to their target (unset: 'l2', the algorithm's squared error)
    loss_function: Distance | None = None,
    #: how many critics (TorchRL makes them from the algorithm's first)
    num_qvalue_nets: Count | None = None,
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's TD3Loss, built with the algorithm's actor and first critic (TorchRL makes the twins)."""
    from rlplug.plugins.algorithms.td3 import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                                  policy_noise=policy_noise, noise_clip=noise_clip, loss_function=loss_function,
                                  num_qvalue_nets=num_qvalue_nets)


@hookimpl
def rlplug_register_algorithms(register):
    register("td3", factory_for(TD3Config, td3, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("td3-loss", make_td3_objective)
    register("TD3Loss", make_td3_loss)
