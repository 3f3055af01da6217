"""IQL: the algorithm (:class:`IQL`, a stochastic actor, a critic TorchRL twins, a value network) and the build
of TorchRL's ``IQLLoss`` with the learners the off-policy update steps (actor, critic, value)."""

from __future__ import annotations

from typing import Any

from tensordict.nn import TensorDictModuleBase

from rlplug.plugins.algorithms.iql import IQLConfig
from rlplug.plugins.algorithms.networks import build_network
from rlplug.plugins.algorithms.offline.base import Offline
from rlplug.plugins.algorithms.offpolicy.actor_critic import ActorCritic
from rlplug.plugins.algorithms.offpolicy.losses import refuse_sequences, with_learners
from rlplug.plugins.algorithms.offpolicy.parts import learning_rates
from rlplug.registry.networks import ValueActorCriticNetworks


class IQL(Offline, ActorCritic):
    config: IQLConfig
    actor_role = "policy"
    learner_names = ("actor", "critic", "value")

    def build(self) -> TensorDictModuleBase:
        actor = super().build()
        self.value_network = build_network(self.config.value, role="value", **self.specs)
        return actor

    def trained_networks(self) -> ValueActorCriticNetworks:
        return {"policy": self.actor, "critic": self.critic_networks[0], "critics": list(self.critic_networks),
                "value": self.value_network}

    def learning_rates(self) -> dict[str, float]:
        actor, critic = learning_rates(self.config.lr)
        return {name: actor if name == "actor" else critic for name in self.loss_module.parameter_groups}


def torchrl_loss(networks: ValueActorCriticNetworks, settings: Any, **values: Any):
    """TorchRL's ``IQLLoss`` with the algorithm's networks, expectile, temperature and discount."""
    from torchrl.objectives import IQLLoss

    refuse_sequences(networks, "IQLLoss")
    loss = IQLLoss(networks["policy"], networks["critic"], networks["value"], expectile=settings.expectile,
                   temperature=settings.temperature, **values)
    return with_learners(loss, settings.gamma, {"actor": "actor_network_params", "critic": "qvalue_network_params",
                                                "value": "value_network_params"},
                         {"loss_actor": "actor", "loss_qvalue": "critic", "loss_value": "value"},
                         weighted=False)  # IQLLoss reads no importance weights
