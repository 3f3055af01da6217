"""A2C (Mnih et al. 2016, the synchronous advantage actor-critic) with Stable-Baselines3's defaults: one RMSprop
step per short rollout; its loss is the family's ``policy-gradient-loss`` (:mod:`rlplug.plugins.losses`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from rlplug import Check, hookimpl
from rlplug.algorithms import OPTIMIZERS, Count, OnPolicyConfig, Rate, factory_for, loss_fits, named
from rlplug.plugins.algorithms.onpolicy.config import Epochs
from rlplug.registry.components import Estimator, Loss

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.a2c.algorithm import A2C


@dataclass(frozen=True)
class A2CConfig(OnPolicyConfig):
    """Advantage actor-critic: one RMSprop policy-gradient step per short rollout (SB3's A2C defaults)."""

    loss: Annotated[Loss, Check(loss_fits("a2c"))] = named(Loss, "policy-gradient-loss")
    frames_per_batch: Count = 40
    epochs: Epochs = 1
    num_minibatches: Count | None = 1
    optimizer: OPTIMIZERS = "rmsprop"
    lr: Rate = 7e-4
    normalize_advantages: bool = False
    value_target: Estimator = named(Estimator, "from_advantage")


def a2c() -> type[A2C]:
    from rlplug.plugins.algorithms.a2c.algorithm import A2C
    return A2C


@hookimpl
def rlplug_register_algorithms(register):
    register("a2c", factory_for(A2CConfig, a2c))
