"""DDPG (Lillicrap et al. 2016): a deterministic actor mu(s), a Q-critic Q(s, a), their target copies, and noise
to explore. Each gradient step regresses the critic on ``r + gamma (1 - terminated) Q'(s', mu'(s'))``, ascends
``Q(s, mu(s))`` with the actor, and moves the targets by polyak averaging (``tau``): the loss
(:class:`rlplug.plugins.losses.offpolicy.ActorCriticLoss`, or TorchRL's ``DDPGLoss``) holds the formulas."""

from __future__ import annotations

from rlplug.plugins.algorithms.offpolicy.actor_critic import ActorCritic
from rlplug.plugins.algorithms.offpolicy.config import DDPGConfig


class DDPG(ActorCritic):
    config: DDPGConfig
    critics = 1
