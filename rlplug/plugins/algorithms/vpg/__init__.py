"""REINFORCE (Williams 1992), the vanilla policy gradient: the score function on Monte Carlo returns, with a learned
baseline unless ``baseline = false``; its loss is the family's ``policy-gradient-loss`` (:mod:`rlplug.plugins.losses`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from rlplug import Check, hookimpl
from rlplug.algorithms import Count, OnPolicyConfig, Rate, factory_for, loss_fits, named
from rlplug.plugins.algorithms.onpolicy.config import Epochs
from rlplug.registry.components import Estimator, Loss

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.vpg.algorithm import VPG


@dataclass(frozen=True)
class VPGConfig(OnPolicyConfig):
    """REINFORCE: the score-function policy gradient, with a learned baseline unless baseline = false."""

    #: learn a critic and subtract its value from the return (false: plain REINFORCE)
    baseline: bool = True
    loss: Annotated[Loss, Check(loss_fits("vpg"))] = named(Loss, "policy-gradient-loss")
    advantage: Estimator = named(Estimator, "mc")
    value_target: Estimator | None = None
    epochs: Epochs = 1
    num_minibatches: Count | None = 1
    lr: Rate = 1e-3


def vpg() -> type[VPG]:
    from rlplug.plugins.algorithms.vpg.algorithm import VPG
    return VPG


@hookimpl
def rlplug_register_algorithms(register):
    register("vpg", factory_for(VPGConfig, vpg), aliases=("reinforce",))
