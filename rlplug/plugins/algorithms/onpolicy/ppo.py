"""Proximal policy optimisation (Schulman et al. 2017): the clipped surrogate, and the adaptive-KL penalty.

Both reuse the whole on-policy update of :mod:`rlplug.plugins.algorithms.onpolicy.base`; only the policy's loss and
what adapts between minibatches differ.
"""

from __future__ import annotations

import torch

from rlplug.plugins.algorithms.onpolicy.config import PPOConfig, PPOKLConfig
from rlplug.plugins.algorithms.onpolicy.base import OnPolicy
from rlplug.core.training import linear_decay


class PPO(OnPolicy):
    """Proximal policy optimisation with the clipped surrogate objective."""

    config: PPOConfig

    def before_update(self, progress: float) -> None:
        clip = self.config.clip_epsilon
        self.clip = linear_decay(clip, progress) if self.config.anneal_clip else clip

    def policy_loss(self, log_prob, log_ratio, advantage):
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1 - self.clip, 1 + self.clip)
        return -torch.min(ratio * advantage, clipped * advantage).mean(), {}

    def policy_diagnostics(self, ratio):
        return {"clip_fraction": ((ratio - 1).abs() > self.clip).float().mean()}

    def extra_metrics(self) -> dict[str, float]:
        return {"clip_epsilon": self.clip}


class PPOKL(OnPolicy):
    """PPO with an adaptive KL penalty instead of clipping: beta doubles above 1.5x the target, halves below it/1.5."""

    config: PPOKLConfig

    def __init__(self, config: PPOKLConfig, **context):
        super().__init__(config, **context)
        self.beta = config.kl_penalty

    def policy_loss(self, log_prob, log_ratio, advantage):
        ratio = log_ratio.exp()
        kl = ((ratio - 1) - log_ratio).mean()  # an unbiased, non-negative estimate of KL(old || new)
        return -(ratio * advantage).mean() + self.beta * kl, {"kl_penalized": kl.detach()}

    def after_minibatch(self, losses: dict[str, torch.Tensor]) -> None:
        kl = losses.pop("kl_penalized").item()
        if kl > 1.5 * self.config.kl_target:
            self.beta *= 2.0
        elif kl < self.config.kl_target / 1.5:
            self.beta *= 0.5

    def extra_metrics(self) -> dict[str, float]:
        return {"kl_beta": self.beta}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "kl_beta": self.beta}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.beta = state["kl_beta"]
