"""Discrete CQL: the algorithm (:class:`DiscreteCQL`, DQN's Q-network, epsilon-greedy acting and target moves by
frames) and the build of TorchRL's ``DiscreteCQLLoss``, whose TD and conservative terms both train the network."""

from __future__ import annotations

import types
from typing import Any

from torchrl.data import OneHot

from rlplug.plugins.algorithms.discrete_cql import DiscreteCQLConfig
from rlplug.plugins.algorithms.dqn.algorithm import DQN
from rlplug.plugins.algorithms.offline.base import Offline
from rlplug.plugins.algorithms.offpolicy.losses import with_learners
from rlplug.registry.networks import QNetworks


class DiscreteCQL(Offline, DQN):
    config: DiscreteCQLConfig


def with_target_values(loss):
    """``loss`` (TorchRL's ``DiscreteCQLLoss``) made to take its TD targets from its target network. Its
    ``value_loss`` hands the target parameters to the value estimator as ``params=``, which ``TD0Estimator``'s
    ``value_estimate`` takes into ``**kwargs`` and ignores (torchrl 0.14, and its main branch as of 2026-08): the
    next values came from the online network itself, whatever ``tau`` and ``target_update_interval`` said, and
    offline its Q-values climbed without bound. Here the estimator is handed them as ``target_params``."""
    loss.value_loss = types.MethodType(targeted_value_loss, loss)  # bound: a deep copy binds its own copy
    return loss


def targeted_value_loss(loss, tensordict):
    estimator = loss.value_estimator
    estimate = estimator.value_estimate

    def value_estimate(td, *args, params=None, **kwargs):
        if params is not None and kwargs.get("target_params") is None:
            kwargs["target_params"] = params
        return estimate(td, *args, **kwargs)

    estimator.value_estimate = value_estimate
    try:
        return type(loss).value_loss(loss, tensordict)
    finally:
        del estimator.value_estimate


def torchrl_loss(networks: QNetworks, settings: DiscreteCQLConfig, action_spec, **values: Any):
    """TorchRL's ``DiscreteCQLLoss`` with the algorithm's Q-network followed by TorchRL's ``QValueModule`` (the
    greedy action and its value, as the loss reads them)."""
    from tensordict.nn import TensorDictSequential
    from torchrl.modules import QValueModule
    from torchrl.objectives import DiscreteCQLLoss

    space = "one_hot" if isinstance(action_spec, OneHot) else "categorical"  # the spec's shape has the env's dims
    q_actor = TensorDictSequential(networks["q_network"], QValueModule(action_space=space))
    loss = with_target_values(DiscreteCQLLoss(q_actor, action_space=space, **values))
    return with_learners(loss, settings.gamma, {"q": "value_network_params"}, {"loss_qvalue": "q", "loss_cql": "q"},
                         weighted=False)  # DiscreteCQLLoss reads no importance weights
