"""PPO (Schulman et al. 2017) with the clipped surrogate objective. Losses: rlplug's ``ppo-loss`` (the default),
or any of the family's (:mod:`rlplug.plugins.losses`), TorchRL's ``ClipPPOLoss`` among them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from rlplug import Check, hookimpl
from rlplug.algorithms import OnPolicyConfig, Positive, factory_for, loss_fits, named, serving
from rlplug.registry.components import Estimator, Loss

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.ppo.algorithm import PPO


@dataclass(frozen=True)
class PPOConfig(OnPolicyConfig):
    """Proximal policy optimisation with the clipped surrogate objective."""

    loss: Annotated[Loss, Check(loss_fits("ppo"))] = named(Loss, "ppo-loss")
    value_target: Estimator = named(Estimator, "from_advantage")
    #: the clip range of the probability ratio
    clip_epsilon: Positive = 0.2
    #: shrink the clip range linearly to 0 over the run (rl-baselines3-zoo's ``lin_`` clip ranges)
    anneal_clip: bool = False


def ppo() -> type[PPO]:
    from rlplug.plugins.algorithms.ppo.algorithm import PPO
    return PPO


@serving("ppo")
def make_ppo_loss(networks, settings: PPOConfig):
    """rlplug's PPO loss: the clipped surrogate, value and entropy terms. Its options are the algorithm's keys
    (clip_epsilon, entropy_coef, value_coef...)."""
    from rlplug.plugins.algorithms.ppo.algorithm import PPOLoss

    return PPOLoss.from_settings(networks, settings, clip_epsilon=settings.clip_epsilon)


@hookimpl
def rlplug_register_algorithms(register):
    register("ppo", factory_for(PPOConfig, ppo))


@hookimpl
def rlplug_register_losses(register):
    register("ppo-loss", make_ppo_loss)
