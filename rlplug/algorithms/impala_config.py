"""IMPALA's recipe table (torch-free, like :mod:`rlplug.algorithms.config`): the algorithm is in
:mod:`rlplug.algorithms.impala`."""

from __future__ import annotations

from dataclasses import dataclass

from rlplug.algorithms.config import OPTIMIZERS, Count, NonNegative, OnPolicyConfig, Positive
from rlplug.components import Estimator


@dataclass(frozen=True)
class ImpalaConfig(OnPolicyConfig):
    """IMPALA (Espeholt et al. 2018): a learner fed by asynchronous actors, V-trace correcting for their lag.

    Under ``[runner] use = "ray"`` each worker collects ``frames_per_batch`` frames with the weights it last
    received and the learner takes one update per rollout, first come, first served; under the local runner
    it is an on-policy actor-critic whose V-trace weights are all 1. The advantage estimator must be
    ``vtrace`` (or another that reads ``target_log_prob``), which also gives the value target.
    """

    #: V-trace: reads the behaviour log-prob the worker recorded and the learner's, clips their ratio
    advantage: Estimator = "vtrace"
    #: unset: the value target is V-trace's v_s
    value_target: Estimator | None = None
    frames_per_batch: Count = 256
    #: passes over each rollout (the paper: 1)
    epochs: Count = 1
    num_minibatches: Count | None = 1
    optimizer: OPTIMIZERS = "rmsprop"
    lr: Positive = 6e-4
    max_grad_norm: Positive | None = 40.0
    entropy_coef: NonNegative = 0.01
    value_coef: NonNegative = 0.5
    normalize_advantages: bool = False
