"""CrossQ (Bhatt et al. 2024): SAC without target networks. The critics are batch-normalised (``BatchNorm1d``
layers of the ``sequential`` network) and value (s, a) and (s', a') in one forward pass, so that both batches
are normalised with the same statistics; the bootstrap ``min Q(s', a') - alpha log pi(a'|s')`` comes from that
pass, held out of the gradient. The actor and the entropy coefficient move once every ``policy_delay`` critic
steps (3 in the paper), the actor's term reading the critics in eval mode (their running statistics), as
TorchRL's ``CrossQLoss`` does. The paper's Adam has ``beta1 = 0.5`` (``optimizer_kwargs``).

Batch normalisation's running statistics are the critics' own state, changed by every forward pass in train
mode, which seeds trained together under ``torch.vmap`` cannot keep per seed: the loss is not batchable.

Here: the algorithm (:class:`CrossQ`), rlplug's loss (:class:`CrossQObjective`, ``crossq-loss``) and the builds
of both losses a recipe may choose (:func:`objective`, :func:`torchrl_loss`: TorchRL's ``CrossQLoss``).
"""

from __future__ import annotations

from typing import Any

import torch

from rlplug.plugins.algorithms.crossq import CrossQConfig
from rlplug.plugins.algorithms.offpolicy.actor_critic import DelayedActor, Stochastic
from rlplug.plugins.algorithms.offpolicy.losses import (
    ENTROPY_GROUPS,
    ENTROPY_TERMS,
    EntropyTerms,
    Sample,
    default_target_entropy,
    entropy_defaults,
    one_env_actions,
    refuse_sequences,
    single_transitions,
    with_learners,
)
from rlplug.registry.networks import ActorCriticNetworks


class CrossQ(DelayedActor, Stochastic):
    config: CrossQConfig
    critics = 2
    delayed_learners = ("actor", "entropy")


class CrossQObjective(EntropyTerms):
    """CrossQ's loss: the soft critics bootstrapping from themselves in one joint pass, no targets."""

    no_targets = True

    def __init__(self, actor, critics: list, *, gamma: float, observation_key: str = "observation",
                 alpha_init: float = 1.0, learn_alpha: bool = True, target_entropy: float = -1.0):
        super().__init__(actor, critics, gamma=gamma, observation_key=observation_key)
        self.keep_entropy(actor, alpha_init, learn_alpha, target_entropy)

    @property
    def batchable(self) -> bool:
        """Not under ``torch.vmap``: the critics' batch statistics are state changed by every pass."""
        return False

    def joint_values(self, observation: torch.Tensor, action: torch.Tensor, next_observation: torch.Tensor,
                     next_action: torch.Tensor) -> tuple[list, list]:
        """Each critic's values of (s, a) and of (s', a'), from one pass over both batches in train mode."""
        rows = len(action)
        observation = torch.cat([observation, next_observation])
        action = torch.cat([action.to(next_action.dtype), next_action])
        self.critic_networks.train()
        values = [q(observation, action).split(rows) for q in self.q]
        return [now for now, _ in values], [later for _, later in values]

    def terms(self, sample: Sample) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        observation = single_transitions(sample.observation, "crossq")
        next_observation = single_transitions(sample.next_observation, "crossq")
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_log_prob = self.sample_actions(next_observation)
        values, next_values = self.joint_values(observation, sample.action, next_observation, next_action)
        next_value = torch.stack([value.float() for value in next_values]).min(0).values.detach()
        target = sample.target(self.gamma, next_value - alpha * next_log_prob)
        critic, td_error = self.critic_term(sample, target, values)
        out = {"loss_qvalue": critic, "alpha": alpha}
        if self.with_actor:
            action, log_prob = self.sample_actions(observation)
            self.critic_networks.eval()  # the actor reads the critics' running statistics
            try:
                out.update(self.actor_terms(observation, action, log_prob, alpha))
            finally:
                self.critic_networks.train()
        return out, td_error


def objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec) -> CrossQObjective:
    """rlplug's CrossQ loss with the algorithm's actor and critics, its discount and entropy settings."""
    actor = networks["policy"]
    return CrossQObjective(actor, networks["critics"], gamma=settings.gamma, observation_key=actor.in_keys[0],
                           alpha_init=settings.initial_entropy_coef, learn_alpha=settings.learn_entropy_coef,
                           target_entropy=default_target_entropy(settings, observation_spec, action_spec))


def torchrl_loss(networks: ActorCriticNetworks, settings: Any, action_spec=None, *, observation_spec=None,
                 **values: Any):
    """TorchRL's ``CrossQLoss`` with the algorithm's actor and first critic (TorchRL makes the twins), and one env's
    action spec (its ``"auto"`` target entropy counts one env's action dimensions); ``values``:
    the recipe's keys for it, unset ones the algorithm's. It keeps no targets."""
    from torchrl.objectives import CrossQLoss

    from rlplug.plugins.algorithms.loss_parts import unset_to

    refuse_sequences(networks, "CrossQLoss")
    one_env = one_env_actions(action_spec, observation_spec)
    loss = CrossQLoss(networks["policy"], networks["critic"], action_spec=one_env,
                      **unset_to(values, entropy_defaults(settings)))
    # TorchRL's CrossQLoss reads no importance weights
    return with_learners(loss, settings.gamma, ENTROPY_GROUPS, ENTROPY_TERMS, targets=False, weighted=False)
