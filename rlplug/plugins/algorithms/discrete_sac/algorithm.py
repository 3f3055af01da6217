"""Discrete SAC's class (:class:`DiscreteSAC`: a categorical actor and a critic of every action, SAC's learners)
and the build of its loss, TorchRL's ``DiscreteSACLoss`` (:func:`torchrl_loss`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.data import OneHot

from rlplug.algorithms import Stochastic, build_network, one_env_actions, unset_to, with_learners
from rlplug.errors import UserError
from rlplug.networks import is_discrete, output_size
from rlplug.plugins.algorithms.discrete_sac import DiscreteSACConfig

#: which of TorchRL's parameters each learner steps, and which learner each term trains
GROUPS = {"actor": "actor_network_params", "critic": "qvalue_network_params", "entropy": "log_alpha"}
TERMS = {"loss_actor": "actor", "loss_qvalue": "critic", "loss_alpha": "entropy"}


class DiscreteSAC(Stochastic):
    config: DiscreteSACConfig
    actions = "discrete"

    def check_actions(self, action_spec) -> None:
        if not is_discrete(action_spec):
            raise UserError("discrete-sac is for discrete actions and this env's are not; use sac, td3 or ddpg",
                            path="algorithm")
        try:
            output_size("q_values", action_spec, observation_spec=self.observation_spec)
        except ValueError as error:
            raise UserError(f"discrete-sac's critics value each choice of one Discrete action: {error}",
                            path="algorithm") from None

    def build(self) -> TensorDictModuleBase:
        config = self.config
        self.actor = build_network(config.policy, role="policy", **self.specs)
        critic = build_network(config.critic, role="q_values", **self.specs)  # TorchRL's loss makes the twins
        self.critic_networks = nn.ModuleList([critic])
        return self.actor

    def exploration_stages(self) -> list[TensorDictModuleBase]:
        if self.config.exploration_noise is not None:  # noise moves continuous actions; this actor samples
            raise UserError("discrete-sac explores by sampling its categorical policy; leave exploration_noise "
                            "unset", path="algorithm.exploration_noise")
        return []


def torchrl_loss(networks: Mapping[str, Any], settings: Any, action_spec, *, observation_spec=None,
                 **values: Any):
    """TorchRL's ``DiscreteSACLoss`` with the algorithm's actor and critic (TorchRL makes the twins from it), one
    env's actions, the algorithm's entropy settings; ``values``: the recipe's keys for it."""
    from torchrl.objectives import DiscreteSACLoss

    one_env = one_env_actions(action_spec, observation_spec)
    target = settings.target_entropy if settings.target_entropy is not None else "auto"
    defaults = {"alpha_init": settings.initial_entropy_coef, "fixed_alpha": not settings.learn_entropy_coef,
                "target_entropy": target, "target_entropy_weight": settings.target_entropy_weight}
    loss = DiscreteSACLoss(networks["policy"], networks["critic"],
                           action_space="one-hot" if isinstance(one_env, OneHot) else "categorical",
                           num_actions=int(one_env.space.n), **unset_to(values, defaults))
    loss.set_keys(done="terminated")  # the replay keeps terminations only: a time limit is no end of returns
    return with_learners(loss, settings.gamma, GROUPS, TERMS)
