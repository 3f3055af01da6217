"""Discrete CQL: the algorithm (:class:`DiscreteCQL`, DQN's Q-network, epsilon-greedy acting and target moves by
frames) and the build of TorchRL's ``DiscreteCQLLoss``, whose TD and conservative terms both train the network."""

from __future__ import annotations

from typing import Any

from torchrl.data import OneHot

from rlplug.plugins.algorithms.discrete_cql import DiscreteCQLConfig
from rlplug.plugins.algorithms.dqn.algorithm import DQN
from rlplug.plugins.algorithms.offline.base import Offline
from rlplug.plugins.algorithms.offpolicy.losses import with_learners
from rlplug.registry.networks import QNetworks


class DiscreteCQL(Offline, DQN):
    config: DiscreteCQLConfig


def torchrl_loss(networks: QNetworks, settings: DiscreteCQLConfig, action_spec, **values: Any):
    """TorchRL's ``DiscreteCQLLoss`` with the algorithm's Q-network followed by TorchRL's ``QValueModule`` (the
    greedy action and its value, as the loss reads them)."""
    from tensordict.nn import TensorDictSequential
    from torchrl.modules import QValueModule
    from torchrl.objectives import DiscreteCQLLoss

    space = "one_hot" if isinstance(action_spec, OneHot) else "categorical"  # the spec's shape has the env's dims
    q_actor = TensorDictSequential(networks["q_network"], QValueModule(action_space=space))
    loss = DiscreteCQLLoss(q_actor, action_space=space, **values)
    return with_learners(loss, settings.gamma, {"q": "value_network_params"}, {"loss_qvalue": "q", "loss_cql": "q"},
                         weighted=False)  # DiscreteCQLLoss reads no importance weights
