"""Proximal policy optimisation (Schulman et al. 2017): the clipped surrogate, and the adaptive-KL penalty.

Both are the on-policy update of :mod:`rlplug.plugins.algorithms.onpolicy.base` with their loss (``ppo-loss``,
``ppo-kl-loss``, or TorchRL's ``ClipPPOLoss`` and ``KLPENPPOLoss``); PPO adds the clip range's annealing.
"""

from __future__ import annotations

from rlplug.core.training import linear_decay
from rlplug.plugins.algorithms.onpolicy.base import OnPolicy
from rlplug.plugins.algorithms.onpolicy.config import PPOConfig


class PPO(OnPolicy):
    """Proximal policy optimisation with the clipped surrogate objective."""

    config: PPOConfig

    def before_update(self, progress: float) -> None:
        clip = self.config.clip_epsilon
        self.clip = linear_decay(clip, progress) if self.config.anneal_clip else clip
        if hasattr(self.loss_module, "clip_epsilon"):  # the loss clips: ours, or TorchRL's ClipPPOLoss
            self.loss_module.clip_epsilon = self.clip

    def extra_metrics(self) -> dict[str, float]:
        return {"clip_epsilon": self.clip}


class PPOKL(OnPolicy):
    """PPO with an adaptive KL penalty instead of clipping: beta doubles above 1.5x the target, halves below it/1.5
    (the loss adapts it after each minibatch)."""
