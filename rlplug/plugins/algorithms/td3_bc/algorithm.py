"""TD3+BC: the algorithm (:class:`TD3BC`, TD3's networks and delayed actor) and the build of TorchRL's
``TD3BCLoss``, with one env's action bounds."""

from __future__ import annotations

from typing import Any

from rlplug.plugins.algorithms.offline.base import Offline
from rlplug.plugins.algorithms.offpolicy.actor_critic import DelayedActor
from rlplug.plugins.algorithms.offpolicy.losses import one_env_actions, refuse_sequences, with_learners
from rlplug.plugins.algorithms.td3_bc import TD3BCConfig
from rlplug.registry.networks import ActorCriticNetworks


class TD3BC(Offline, DelayedActor):
    config: TD3BCConfig
    critics = 1  # TorchRL's TD3BCLoss makes its twins from the first


def torchrl_loss(networks: ActorCriticNetworks, settings: TD3BCConfig, action_spec=None, *, observation_spec=None,
                 **values: Any):
    """TorchRL's ``TD3BCLoss`` with the algorithm's actor and first critic, its alpha and target noise."""
    from torchrl.objectives import TD3BCLoss

    refuse_sequences(networks, "TD3BCLoss")
    loss = TD3BCLoss(networks["policy"], networks["critic"],
                     action_spec=one_env_actions(action_spec, observation_spec), alpha=settings.alpha,
                     policy_noise=settings.target_policy_noise, noise_clip=settings.target_noise_clip, **values)
    return with_learners(loss, settings.gamma, {"actor": "actor_network_params", "critic": "qvalue_network_params"},
                         {"loss_actor": "actor", "loss_qvalue": "critic"}, weighted=False)
