"""SAC (Haarnoja et al. 2018, with the automatic entropy coefficient): a tanh-Gaussian actor, twin critics with
target copies, an entropy coefficient tuned towards a target entropy. Losses: rlplug's ``sac-loss`` (the default)
or TorchRL's ``SACLoss``. REDQ (:mod:`rlplug.plugins.algorithms.redq`) builds on it: :class:`SoftActorCriticConfig`
is what the two configs share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    Count,
    Distance,
    EntropyConfig,
    PolyakTargets,
    Positive,
    SequencesConfig,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.registry.components import Loss
from rlplug.registry.networks import ActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.sac.algorithm import SAC


@dataclass(frozen=True)
class SoftActorCriticConfig(PolyakTargets, EntropyConfig):
    """What SAC and REDQ share: a tanh-Gaussian actor, critics with target copies, a tuned entropy coefficient."""

    #: what each gradient step minimises: rlplug's SAC loss, or TorchRL's SACLoss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("sac"))] = named(Loss, "sac-loss")


@dataclass(frozen=True)
class SACConfig(SequencesConfig, SoftActorCriticConfig):
    """Soft actor-critic: a tanh-Gaussian actor, twin critics, an automatically tuned entropy coefficient."""


def sac() -> type[SAC]:
    from rlplug.plugins.algorithms.sac.algorithm import SAC
    return SAC


@serving("sac")
def make_sac_objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
                       device: str = "cpu"):
    """rlplug's SAC loss: twin soft critics, the actor and the entropy coefficient. Its options are the
    algorithm's keys."""
    from rlplug.plugins.algorithms.sac import algorithm

    return algorithm.objective(networks, settings, observation_spec, action_spec)


@serving("sac")
def make_sac_loss(
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
    #: call the critics one after the other rather than under torch.vmap: the same values, slower per step, and
    #: with run.compile a new compilation at every step
    deactivate_vmap: bool = False,
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's SACLoss, built with the algorithm's actor and first critic (TorchRL makes the twins)."""
    from rlplug.plugins.algorithms.sac import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                                  num_qvalue_nets=num_qvalue_nets, loss_function=loss_function,
                                  alpha_init=alpha_init, fixed_alpha=fixed_alpha, min_alpha=min_alpha,
                                  max_alpha=max_alpha, deactivate_vmap=deactivate_vmap)


@hookimpl
def rlplug_register_algorithms(register):
    register("sac", factory_for(SACConfig, sac, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("sac-loss", make_sac_objective)
    register("SACLoss", make_sac_loss)
