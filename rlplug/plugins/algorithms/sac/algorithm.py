"""SAC (Haarnoja et al. 2018, with the automatic entropy coefficient): a tanh-Gaussian actor, twin critics with
target copies (no target actor), and an entropy coefficient alpha tuned towards a target entropy (``-|A|`` by
default). Each gradient step regresses both critics on ``r + gamma (1 - terminated) (min Q'(s', a') - alpha log
pi(a'|s'))`` (``loss_qvalue``), moves the actor by ``alpha log pi(a|s) - min Q(s, a)`` (``loss_actor``) and
alpha by ``-log alpha (log pi(a|s) + target entropy)`` (``loss_alpha``); the entropy coefficient's learning
rate is ``entropy_lr`` (unset: the critic's).

The actor is the ``policy`` role of any network (``mlp`` with ``log_std = "state"`` and ``squash = "tanh"``
is the usual SAC actor); evaluation takes its deterministic action (the squashed mean). With recurrent networks
(``lstm``, ``gru``) it learns from replayed sequences as DDPG and TD3 do (``sequence_length``, ``burn_in``:
:mod:`rlplug.core.recurrent`): the actor's and the critics' cores read each sequence, every term the steps after
the burn-in.

Here: the algorithm (:class:`SAC`), rlplug's loss (:class:`SACObjective`, ``sac-loss``) and the builds of both
losses a recipe may choose (:func:`objective`, :func:`torchrl_loss`: TorchRL's ``SACLoss``).
"""

from __future__ import annotations

from typing import Any

import torch

from rlplug.core.recurrent import ObservationSequence, RecurrentNetwork
from rlplug.plugins.algorithms.offpolicy.actor_critic import Stochastic
from rlplug.plugins.algorithms.offpolicy.losses import (
    ENTROPY_GROUPS,
    ENTROPY_TERMS,
    EntropyTerms,
    Sample,
    TargetCritics,
    default_target_entropy,
    entropy_defaults,
    one_env_actions,
    refuse_sequences,
    with_learners,
)
from rlplug.plugins.algorithms.sac import SoftActorCriticConfig
from rlplug.registry.networks import ActorCriticNetworks


class SAC(Stochastic):
    config: SoftActorCriticConfig
    critics = 2


class SACObjective(TargetCritics, EntropyTerms):
    """SAC's loss: the soft critics on their target copies, the actor, the entropy coefficient."""

    def __init__(self, actor, critics: list, *, gamma: float, observation_key: str = "observation",
                 alpha_init: float = 1.0, learn_alpha: bool = True, target_entropy: float = -1.0, burn_in: int = 0):
        super().__init__(actor, critics, gamma=gamma, observation_key=observation_key, burn_in=burn_in)
        # a recurrent actor's distribution is its head's, on the features its core gives along a sequence
        self.recurrent_actor = actor if isinstance(actor, RecurrentNetwork) else None
        self.keep_entropy(actor.head if self.recurrent_actor else actor, alpha_init, learn_alpha, target_entropy)
        self.keep_targets()

    def sample_actions(self, observation) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`EntropyTerms.sample_actions`, on an :class:`ObservationSequence` too (the actor's core reads
        the whole sequence, its head the steps that count); log-probabilities shaped as the critics' values."""
        if isinstance(observation, ObservationSequence) and self.recurrent_actor is not None:
            features = self.recurrent_actor.sequence_features(observation.observations, observation.is_init)
            observation = observation.select(features)
        action, log_prob = super().sample_actions(observation)
        return action, log_prob.reshape(*action.shape[:-1], 1)

    def terms(self, sample: Sample) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        observation, next_observation = sample.observation, sample.next_observation
        alpha = self.log_alpha.detach().exp()
        action, log_prob = self.sample_actions(observation)
        with torch.no_grad():
            next_action, next_log_prob = self.sample_actions(next_observation)
            target = sample.target(self.gamma, self.next_value(next_observation, next_action) - alpha * next_log_prob)
        critic, td_error = self.critic_term(sample, target)
        return {"loss_qvalue": critic, **self.actor_terms(observation, action, log_prob, alpha)}, td_error

    def next_value(self, next_observation, next_action: torch.Tensor) -> torch.Tensor:
        """What the target bootstraps from before the entropy bonus: the lower of the twin target critics."""
        return self.lower_target(next_observation, next_action)


def objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec) -> SACObjective:
    """rlplug's SAC loss with the algorithm's actor and critics, its discount and entropy settings."""
    actor = networks["policy"]
    return SACObjective(actor, networks["critics"], gamma=settings.gamma, observation_key=actor.in_keys[0],
                        alpha_init=settings.initial_entropy_coef, learn_alpha=settings.learn_entropy_coef,
                        target_entropy=default_target_entropy(settings, observation_spec, action_spec),
                        burn_in=getattr(settings, "burn_in", 0))


def torchrl_loss(networks: ActorCriticNetworks, settings: Any, action_spec=None, *, observation_spec=None,
                 **values: Any):
    """TorchRL's ``SACLoss`` with the algorithm's actor and first critic (TorchRL makes the twins), and one env's
    action spec (its ``"auto"`` target entropy counts one env's action dimensions); ``values``:
    the recipe's keys for it, unset ones the algorithm's."""
    from torchrl.objectives import SACLoss

    from rlplug.plugins.algorithms.loss_parts import unset_to

    refuse_sequences(networks, "SACLoss")
    one_env = one_env_actions(action_spec, observation_spec)
    loss = SACLoss(networks["policy"], networks["critic"], action_spec=one_env,
                   **unset_to(values, entropy_defaults(settings)))
    return with_learners(loss, settings.gamma, ENTROPY_GROUPS, ENTROPY_TERMS)
