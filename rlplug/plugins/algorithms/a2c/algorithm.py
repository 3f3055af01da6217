"""A2C's class: the on-policy update (:mod:`rlplug.plugins.algorithms.onpolicy.base`) as it is; what makes it A2C is
its config's defaults."""

from __future__ import annotations

from rlplug.plugins.algorithms.onpolicy.base import OnPolicy


class A2C(OnPolicy):
    """Advantage actor-critic: one score-function step per short rollout, with a learned critic."""
