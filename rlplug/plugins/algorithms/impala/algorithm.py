"""IMPALA (Espeholt et al. 2018): an actor-critic learner fed by asynchronous actors.

Actors collect with the weights they last received, so a rollout may come from a policy a few updates
old. The learner scores each taken action under its current policy (``target_log_prob``), and V-trace
(:class:`rlplug.plugins.estimators.returns.VTrace`) turns the rollout into value targets ``v_s`` and policy-gradient
advantages ``min(rho_bar, pi/mu) * (r + gamma * v_{s+1} - V(s))`` that are correct for the current policy;
the update is then the on-policy family's (:mod:`rlplug.plugins.algorithms.onpolicy.base`) with the score-function
policy loss: ``-log pi(a|s) * advantage``, plus the value regression and the entropy bonus.

``asynchronous = True`` tells the ``ray`` runner to hand over rollouts first come, first served (TorchRL's
asynchronous RayCollector) instead of waiting for every worker.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rlplug.plugins.algorithms.impala import ImpalaConfig
from rlplug.plugins.algorithms.onpolicy.base import OnPolicy, log_prob_and_entropy
from rlplug.plugins.estimators.returns import TARGET_LOG_PROB


class IMPALA(OnPolicy):
    """Importance-weighted actor-learner: V-trace targets, one update per rollout."""

    config: ImpalaConfig
    #: the ray runner collects asynchronously for it: actors never wait for the learner
    asynchronous = True
    #: V-trace scores the taken actions step by step: no sequences of recurrent networks
    learns_sequences = False

    @torch.no_grad()
    def estimate(self, batch: TensorDictBase) -> TensorDictBase:
        """The current policy's log-probability of each taken action, then critic values and V-trace."""
        actor = self.actor
        observations, actions = batch.get(actor.observation_key), batch.get(actor.action_key)
        mask = batch.get(actor.mask_key).reshape(-1, *batch.get(actor.mask_key).shape[batch.ndim:]) \
            if actor.mask_key else None  # a masked head: V-trace's ratio against the collection's masked policy
        log_prob, _ = log_prob_and_entropy(actor, observations.reshape(-1, *observations.shape[batch.ndim:]),
                                           actions.reshape(-1, *actions.shape[batch.ndim:]), mask=mask)
        batch.set(TARGET_LOG_PROB, log_prob.reshape(batch.batch_size))
        return super().estimate(batch)

    def extra_metrics(self) -> dict[str, float]:
        return {}
