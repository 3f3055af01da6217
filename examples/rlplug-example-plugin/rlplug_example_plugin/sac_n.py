"""SAC-N (An et al. 2021): soft actor-critic with an ensemble of N critics, every target and the actor's value the
lowest of all N. Built on rlplug's algorithm kit alone (``rlplug.algorithms``): the kit brings replay, learners,
target updates, live parameters, checkpoints, Ray's gradient mode and seeds trained together; this file holds
only what SAC-N is: its networks and its loss's terms."""

from __future__ import annotations

from typing import Any

import torch

from rlplug.algorithms import EntropyTerms, Sample, Stochastic, TargetCritics, default_target_entropy


class SACN(Stochastic):
    """The kit's stochastic actor-critic with ``config.critics`` critics (learners: actor, critic, entropy)."""

    @property
    def critics(self) -> int:  # type: ignore[override]  # a class attribute in the kit, the recipe's here
        return self.config.critics


class SACNLoss(TargetCritics, EntropyTerms):
    """SAC-N's terms: every critic regressed on ``r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log
    pi(a'|s'))``, the actor ascending ``min_i Q_i(s, a) - alpha log pi(a|s)``, alpha towards the target entropy."""

    def __init__(self, actor, critics: list, *, gamma: float, observation_key: str, alpha_init: float,
                 learn_alpha: bool, target_entropy: float):
        super().__init__(actor, critics, gamma=gamma, observation_key=observation_key)
        self.keep_entropy(actor, alpha_init, learn_alpha, target_entropy)
        self.keep_targets()

    def terms(self, sample: Sample) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        alpha = self.log_alpha.detach().exp()
        action, log_prob = self.sample_actions(sample.observation)
        with torch.no_grad():
            next_action, next_log_prob = self.sample_actions(sample.next_observation)
            soft_value = self.lower_target(sample.next_observation, next_action) - alpha * next_log_prob
            target = sample.target(self.gamma, soft_value)
        critic, td_error = self.critic_term(sample, target)
        return {"loss_qvalue": critic, **self.actor_terms(sample.observation, action, log_prob, alpha)}, td_error


def build_loss(networks: Any, settings: Any, observation_spec: Any, action_spec: Any) -> SACNLoss:
    actor = networks["policy"]
    return SACNLoss(actor, networks["critics"], gamma=settings.gamma, observation_key=actor.in_keys[0],
                    alpha_init=settings.initial_entropy_coef, learn_alpha=settings.learn_entropy_coef,
                    target_entropy=default_target_entropy(settings, observation_spec, action_spec))
