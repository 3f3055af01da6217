"""Proximal policy optimisation (Schulman et al. 2017): the clipped surrogate, and the adaptive-KL penalty.

Each is the on-policy update of :mod:`rlplug.plugins.algorithms.onpolicy.base` with its loss: rlplug's own,
here (``ppo-loss``, ``ppo-kl-loss``, on the ratio ``r = pi(a|s) / pi_old(a|s)`` and advantages ``A``), or TorchRL's
``ClipPPOLoss`` and ``KLPENPPOLoss`` (:mod:`rlplug.plugins.losses.torchrl_losses`). PPO adds the clip range's
annealing. (``ppo-kl`` registers itself from :mod:`rlplug.plugins.algorithms.ppo_kl`.)

- ``ppo-loss``: ``-mean(min(r A, clip(r, 1 - eps, 1 + eps) A))`` (what ``ClipPPOLoss`` computes);
- ``ppo-kl-loss``: ``-mean(r A) + beta KL(old || new)``, beta doubled above 1.5x ``kl_target`` and halved below
  ``kl_target`` / 1.5 after each minibatch (``KLPENPPOLoss``'s rule).
"""

from __future__ import annotations

from typing import Any

import torch

from rlplug.core.training import linear_decay
from rlplug.plugins.algorithms.onpolicy.base import OnPolicy, OnPolicyLoss, approx_kl
from rlplug.plugins.algorithms.ppo import PPOConfig


class PPO(OnPolicy):
    """Proximal policy optimisation with the clipped surrogate objective."""

    config: PPOConfig

    def __init__(self, config: PPOConfig, **context: Any):
        super().__init__(config, **context)
        #: the clip range the schedule starts from, read from the loss as built (before any checkpoint loads): the
        #: loss's own ``clip_epsilon`` where the recipe set one (TorchRL's ClipPPOLoss), else the algorithm's
        self.clip_start = float(getattr(self.loss_module, "clip_epsilon", config.clip_epsilon))

    def before_update(self, progress: float) -> None:
        clip = self.clip_start
        self.clip = linear_decay(clip, progress) if self.config.anneal_clip else clip
        if hasattr(self.loss_module, "clip_epsilon"):  # the loss clips: ours, or TorchRL's ClipPPOLoss
            self.loss_module.clip_epsilon = self.clip

    def extra_metrics(self) -> dict[str, float]:
        return {"clip_epsilon": self.clip}


class PPOKL(OnPolicy):
    """PPO with an adaptive KL penalty instead of clipping: beta doubles above 1.5x the target, halves below it/1.5
    (the loss adapts it after each minibatch)."""


class PPOLoss(OnPolicyLoss):
    """rlplug's ``ppo-loss``: the clipped surrogate."""

    #: set in place from a number (PPO's annealed clip range), as TorchRL's losses allow
    _schedulable_buffers = frozenset({"clip_epsilon"})
    clip_epsilon: torch.Tensor

    def __init__(self, actor, critic=None, *, clip_epsilon: float = 0.2, **terms: Any):
        super().__init__(actor, critic, **terms)
        self.register_buffer("clip_epsilon", torch.tensor(float(clip_epsilon)))

    def policy_objective(self, log_prob: torch.Tensor, log_ratio: torch.Tensor,
                         advantage: torch.Tensor) -> torch.Tensor:
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1 - self.clip_epsilon, 1 + self.clip_epsilon)
        return -torch.min(ratio * advantage, clipped * advantage).mean()

    def own_diagnostics(self, ratio: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"clip_fraction": ((ratio - 1).abs() > self.clip_epsilon).float().mean()}


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

