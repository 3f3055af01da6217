"""TQC (Kuznetsov et al. 2020, truncated quantile critics; sb3-contrib's TQC): SAC whose critics each give
``quantiles`` atoms of the return's distribution rather than one value. The target pools the atoms of all the
target critics at the next state, drops the ``top_quantiles_to_drop_per_net x critics`` highest of them (the
overestimation SAC's minimum of two critics fights, tuned by one number) and trains every critic on the rest
with the quantile Huber loss; the actor ascends the mean of all atoms minus ``alpha log pi``.

The algorithm on the algorithm kit (:mod:`rlplug.algorithms`): its config and registration here (torch-free), its
class, rlplug's loss (``tqc-loss``, the default) and the builds of both losses, rlplug's and TorchRL's ``TQCLoss``,
in :mod:`.algorithm`. Each critic is the recipe's ``critic`` network
built for ``Role("q_value", outputs=quantiles)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import rlplug
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    EntropyConfig,
    PolyakTargets,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.registry.components import Loss
from rlplug.registry.networks import ActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.tqc.algorithm import TQC


def _at_most(limit: int, why: str):
    """A check refusing a value above ``limit``, with the reason the limit protects."""
    def problem(value: Any) -> str | None:
        return f"must be at most {limit}, got {value!r}: {why}" if value > limit else None
    problem.__name__ = f"at_most_{limit}"
    return problem


#: the ensemble: each critic is a copy of the critic network (sb3-contrib's n_critics)
Critics = Annotated[int, rlplug.Range(ge=1), rlplug.Check(_at_most(100, "each critic is a copy of the critic network "
                                                                           "and its quantiles are regressed on every "
                                                                           "pooled atom: far more exhausts memory "
                                                                           "(typical: 2 to 5)"))]
#: atoms per critic (sb3-contrib's n_quantiles)
Quantiles = Annotated[int, rlplug.Range(ge=1), rlplug.Check(_at_most(1_000, "every atom is regressed on every pooled "
                                                                             "target atom, batch_size x critics^2 x "
                                                                             "quantiles^2 numbers a step (typical: "
                                                                             "25)"))]


@dataclass(frozen=True)
class TQCConfig(PolyakTargets, EntropyConfig):
    """Truncated quantile critics: SAC with critics of return quantiles, the target dropping the highest pooled ones.

    Each critic gives `quantiles` atoms; the target pools every target critic's atoms at the next state and drops
    the top_quantiles_to_drop_per_net x critics highest; the actor ascends the mean of all atoms."""

    #: what each gradient step minimises: rlplug's TQC loss (seeds train together with it), or TorchRL's TQCLoss
    #: (built with these networks)
    loss: Annotated[Loss, rlplug.Check(loss_fits("tqc"))] = named(Loss, "tqc-loss")
    #: the critics of the ensemble (sb3-contrib's n_critics), each a copy of the critic network
    critics: Critics = 2
    #: the return quantiles (atoms) each critic gives (sb3-contrib's n_quantiles)
    quantiles: Quantiles = 25
    #: the target drops this many highest atoms per critic from the pooled atoms (fewer than quantiles)
    top_quantiles_to_drop_per_net: Annotated[int, rlplug.Range(ge=0)] = 2


def tqc() -> type[TQC]:
    from rlplug.plugins.algorithms.tqc.algorithm import TQC
    return TQC


Alpha = Annotated[float, rlplug.Range(gt=0.0)]


@serving("tqc")
def make_tqc_objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
                       device: str = "cpu"):
    """rlplug's TQC loss: the critics' quantile Huber loss on the truncated pooled target atoms, the actor and the
    entropy coefficient. Its options are the algorithm's."""
    from rlplug.plugins.algorithms.tqc import algorithm

    return algorithm.objective(networks, settings, observation_spec, action_spec)


@serving("tqc")
def make_tqc_loss(
    networks: ActorCriticNetworks, settings: Any, action_spec=None,
    #: the smallest and largest alpha (unset: unbounded)
    min_alpha: Alpha | None = None,
    max_alpha: Alpha | None = None,
    #: call the critics one after the other rather than under torch.vmap: the same values, slower per step
    deactivate_vmap: bool = False,
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's TQCLoss, built with the algorithm's actor and its critics of quantiles; the ensemble, the atoms
    dropped, the entropy coefficient and the discount are the algorithm's."""
    from rlplug.plugins.algorithms.tqc import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                                  min_alpha=min_alpha, max_alpha=max_alpha, deactivate_vmap=deactivate_vmap)


@rlplug.hookimpl
def rlplug_register_algorithms(register):
    register("tqc", factory_for(TQCConfig, tqc, REPLAY_CONTEXT))


@rlplug.hookimpl
def rlplug_register_losses(register):
    register("tqc-loss", make_tqc_objective)
    register("TQCLoss", make_tqc_loss)
