"""PPO with an adaptive KL penalty instead of the clip (Schulman et al. 2017's other objective). Losses: rlplug's
``ppo-kl-loss`` (the default), or any of the family's (:mod:`rlplug.plugins.losses`), TorchRL's ``KLPENPPOLoss``
among them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from rlplug import Check, hookimpl
from rlplug.algorithms import OnPolicyConfig, Positive, factory_for, loss_fits, named, serving
from rlplug.registry.components import Estimator, Loss

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.ppo_kl.algorithm import PPOKL


@dataclass(frozen=True)
class PPOKLConfig(OnPolicyConfig):
    """PPO with an adaptive KL penalty instead of clipping (beta x2 above 1.5x the target, /2 below target/1.5)."""

    loss: Annotated[Loss, Check(loss_fits("ppo-kl"))] = named(Loss, "ppo-kl-loss")
    value_target: Estimator = named(Estimator, "from_advantage")
    #: the KL divergence (old policy to new) each minibatch should stay near
    kl_target: Positive = 0.01
    #: the penalty's starting coefficient (beta)
    kl_penalty: Positive = 1.0


def ppo_kl() -> type[PPOKL]:
    from rlplug.plugins.algorithms.ppo_kl.algorithm import PPOKL
    return PPOKL


@serving("ppo-kl")
def make_ppo_kl_loss(networks, settings: PPOKLConfig):
    """rlplug's PPO loss with an adaptive KL penalty instead of clipping. Its options are the algorithm's keys
    (kl_target, kl_penalty, entropy_coef, value_coef...)."""
    from rlplug.plugins.algorithms.ppo_kl.algorithm import PPOKLLoss

    return PPOKLLoss.from_settings(networks, settings, kl_target=settings.kl_target, kl_penalty=settings.kl_penalty)


@hookimpl
def rlplug_register_algorithms(register):
    register("ppo-kl", factory_for(PPOKLConfig, ppo_kl), aliases=("ppo_kl",))


@hookimpl
def rlplug_register_losses(register):
    register("ppo-kl-loss", make_ppo_kl_loss)
