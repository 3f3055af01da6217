"""Behaviour cloning: the algorithm (:class:`BC`, one deterministic actor, one learner, no targets) and the
build of TorchRL's ``BCLoss``."""

from __future__ import annotations

import warnings
from typing import Any, cast

from tensordict.nn import TensorDictModuleBase

from rlplug.errors import UserError
from rlplug.networks import is_discrete
from rlplug.plugins.algorithms.bc import BCConfig
from rlplug.plugins.algorithms.networks import build_network
from rlplug.plugins.algorithms.offline.base import Offline
from rlplug.registry.networks import OffPolicyNetworks


class BC(Offline):
    config: BCConfig
    learner_names = ("actor",)

    def check_actions(self, action_spec) -> None:
        if is_discrete(action_spec):
            raise UserError("bc clones continuous actions and this env's are discrete; use discrete-cql or "
                            "discrete-iql where rlplug has them", path="algorithm")

    def build(self) -> TensorDictModuleBase:
        self.actor = build_network(self.config.policy, role="deterministic_policy", **self.specs)
        return self.actor

    def trained_networks(self) -> OffPolicyNetworks:
        return cast(OffPolicyNetworks, {"policy": self.actor})


def torchrl_loss(networks: Any, **values: Any):
    """TorchRL's ``BCLoss`` with the algorithm's actor, and the one learner it trains."""
    from tensordict import TensorDictBase
    from torchrl.objectives import BCLoss

    with warnings.catch_warnings():  # TorchRL's BCLoss warns of its own undeclared target name as it is built
        warnings.filterwarnings("ignore", message="The name target_actor_network_params", category=UserWarning)
        loss = BCLoss(networks["policy"], **values)
    params = loss.actor_network_params
    tensors = list(params.values(True, True)) if isinstance(params, TensorDictBase) else list(loss.parameters())
    loss.parameter_groups = {"actor": [tensor for tensor in tensors if tensor.requires_grad]}
    loss.term_learners = {"loss_bc": "actor"}
    loss.no_targets = True
    return loss
