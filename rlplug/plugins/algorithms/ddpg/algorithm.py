"""DDPG (Lillicrap et al. 2016): a deterministic actor mu(s), a Q-critic Q(s, a), their target copies, and noise
to explore. Each gradient step regresses the critic on ``r + gamma (1 - terminated) Q'(s', mu'(s'))``
(``loss_value``), ascends ``Q(s, mu(s))`` with the actor (``loss_actor``, the critic's parameters held still),
and moves the targets by polyak averaging (``tau``).

Here: the algorithm (:class:`DDPG`), rlplug's loss (:class:`DDPGObjective`, ``ddpg-loss``) and the builds of
both losses a recipe may choose (:func:`objective`, :func:`torchrl_loss`: TorchRL's ``DDPGLoss``).
"""

from __future__ import annotations

from typing import Any

import torch

from rlplug.plugins.algorithms.ddpg import DDPGConfig
from rlplug.plugins.algorithms.offpolicy.actor_critic import ActorCritic
from rlplug.plugins.algorithms.offpolicy.losses import Sample, TargetCritics, refuse_sequences, with_learners
from rlplug.registry.networks import ActorCriticNetworks


class DDPG(ActorCritic):
    config: DDPGConfig
    critics = 1


class DDPGObjective(TargetCritics):
    """DDPG's loss; TD3's extends it (:meth:`target_action`, twin critics)."""

    critic_term_name = "loss_value"

    def __init__(self, actor, critics: list, *, gamma: float, observation_key: str = "observation", burn_in: int = 0):
        super().__init__(actor, critics, gamma=gamma, observation_key=observation_key, burn_in=burn_in)
        self.keep_targets()
        self.mu = self.function(actor, [observation_key])
        self.mu_target = self.function(self.keep_target_actor(), [observation_key])

    def target_action(self, sample: Sample) -> torch.Tensor:
        """The action the targets are valued at: the target actor's."""
        return self.mu_target(sample.next_observation)

    def terms(self, sample: Sample) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        with torch.no_grad():
            target = sample.target(self.gamma, self.lower_target(sample.next_observation, self.target_action(sample)))
        critic, td_error = self.critic_term(sample, target)
        out = {self.critic_term_name: critic, "pred_value": (td_error.detach() + target).mean(),
               "target_value": target.mean()}
        if self.with_actor:
            q_mu = self.held_still.still(sample.observation, self.mu(sample.observation))
            out["loss_actor"] = -q_mu[0].float().mean()
        return out, td_error


def objective(networks: ActorCriticNetworks, settings: Any) -> DDPGObjective:
    """rlplug's DDPG loss with the algorithm's actor and critic, its discount and burn-in."""
    actor = networks["policy"]
    return DDPGObjective(actor, networks["critics"], gamma=settings.gamma, observation_key=actor.in_keys[0],
                         burn_in=settings.burn_in)


def torchrl_loss(networks: ActorCriticNetworks, settings: Any, **values: Any):
    """TorchRL's ``DDPGLoss`` with the algorithm's actor and critic; ``values``: the recipe's keys for it."""
    from torchrl.objectives import DDPGLoss

    from rlplug.plugins.algorithms.loss_parts import unset_to

    refuse_sequences(networks, "DDPGLoss", "ddpg-loss")
    loss = DDPGLoss(networks["policy"], networks["critic"], **unset_to(values, {"loss_function": "l2"}))
    return with_learners(loss, settings.gamma, {"actor": "actor_network_params", "critic": "value_network_params"},
                         {"loss_actor": "actor", "loss_value": "critic"})
