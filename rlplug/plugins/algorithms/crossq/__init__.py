"""CrossQ (Bhatt et al. 2024): SAC without target networks, batch-normalised twin critics valuing (s, a) and
(s', a') in one pass, the actor and the entropy coefficient moved once every ``policy_delay`` critic steps.
Losses: rlplug's ``crossq-loss`` (the default) or TorchRL's ``CrossQLoss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    Count,
    DelayedActorConfig,
    Distance,
    EntropyConfig,
    Positive,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.plugins.algorithms.offpolicy.config import PolicyDelay
from rlplug.registry.components import Loss
from rlplug.registry.networks import ActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.crossq.algorithm import CrossQ


@dataclass(frozen=True)
class CrossQConfig(DelayedActorConfig, EntropyConfig):
    """CrossQ: SAC without target networks, batch-normalised twin critics, delayed actor updates."""

    #: what each gradient step minimises: rlplug's CrossQ loss, or TorchRL's CrossQLoss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("crossq"))] = named(Loss, "crossq-loss")
    #: update the actor and the entropy coefficient once every this many critic steps
    policy_delay: PolicyDelay = 3


def crossq() -> type[CrossQ]:
    from rlplug.plugins.algorithms.crossq.algorithm import CrossQ
    return CrossQ


@serving("crossq")
def make_crossq_objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
                          device: str = "cpu"):
    """rlplug's CrossQ loss: twin soft critics valuing both batches in one pass, no targets, the actor and the
    entropy coefficient. Its options are the algorithm's keys."""
    from rlplug.plugins.algorithms.crossq import algorithm

    return algorithm.objective(networks, settings, observation_spec, action_spec)


@serving("crossq")
def make_crossq_loss(
    networks: ActorCriticNetworks, settings: Any, action_spec=None,
    #: how many critics (TorchRL makes them from the algorithm's first)
    num_qvalue_nets: Count | None = None,
    #: the critics' distance to their target (unset: 'l2', the algorithm's squared error)
    loss_function: Distance | None = None,
    #: the entropy coefficient to start from (unset: the algorithm's initial_entropy_coef)
    alpha_init: Positive | None = None,
    #: keep alpha fixed (unset: the algorithm's learn_entropy_coef, negated)
    fixed_alpha: bool | None = None,
    #: the smallest and largest alpha (unset: unbounded)
    min_alpha: Positive | None = None,
    max_alpha: Positive | None = None,
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's CrossQLoss, built with the algorithm's actor and first critic (TorchRL makes the twins); it
    keeps no target networks."""
    from rlplug.plugins.algorithms.crossq import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                                  num_qvalue_nets=num_qvalue_nets, loss_function=loss_function,
                                  alpha_init=alpha_init, fixed_alpha=fixed_alpha, min_alpha=min_alpha,
                                  max_alpha=max_alpha)


@hookimpl
def rlplug_register_algorithms(register):
    register("crossq", factory_for(CrossQConfig, crossq, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("crossq-loss", make_crossq_objective)
    register("CrossQLoss", make_crossq_loss)
