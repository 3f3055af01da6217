"""REDQ (Chen et al. 2021, randomized ensembled double Q-learning): SAC (:mod:`rlplug.plugins.algorithms.sac`)
with an ensemble of critics, each one's target the lowest of a random subset of the target critics, and many
gradient steps per env step. Its loss is TorchRL's ``REDQLoss``, which makes the ensemble from the critic network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from rlplug import Check, Range, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    Count,
    Distance,
    LearningRate,
    Positive,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.plugins.algorithms.offpolicy.config import GradientSteps
from rlplug.plugins.algorithms.sac import SoftActorCriticConfig
from rlplug.plugins.limits import Limit
from rlplug.registry.components import Loss
from rlplug.registry.networks import ActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.redq.algorithm import REDQ

#: the ensemble: every critic is a copy of the critic network, each updated at every gradient step
Critics: TypeAlias = Annotated[int, Range(ge=2), Limit(1_000, "each critic is a copy of the critic network, all "
                                                              "updated at every gradient step: far more takes "
                                                              "minutes per step and the memory of that many networks "
                                                              "(the paper: 10)")]


@dataclass(frozen=True)
class REDQConfig(SoftActorCriticConfig):
    """Randomized ensembled double Q-learning: SAC with an ensemble of critics, many gradient steps per env step.

    Each critic's target is the lowest of a random subset of the target critics; the actor ascends their mean."""

    #: what each gradient step minimises: TorchRL's REDQLoss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("redq"))] = named(Loss, "REDQLoss")
    #: the critics of the ensemble (N), each a copy of the critic network
    critics: Critics = 10
    #: the target is the lowest of this many critics drawn at random for each gradient step (M, fewer than N)
    subset_size: Count = 2
    #: gradient steps per update: with steps_per_update = 1, the update-to-data ratio (G)
    gradient_steps: GradientSteps = 20
    #: learning rate: a number, or a pair [actor, critic]
    lr: LearningRate = 3e-4


def redq() -> type[REDQ]:
    from rlplug.plugins.algorithms.redq.algorithm import REDQ
    return REDQ


@serving("redq")
def make_redq_loss(
    networks: ActorCriticNetworks, settings: Any, observation_spec=None, action_spec=None,
    #: the critics' distance to their target (unset: 'l2', the squared error)
    loss_function: Distance | None = None,
    #: the smallest and largest alpha (unset: TorchRL's, 0.1 and 10)
    min_alpha: Positive | None = None,
    max_alpha: Positive | None = None,
):
    """TorchRL's REDQLoss, built with the algorithm's actor and critic (TorchRL makes the ensemble of the
    algorithm's critics); the ensemble, the subset, the entropy coefficient and the discount are the algorithm's."""
    from rlplug.plugins.algorithms.redq import algorithm

    return algorithm.torchrl_loss(networks, settings, observation_spec, action_spec, loss_function=loss_function,
                                  min_alpha=min_alpha, max_alpha=max_alpha)


@hookimpl
def rlplug_register_algorithms(register):
    register("redq", factory_for(REDQConfig, redq, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("REDQLoss", make_redq_loss)
