"""The surrogate's class: the on-policy update (:mod:`rlplug.plugins.algorithms.onpolicy.base`) as it is; what makes
it the unclipped surrogate is its loss, the family's ``surrogate-loss``."""

from __future__ import annotations

from rlplug.plugins.algorithms.onpolicy.base import OnPolicy


class Surrogate(OnPolicy):
    """The unclipped importance-ratio surrogate objective (PPO without the clip), over several epochs."""
