"""Discrete IQL: the algorithm (:class:`DiscreteIQL`, IQL's learners with a categorical actor and a critic of every
action) and the build of TorchRL's ``DiscreteIQLLoss``."""

from __future__ import annotations

from typing import Any

from torchrl.data import OneHot

from rlplug.errors import UserError
from rlplug.networks import is_discrete, output_size
from rlplug.plugins.algorithms.discrete_iql import DiscreteIQLConfig
from rlplug.plugins.algorithms.iql.algorithm import IQL
from rlplug.plugins.algorithms.offpolicy.losses import one_env_actions, refuse_sequences, with_learners
from rlplug.registry.networks import ValueActorCriticNetworks


class DiscreteIQL(IQL):
    config: DiscreteIQLConfig
    actions = "discrete"

    def check_actions(self, action_spec) -> None:
        if not is_discrete(action_spec):
            raise UserError("discrete-iql is for discrete actions and this env's are not; use iql",
                            path="algorithm")
        try:
            output_size("q_values", action_spec, observation_spec=self.observation_spec)
        except ValueError as error:
            raise UserError(f"discrete-iql's critics value each choice of one Discrete action: {error}",
                            path="algorithm") from None

    def critic_role(self) -> str:
        return "q_values"


def torchrl_loss(networks: ValueActorCriticNetworks, settings: DiscreteIQLConfig, action_spec, *,
                 observation_spec=None, **values: Any):
    """TorchRL's ``DiscreteIQLLoss`` with the algorithm's networks (the critic's ``action_value`` read as its
    values of every action), expectile, temperature and discount."""
    from torchrl.objectives import DiscreteIQLLoss

    refuse_sequences(networks, "DiscreteIQLLoss")
    one_env = one_env_actions(action_spec, observation_spec)
    loss = DiscreteIQLLoss(networks["policy"], networks["critic"], networks["value"],
                           action_space="one-hot" if isinstance(one_env, OneHot) else "categorical",
                           expectile=settings.expectile, temperature=settings.temperature, **values)
    loss.set_keys(state_action_value="action_value")
    return with_learners(loss, settings.gamma, {"actor": "actor_network_params", "critic": "qvalue_network_params",
                                                "value": "value_network_params"},
                         {"loss_actor": "actor", "loss_qvalue": "critic", "loss_value": "value"}, weighted=False)
