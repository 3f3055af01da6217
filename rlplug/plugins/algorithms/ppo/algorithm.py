"""Proximal policy optimisation (Schulman et al. 2017) with the clipped surrogate objective: the on-policy update
of :mod:`rlplug.plugins.algorithms.onpolicy.base` with its loss, rlplug's own here (``ppo-loss``, on the ratio
``r = pi(a|s) / pi_old(a|s)`` and advantages ``A``: ``-mean(min(r A, clip(r, 1 - eps, 1 + eps) A))``, what
``ClipPPOLoss`` computes), or TorchRL's ``ClipPPOLoss`` (:mod:`rlplug.plugins.losses.torchrl_losses`). PPO adds the
clip range's annealing. With an adaptive KL penalty instead of the clip it is ``ppo-kl``
(:mod:`rlplug.plugins.algorithms.ppo_kl`).
"""

from __future__ import annotations

from typing import Any

import torch

from rlplug.core.training import linear_decay
from rlplug.plugins.algorithms.onpolicy.base import OnPolicy, OnPolicyLoss
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
