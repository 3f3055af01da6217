"""Discrete SAC (Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings"): SAC for one Discrete
action. The actor is a categorical policy; twin critics give one Q-value per action, with target copies moved by
polyak averaging; the entropy coefficient is tuned towards a target entropy (unset: ``target_entropy_weight x
log(actions)``, a share of the uniform policy's). Since the actions can be counted, every expectation over the
policy is exact: the critics regress on ``r + gamma (1 - terminated) sum_a' pi(a'|s') (min Q'(s', a') - alpha log
pi(a'|s'))``, the actor minimises ``sum_a pi(a|s) (alpha log pi(a|s) - min Q(s, a))``. TorchRL's
``DiscreteSACLoss``. The actor explores by sampling its policy; evaluation takes its most probable action.

Torch-free: the config (the recipe table), the registrations, the loss factory; the class and the loss's build
are in :mod:`.algorithm`, imported when built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, Range, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    Distance,
    EntropyConfig,
    Fraction,
    PolyakTargets,
    Positive,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.registry.components import Loss, Network

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.discrete_sac.algorithm import DiscreteSAC

Twins = Annotated[int, Range(ge=1, le=100)]


@dataclass(frozen=True)
class DiscreteSACConfig(PolyakTargets, EntropyConfig):
    """Soft actor-critic for one Discrete action: a categorical actor, twin critics of every action, tuned entropy."""

    #: the actor network: a categorical policy over the actions (writes logits)
    policy: Network = named(Network, "mlp")
    #: the Q-network, a critic of the observation giving one value per action (writes action_value)
    critic: Network = named(Network, "mlp")
    #: what each gradient step minimises: TorchRL's DiscreteSACLoss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("discrete-sac"))] = named(Loss, "DiscreteSACLoss")
    #: the entropy to keep (unset: target_entropy_weight x log(actions), a share of the uniform policy's; that
    #: counts every action, so on an env that masks some, set it from the number usually allowed)
    target_entropy: float | None = None
    #: the share of the uniform policy's entropy to keep, where target_entropy is unset (TorchRL's default: 0.98)
    target_entropy_weight: Fraction = 0.98


def discrete_sac() -> type[DiscreteSAC]:
    from rlplug.plugins.algorithms.discrete_sac.algorithm import DiscreteSAC
    return DiscreteSAC


@serving("discrete-sac")
def make_discrete_sac_loss(
    networks: Mapping[str, Any], settings: Any, action_spec=None,
    #: how many critics (TorchRL makes them from the algorithm's critic)
    num_qvalue_nets: Twins = 2,
    #: the critics' distance to their target ('l2': the squared error of the paper)
    loss_function: Distance = "l2",
    #: the smallest and largest alpha (unset: unbounded)
    min_alpha: Positive | None = None,
    max_alpha: Positive | None = None,
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's DiscreteSACLoss, built with the algorithm's actor and critic (TorchRL makes the twins); the
    entropy coefficient, the target entropy and the discount are the algorithm's."""
    from rlplug.plugins.algorithms.discrete_sac import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                                  num_qvalue_nets=num_qvalue_nets, loss_function=loss_function,
                                  min_alpha=min_alpha, max_alpha=max_alpha)


@hookimpl
def rlplug_register_algorithms(register):
    register("discrete-sac", factory_for(DiscreteSACConfig, discrete_sac, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("DiscreteSACLoss", make_discrete_sac_loss)
