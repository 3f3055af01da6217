"""TD3 (Fujimoto et al. 2018): DDPG with twin critics (the lower target), target policy smoothing (in the loss:
``td3-loss`` or TorchRL's ``TD3Loss``), and delayed policy updates: the actor and the targets move once every
``policy_delay`` critic steps."""

from __future__ import annotations

from rlplug.plugins.algorithms.offpolicy.actor_critic import ActorCritic
from rlplug.plugins.algorithms.offpolicy.config import TD3Config
from rlplug.registry import protocols


class TD3(ActorCritic):
    config: TD3Config
    critics = 2

    def updates_actor(self) -> bool:
        return (self.steps + 1) % self.config.policy_delay == 0

    def stepped_learners(self) -> set[str]:
        stepped = set(self.learners.groups) - (set() if self.updates_actor() else {"actor"})
        if protocols.has_member(self.loss_module, protocols.Loss.with_actor):  # no actor term where it is not stepped
            self.loss_module.with_actor = "actor" in stepped
        return stepped

    def moves_targets(self) -> bool:
        return self.updates_actor()
