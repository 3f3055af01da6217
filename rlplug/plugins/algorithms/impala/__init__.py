"""IMPALA (Espeholt et al. 2018): an actor-critic learner fed by asynchronous actors, V-trace correcting for their
lag; its loss is the family's ``policy-gradient-loss`` (:mod:`rlplug.plugins.losses`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from rlplug import Check, hookimpl
from rlplug.algorithms import (
    OPTIMIZERS,
    Count,
    NonNegative,
    OnPolicyConfig,
    Positive,
    Rate,
    factory_for,
    loss_fits,
    named,
)
from rlplug.plugins.algorithms.onpolicy.config import EntropyCoef, Epochs
from rlplug.registry.components import Estimator, Loss

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.impala.algorithm import IMPALA


@dataclass(frozen=True)
class ImpalaConfig(OnPolicyConfig):
    """IMPALA (Espeholt et al. 2018): a learner fed by asynchronous actors, V-trace correcting for their lag.

    Under ``[runner] use = "ray"`` each worker collects ``frames_per_batch`` frames with the weights it last
    received and the learner takes one update per rollout, first come, first served; under the local runner
    it is an on-policy actor-critic whose V-trace weights are all 1. The advantage estimator must be
    ``vtrace`` (or another that reads ``target_log_prob``), which also gives the value target.
    """

    #: V-trace: reads the behaviour log-prob the worker recorded and the learner's, clips their ratio
    advantage: Estimator = named(Estimator, "vtrace")
    #: unset: the value target is V-trace's v_s
    value_target: Estimator | None = None
    loss: Annotated[Loss, Check(loss_fits("impala"))] = named(Loss, "policy-gradient-loss")
    frames_per_batch: Count = 256
    #: passes over each rollout (the paper: 1)
    epochs: Epochs = 1
    num_minibatches: Count | None = 1
    optimizer: OPTIMIZERS = "rmsprop"
    lr: Rate = 6e-4
    max_grad_norm: Positive | None = 40.0
    entropy_coef: EntropyCoef = 0.01
    value_coef: NonNegative = 0.5
    normalize_advantages: bool = False


def impala() -> type[IMPALA]:
    from rlplug.plugins.algorithms.impala.algorithm import IMPALA
    return IMPALA


@hookimpl
def rlplug_register_algorithms(register):
    register("impala", factory_for(ImpalaConfig, impala))
