"""TD3 (Fujimoto et al. 2018): DDPG with three changes, each a method overridden here.

- twin critics: both regress on the same target, built from the lower of the two target values;
- target policy smoothing: clipped Gaussian noise on the target action, ``target_policy_noise`` and
  ``target_noise_clip`` as fractions of the action half-range (Stable-Baselines3's values act in [-1, 1]);
- delayed policy updates: the actor and the targets move once every ``policy_delay`` critic steps.
"""

from __future__ import annotations

import torch

from rlplug.plugins.algorithms.offpolicy.ddpg import DDPG


class TD3(DDPG):
    critics = 2

    def target_action(self, next_observation: torch.Tensor) -> torch.Tensor:
        config = self.config
        action = self.mu_target(next_observation)
        noise = (torch.randn_like(action) * config.target_policy_noise).clamp(-config.target_noise_clip,
                                                                              config.target_noise_clip)
        action = action + noise * self.action_scale
        if self.action_low_high is not None:
            action = action.clamp(*self.action_low_high)
        return action

    def updates_actor(self) -> bool:
        return (self.steps + 1) % self.config.policy_delay == 0
