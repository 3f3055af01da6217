"""The unclipped importance-ratio surrogate objective over several epochs: PPO without the clip (the baseline its
clip is measured against); its loss is the family's ``surrogate-loss`` (:mod:`rlplug.plugins.losses`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from rlplug import Check, hookimpl
from rlplug.algorithms import OnPolicyConfig, factory_for, loss_fits, named
from rlplug.registry.components import Estimator, Loss

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.surrogate.algorithm import Surrogate


@dataclass(frozen=True)
class SurrogateConfig(OnPolicyConfig):
    """The unclipped importance-ratio surrogate objective (PPO without the clip), over several epochs."""

    loss: Annotated[Loss, Check(loss_fits("surrogate"))] = named(Loss, "surrogate-loss")
    value_target: Estimator = named(Estimator, "from_advantage")


def surrogate() -> type[Surrogate]:
    from rlplug.plugins.algorithms.surrogate.algorithm import Surrogate
    return Surrogate


@hookimpl
def rlplug_register_algorithms(register):
    register("surrogate", factory_for(SurrogateConfig, surrogate))
