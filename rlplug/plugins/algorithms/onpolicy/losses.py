"""The on-policy family's own losses, rlplug's, which serve every on-policy algorithm (registered by
:mod:`rlplug.plugins.losses`, beside TorchRL's, :mod:`rlplug.plugins.losses.torchrl_losses`), on advantages ``A``
and the ratio ``r = pi(a|s) / pi_old(a|s)``:

- ``policy-gradient-loss``: ``-mean(log pi(a|s) A)``, the score function (REINFORCE, A2C, IMPALA: what TorchRL's
  ``A2CLoss`` and ``ReinforceLoss`` compute);
- ``surrogate-loss``: ``-mean(r A)``, the unclipped surrogate (``surrogate``'s).
"""

from __future__ import annotations

import torch

from rlplug.plugins.algorithms.onpolicy.base import OnPolicyLoss


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

