"""REINFORCE's class: the on-policy update (:mod:`rlplug.plugins.algorithms.onpolicy.base`), with a critic only
where the recipe asks for a baseline."""

from __future__ import annotations

from rlplug.plugins.algorithms.onpolicy.base import OnPolicy
from rlplug.plugins.algorithms.vpg import VPGConfig


class VPG(OnPolicy):
    """REINFORCE: the score-function policy gradient, with a learned baseline unless baseline = false."""

    def __init__(self, config: VPGConfig, **context):
        self.uses_critic = config.baseline
        super().__init__(config, **context)
