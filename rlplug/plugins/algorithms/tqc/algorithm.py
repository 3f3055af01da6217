"""TQC's class, rlplug's loss (:class:`TQCObjective`, ``tqc-loss``) and the builds of both losses a recipe may
choose (:func:`objective`, :func:`torchrl_loss`: TorchRL's ``TQCLoss``), from the recipe's actor and critics of
quantiles."""

from __future__ import annotations

from typing import Any

import torch
from tensordict.nn import TensorDictModuleBase

from rlplug.algorithms import Stochastic, default_target_entropy, one_env_actions, unset_to, with_learners
from rlplug.core.recurrent import is_recurrent
from rlplug.errors import UserError
from rlplug.networks import Role
from rlplug.plugins.algorithms.offpolicy.losses import Sample
from rlplug.plugins.algorithms.sac.algorithm import SACObjective
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


class TQCObjective(SACObjective):
    """TQC's loss: SAC's actor and entropy coefficient; every critic's quantile Huber loss against the target
    critics' atoms at the next state pooled, less the ``drop`` highest; the actor ascends the mean of all atoms.
    Seeds train together with it under ``torch.vmap`` (it is ``batchable``), which TorchRL's ``TQCLoss`` is not."""

    def __init__(self, actor, critics: list, *, gamma: float, drop: int, observation_key: str = "observation",
                 alpha_init: float = 1.0, learn_alpha: bool = True, target_entropy: float = -1.0):
        super().__init__(actor, critics, gamma=gamma, observation_key=observation_key, alpha_init=alpha_init,
                         learn_alpha=learn_alpha, target_entropy=target_entropy)
        #: how many of the pooled target atoms are dropped, the highest (top_quantiles_to_drop_per_net x critics)
        self.drop = drop

    def actor_value(self, values: list[torch.Tensor]) -> torch.Tensor:
        """The mean of every critic's atoms: the policy reads the whole mixture, only the targets are cut."""
        return torch.stack([q.float() for q in values]).mean((0, -1)).unsqueeze(-1)

    def next_value(self, next_observation, next_action: torch.Tensor) -> torch.Tensor:
        """Every target critic's atoms at the next state pooled, less the ``drop`` highest: ``[batch, kept]``."""
        pooled = torch.cat([q(next_observation, next_action).float() for q in self.target_q], -1)
        return pooled.sort(-1).values[..., :pooled.shape[-1] - self.drop]

    def critic_term(self, sample: Sample, target: torch.Tensor,
                    values: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Each critic's quantile Huber loss, every predicted atom against every kept target atom, summed over the
        critics; and each sample's priority, the largest of the critics' mean distances to the kept atoms."""
        if values is None:
            values = [q(sample.observation, sample.action) for q in self.q]
        atoms = torch.stack([value.float() for value in values])  # [critics, batch, quantiles]
        delta = target.unsqueeze(0).unsqueeze(-2) - atoms.unsqueeze(-1)  # [critics, batch, quantiles, kept]
        quantiles = atoms.shape[-1]
        fractions = (torch.arange(quantiles, device=atoms.device, dtype=atoms.dtype) + 0.5) / quantiles
        weights = (fractions.unsqueeze(-1) - (delta.detach() < 0).to(atoms.dtype)).abs()
        huber = torch.nn.functional.huber_loss(delta, torch.zeros_like(delta), reduction="none", delta=1.0)
        per_sample = (weights * huber).mean((-1, -2)).sum(0).unsqueeze(-1)  # [batch, 1]
        return sample.mean(per_sample), delta.detach().abs().mean((-1, -2)).max(0).values.unsqueeze(-1)


def objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec) -> TQCObjective:
    """rlplug's TQC loss with the algorithm's actor and critics of quantiles, its discount, the atoms it drops
    and its entropy settings."""
    if is_recurrent(networks["policy"]) or is_recurrent(networks["critic"]):
        raise UserError("tqc learns from single transitions, not from the sequences of recurrent networks (lstm, "
                        "gru): use an mlp", path="algorithm.policy")
    actor, critics = networks["policy"], list(networks["critics"])
    drop = settings.top_quantiles_to_drop_per_net * len(critics)
    return TQCObjective(actor, critics, gamma=settings.gamma, drop=drop, observation_key=actor.in_keys[0],
                        alpha_init=settings.initial_entropy_coef, learn_alpha=settings.learn_entropy_coef,
                        target_entropy=default_target_entropy(settings, observation_spec, action_spec))


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
