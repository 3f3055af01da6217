"""PPO with an adaptive KL penalty instead of clipping: the on-policy update of
:mod:`rlplug.plugins.algorithms.onpolicy.base` with its loss, rlplug's own here (``ppo-kl-loss``: ``-mean(r A) + beta
KL(old || new)`` on the ratio ``r = pi(a|s) / pi_old(a|s)`` and advantages ``A``, beta doubled above 1.5x
``kl_target`` and halved below ``kl_target`` / 1.5 after each minibatch, ``KLPENPPOLoss``'s rule), or TorchRL's
``KLPENPPOLoss`` (:mod:`rlplug.plugins.losses.torchrl_losses`).
"""

from __future__ import annotations

from typing import Any

import torch

from rlplug.plugins.algorithms.onpolicy.base import OnPolicy, OnPolicyLoss, approx_kl


class PPOKL(OnPolicy):
    """PPO with an adaptive KL penalty instead of clipping: beta doubles above 1.5x the target, halves below it/1.5
    (the loss adapts it after each minibatch)."""


class PPOKLLoss(OnPolicyLoss):
    """rlplug's ``ppo-kl-loss``: the surrogate with an adaptive KL penalty."""

    #: beta follows each minibatch's KL: seeds cannot share a vmapped step, Ray's gradient workers cannot agree
    batchable = False
    adapts_per_minibatch = True
    _schedulable_buffers = frozenset({"beta"})
    beta: torch.Tensor

    def __init__(self, actor, critic=None, *, kl_target: float = 0.01, kl_penalty: float = 1.0, **terms: Any):
        super().__init__(actor, critic, **terms)
        self.kl_target = kl_target
        self.register_buffer("beta", torch.tensor(float(kl_penalty)))

    def policy_objective(self, log_prob: torch.Tensor, log_ratio: torch.Tensor,
                         advantage: torch.Tensor) -> torch.Tensor:
        ratio = log_ratio.exp()
        kl = approx_kl(ratio, log_ratio)
        loss = -(ratio * advantage).mean() + float(self.beta) * kl  # this minibatch's beta, whatever comes next
        if self.training:
            self.adapt_beta(kl.detach())
        return loss

    @torch.no_grad()
    def adapt_beta(self, kl: torch.Tensor) -> None:
        """Double beta when the KL overshoots 1.5x the target, halve it below target / 1.5 (one minibatch's)."""
        value = kl.item()
        if value > 1.5 * self.kl_target:
            self.beta.mul_(2.0)
        elif value < self.kl_target / 1.5:
            self.beta.mul_(0.5)

    def own_diagnostics(self, ratio: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"kl_beta": self.beta.clone()}
