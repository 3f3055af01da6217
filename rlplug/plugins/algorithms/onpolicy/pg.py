"""Plain policy gradients: REINFORCE (with an optional learned baseline), A2C, and the unclipped surrogate.

Each is the on-policy update of :mod:`rlplug.plugins.algorithms.onpolicy.base`; they differ in their defaults
(see :mod:`rlplug.plugins.algorithms.onpolicy.config`) and their loss (the score-function gradient, or the
surrogate's importance ratio).
"""

from __future__ import annotations

from rlplug.plugins.algorithms.onpolicy.base import OnPolicy
from rlplug.plugins.algorithms.onpolicy.config import VPGConfig


class VPG(OnPolicy):
    """REINFORCE: the score-function policy gradient, with a learned baseline unless baseline = false."""

    def __init__(self, config: VPGConfig, **context):
        self.uses_critic = config.baseline
        super().__init__(config, **context)


class A2C(OnPolicy):
    """Advantage actor-critic: one score-function step per short rollout, with a learned critic."""


class Surrogate(OnPolicy):
    """The unclipped importance-ratio surrogate objective (PPO without the clip), over several epochs."""
