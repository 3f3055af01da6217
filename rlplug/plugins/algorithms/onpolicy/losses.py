"""Plain policy gradients: REINFORCE (with an optional learned baseline), A2C, and the unclipped surrogate.

Each is the on-policy update of :mod:`rlplug.plugins.algorithms.onpolicy.base`; they differ in their defaults
(see :mod:`rlplug.plugins.algorithms.onpolicy.config`) and their loss, rlplug's own here (on advantages ``A`` and
the ratio ``r = pi(a|s) / pi_old(a|s)``), or TorchRL's ``A2CLoss`` and ``ReinforceLoss``
(:mod:`rlplug.plugins.losses.torchrl_losses`):

- ``policy-gradient-loss``: ``-mean(log pi(a|s) A)``, the score function (REINFORCE, A2C, IMPALA: what TorchRL's
  ``A2CLoss`` and ``ReinforceLoss`` compute);
- ``surrogate-loss``: ``-mean(r A)``, the unclipped surrogate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlplug.plugins.algorithms.onpolicy.base import OnPolicy, OnPolicyLoss

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.vpg import VPGConfig


class VPG(OnPolicy):
    """REINFORCE: the score-function policy gradient, with a learned baseline unless baseline = false."""

    def __init__(self, config: VPGConfig, **context):
        self.uses_critic = config.baseline
        super().__init__(config, **context)


class A2C(OnPolicy):
    """Advantage actor-critic: one score-function step per short rollout, with a learned critic."""


class Surrogate(OnPolicy):
    """The unclipped importance-ratio surrogate objective (PPO without the clip), over several epochs."""


class ScoreFunctionLoss(OnPolicyLoss):
    """rlplug's ``policy-gradient-loss``: the score-function gradient."""

    def policy_objective(self, log_prob: torch.Tensor, log_ratio: torch.Tensor,
                         advantage: torch.Tensor) -> torch.Tensor:
        return -(log_prob * advantage).mean()


class SurrogateLoss(OnPolicyLoss):
    """rlplug's ``surrogate-loss``: the unclipped importance-ratio surrogate."""

    def policy_objective(self, log_prob: torch.Tensor, log_ratio: torch.Tensor,
                         advantage: torch.Tensor) -> torch.Tensor:
        return -(log_ratio.exp() * advantage).mean()

