"""TQC's class and the build of its loss, TorchRL's ``TQCLoss``, from the recipe's actor and critics of quantiles."""

from __future__ import annotations

from typing import Any

from tensordict.nn import TensorDictModuleBase

from rlplug.algorithms import Stochastic, default_target_entropy, one_env_actions, unset_to, with_learners
from rlplug.errors import UserError
from rlplug.networks import Role
from rlplug.plugins.algorithms.tqc import TQCConfig
from rlplug.registry.networks import ActorCriticNetworks

#: which of TorchRL's parameters each learner steps, and which learner each term trains (SACLoss's layout)
GROUPS = {"actor": "actor_network_params", "critic": "qvalue_network_params", "entropy": "log_alpha"}
TERMS = {"loss_actor": "actor", "loss_qvalue": "critic", "loss_alpha": "entropy"}


class TQC(Stochastic):
    """SAC's actor and entropy coefficient, ``critics`` critics of ``quantiles`` atoms each."""

    config: TQCConfig

    def build(self) -> TensorDictModuleBase:
        config = self.config
        if config.top_quantiles_to_drop_per_net >= config.quantiles:  # no target atom would be left
            raise UserError(f"must be less than quantiles ({config.quantiles}), or no target atom is left, got "
                            f"{config.top_quantiles_to_drop_per_net}", path="algorithm.top_quantiles_to_drop_per_net")
        self.critics = config.critics
        return super().build()

    def critic_role(self) -> str:
        return Role("q_value", outputs=self.config.quantiles)


def torchrl_loss(networks: ActorCriticNetworks, settings: Any, action_spec=None, *, observation_spec=None,
                 **values: Any):
    """TorchRL's ``TQCLoss`` with the algorithm's actor and every critic it built (one parameter set each), the
    atoms dropped, the entropy coefficient and the discount; ``values``: the recipe's keys for it.

    TorchRL registers the target entropy as a buffer when the loss first reads it; read here, it is part of
    the loss's state from the start, so that checkpoints load into a freshly built loss."""
    from torchrl.objectives import TQCLoss

    critics = list(networks["critics"])
    defaults = {"num_qvalue_nets": len(critics),
                "top_quantiles_to_drop_per_net": settings.top_quantiles_to_drop_per_net,
                "alpha_init": settings.initial_entropy_coef, "fixed_alpha": not settings.learn_entropy_coef,
                "target_entropy": default_target_entropy(settings, observation_spec, action_spec)}
    loss = TQCLoss(networks["policy"], critics, action_spec=one_env_actions(action_spec, observation_spec),
                   **unset_to(values, defaults))
    loss.target_entropy  # noqa: B018 (reading it registers its buffer)
    return with_learners(loss, settings.gamma, GROUPS, TERMS)
