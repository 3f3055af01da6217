"""CQL: the algorithm (:class:`CQL`, SAC's networks and learners) and the build of TorchRL's ``CQLLoss``: its
conservative term trains the critics with their TD term; its behaviour-cloning diagnostic trains nothing."""

from __future__ import annotations

from typing import Any

from rlplug.plugins.algorithms.cql import CQLConfig
from rlplug.plugins.algorithms.offline.base import Offline
from rlplug.plugins.algorithms.offpolicy.actor_critic import Stochastic
from rlplug.plugins.algorithms.offpolicy.losses import (
    ENTROPY_GROUPS,
    ENTROPY_TERMS,
    one_env_actions,
    refuse_sequences,
    with_learners,
)
from rlplug.registry.networks import ActorCriticNetworks


class CQL(Offline, Stochastic):
    config: CQLConfig
    critics = 1  # TorchRL's CQLLoss makes its twins from the first

    def backward(self, sample):
        """Within the first ``bc_steps`` gradient steps, the actor's term is CQLLoss's ``loss_actor_bc``."""
        loss = self.loss_module
        if self.steps >= self.config.bc_steps:
            return super().backward(sample)
        learners = loss.term_learners
        loss.term_learners = {**{key: name for key, name in learners.items() if key != "loss_actor"},
                              "loss_actor_bc": learners["loss_actor"]}
        try:
            return super().backward(sample)
        finally:
            loss.term_learners = learners


def torchrl_loss(networks: ActorCriticNetworks, settings: CQLConfig, action_spec=None, *, observation_spec=None,
                 **values: Any):
    """TorchRL's ``CQLLoss`` with the algorithm's actor and first critic, entropy and conservative settings."""
    from torchrl.objectives import CQLLoss

    refuse_sequences(networks, "CQLLoss")
    target = settings.target_entropy if settings.target_entropy is not None else "auto"
    loss = CQLLoss(networks["policy"], networks["critic"], action_spec=one_env_actions(action_spec, observation_spec),
                   alpha_init=settings.initial_entropy_coef, fixed_alpha=not settings.learn_entropy_coef,
                   target_entropy=target, min_q_weight=settings.min_q_weight, temperature=settings.cql_temperature,
                   num_random=settings.num_random, max_q_backup=settings.max_q_backup,
                   deterministic_backup=settings.deterministic_backup, **values)
    return with_learners(loss, settings.gamma, ENTROPY_GROUPS, {**ENTROPY_TERMS, "loss_cql": "critic"},
                         weighted=False)  # CQLLoss reads no importance weights
