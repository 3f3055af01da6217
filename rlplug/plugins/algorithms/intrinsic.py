"""Intrinsic rewards in both families, torch-free: the two keys every family config has (``intrinsic``,
``pretraining``) and what is checked of them together. The rewards themselves are added by
:mod:`rlplug.plugins.algorithms.intrinsic_rewards`, where each family makes its rewards: the on-policy family
before its estimators (``OnPolicy.prepare``), the off-policy family before its reward shaping and n-step sums
(``OffPolicy.store``)."""

from __future__ import annotations

from rlplug.errors import UserError
from rlplug.registry.components import Intrinsic


def intrinsic_problems(intrinsic: Intrinsic | None, pretraining: bool) -> None:
    """One-line errors for what the two keys cannot mean together, raised as the algorithm's config is made."""
    if intrinsic is None:
        if pretraining:
            raise UserError("pretraining = true learns from an intrinsic reward alone, and there is none: add an "
                            "[algorithm.intrinsic] table (use = \"rnd\" or \"re3\"), or set pretraining = false",
                            path="algorithm.pretraining")
        return
    if intrinsic.schedule == "exponential" and intrinsic.decay == 0:
        raise UserError("the exponential schedule is coef * (1 - decay) ** frames and decay is 0: set a decay "
                        "(e.g. 1e-5), or schedule = \"constant\"", path="algorithm.intrinsic.decay")
    if intrinsic.schedule != "exponential" and intrinsic.decay != 0:
        raise UserError(f"decay is read by schedule = \"exponential\" only, and the schedule is "
                        f"'{intrinsic.schedule}': set schedule = \"exponential\" or leave decay out",
                        path="algorithm.intrinsic.decay")
    if pretraining and intrinsic.coef == 0:
        raise UserError("pretraining = true learns from coef times the intrinsic reward alone, and coef = 0 leaves "
                        "nothing to learn from; raise coef", path="algorithm.intrinsic.coef")
