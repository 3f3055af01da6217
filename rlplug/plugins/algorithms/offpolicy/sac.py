"""SAC (Haarnoja et al. 2018, with the automatic entropy coefficient): a tanh-Gaussian actor, twin critics
with target copies (no target actor), and an entropy coefficient alpha tuned towards a target entropy.

One gradient step, in Stable-Baselines3's order:

1. sample ``a ~ pi(s)`` (reparameterised) with its log-probability;
2. alpha: descend ``-log(alpha) * (log pi(a|s) + target_entropy)`` (target entropy ``-|A|`` by default);
3. critics: regress both on ``r + gamma * (1 - terminated) * (min Q'(s', a') - alpha log pi(a'|s'))``,
   ``a' ~ pi(s')``;
4. actor: descend ``alpha log pi(a|s) - min Q(s, a)`` with the updated critics;
5. targets: polyak averaging of the critics.

The actor is the ``policy`` role of any network (``mlp`` with ``log_std = "state"`` and ``squash = "tanh"``
is the usual SAC actor); evaluation takes its deterministic action (the squashed mean).
"""

from __future__ import annotations

import math

import torch

from rlplug.core.acting import ActorView
from rlplug.plugins.algorithms.offpolicy.actor_critic import ActorCritic
from rlplug.plugins.algorithms.offpolicy.parts import Learner
from rlplug.networks import action_size
from rlplug.core.training import MetricMean


class SAC(ActorCritic):
    critics = 2
    target_actor = False
    actor_role = "policy"

    def build(self):
        actor = super().build()
        config = self.config
        self.view = ActorView.of(self.actor)
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(config.initial_entropy_coef), device=self.device))
        self.entropy_coef = EntropyCoefficient(self.log_alpha)
        self.target_entropy = (config.target_entropy if config.target_entropy is not None
                               else -float(action_size(self.action_spec)))
        if config.learn_entropy_coef:
            lr = config.entropy_lr if config.entropy_lr is not None else self.learners["critic"].lr
            self.learners["entropy"] = Learner([self.log_alpha], lr, config, self.device)
        return actor

    def sample_actions(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised actions and their log-probabilities (``[batch, 1]``), scored on the same pre-tanh
        sample where the distribution allows (TanhNormal's ``rsample_and_log_prob``)."""
        dist = self.view.distribution(observation)
        if hasattr(dist, "rsample_and_log_prob"):
            action, log_prob = dist.rsample_and_log_prob()
        else:
            action = dist.rsample()
            log_prob = dist.log_prob(action)
        return action, log_prob.float().reshape(-1, 1)

    def gradient_step(self, data: dict[str, torch.Tensor], metrics: MetricMean) -> torch.Tensor:
        observation = data["observation"]
        with self.autocast():
            action, log_prob = self.sample_actions(observation)

        if self.config.learn_entropy_coef:
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            self.learners["entropy"].step(alpha_loss)
            metrics.add(loss_alpha=alpha_loss)
        alpha = self.log_alpha.detach().exp()

        with torch.no_grad(), self.autocast():
            next_action, next_log_prob = self.sample_actions(data["next_observation"])
            next_q = torch.min(*[q(data["next_observation"], next_action).float() for q in self.target_q])
            target = self.td_target(data, next_q - alpha * next_log_prob)
        with self.autocast():
            critic_loss, td_error = self.critic_loss(data, target)
        grad_norm = self.learners["critic"].step(critic_loss)

        with self.autocast():
            q_pi = torch.min(*[q(observation, action).float() for q in self.q])
            actor_loss = (alpha * log_prob - q_pi).mean()
        actor_grad_norm = self.learners["actor"].step(actor_loss)
        self.update_targets()
        metrics.add(loss_critic=critic_loss, loss_actor=actor_loss, alpha=alpha, entropy=-log_prob.detach(),
                    grad_norm_critic=grad_norm, grad_norm_actor=actor_grad_norm)
        return td_error

    def modules(self):
        return {**super().modules(), "entropy_coef": self.entropy_coef}


class EntropyCoefficient(torch.nn.Module):
    """The entropy coefficient as a module, so it checkpoints like the networks."""

    def __init__(self, log_alpha: torch.nn.Parameter):
        super().__init__()
        self.log_alpha = log_alpha
