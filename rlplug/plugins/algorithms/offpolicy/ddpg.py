"""DDPG: a deterministic actor mu(s), a Q-critic Q(s, a), their target copies, and noise to explore.

One gradient step (Lillicrap et al. 2016; skrl's and Stable-Baselines3's DDPG):

1. critic: regress ``Q(s, a)`` on ``r + gamma * (1 - terminated) * Q'(s', mu'(s'))`` (targets primed);
2. actor: ascend ``Q(s, mu(s))``;
3. targets: ``theta' = (1 - tau) theta' + tau theta`` for the actor and the critic.

TD3 (:mod:`rlplug.plugins.algorithms.offpolicy.td3`) changes the target action, the number of critics and how often 2 and 3
happen; everything else is here and in :mod:`rlplug.plugins.algorithms.offpolicy.base`.
"""

from __future__ import annotations

import torch

from rlplug.plugins.algorithms.offpolicy.actor_critic import ActorCritic
from rlplug.core.training import MetricMean


class DDPG(ActorCritic):
    critics = 1

    def target_action(self, next_observation: torch.Tensor) -> torch.Tensor:
        """The action the target actor takes in the next state (TD3 smooths it)."""
        return self.mu_target(next_observation)

    def next_value(self, data: dict[str, torch.Tensor]) -> torch.Tensor:
        """The target critics' value of the next state and target action (the lowest, with twins)."""
        action = self.target_action(data["next_observation"])
        values = [q(data["next_observation"], action).float() for q in self.target_q]
        return values[0] if len(values) == 1 else torch.min(*values)

    def updates_actor(self) -> bool:
        """Whether this gradient step also updates the actor and the targets (TD3 delays them)."""
        return True

    def gradient_step(self, data: dict[str, torch.Tensor], metrics: MetricMean) -> torch.Tensor:
        with torch.no_grad(), self.autocast():
            target = self.td_target(data, self.next_value(data))
        with self.autocast():
            critic_loss, td_error = self.critic_loss(data, target)
        grad_norm = self.learners["critic"].step(critic_loss)
        metrics.add(loss_critic=critic_loss, q_value=td_error.detach() + target, grad_norm_critic=grad_norm)

        if self.updates_actor():
            with self.autocast():
                actor_loss = -self.q[0](data["observation"], self.mu(data["observation"])).float().mean()
            grad_norm = self.learners["actor"].step(actor_loss)
            metrics.add(loss_actor=actor_loss, grad_norm_actor=grad_norm)
            self.update_targets()
        return td_error
