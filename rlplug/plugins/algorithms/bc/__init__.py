"""Behaviour cloning: a deterministic actor regressed on the dataset's actions, the baseline every offline
algorithm is measured against. Learns from a ``[dataset]`` only. Loss: TorchRL's ``BCLoss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from rlplug import Check, hookimpl
from rlplug.algorithms import REPLAY_CONTEXT, Count, OffPolicyConfig, Rate, factory_for, loss_fits, named, serving
from rlplug.registry.components import Loss, Network

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.bc.algorithm import BC


@dataclass(frozen=True)
class BCConfig(OffPolicyConfig):
    """Behaviour cloning: the actor regressed on the dataset's actions (continuous actions)."""

    #: what each gradient step minimises: TorchRL's BCLoss (built with this actor)
    loss: Annotated[Loss, Check(loss_fits("bc"))] = named(Loss, "BCLoss")
    #: the actor network (a deterministic policy)
    policy: Network = named(Network, "mlp")
    batch_size: Count = 256
    #: learning rate (a schedule scales it)
    lr: Rate = 1e-3


def bc() -> type[BC]:
    from rlplug.plugins.algorithms.bc.algorithm import BC
    return BC


@serving("bc")
def make_bc_loss(
    networks, settings,
    #: the distance between the actor's action and the dataset's
    loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
):
    """TorchRL's BCLoss, built with the algorithm's actor."""
    from rlplug.plugins.algorithms.bc import algorithm

    return algorithm.torchrl_loss(networks, loss_function=loss_function)


@hookimpl
def rlplug_register_algorithms(register):
    factory = factory_for(BCConfig, bc, REPLAY_CONTEXT)
    factory.offline_only = True  # read by the recipe check: a dataset is required
    register("bc", factory)


@hookimpl
def rlplug_register_losses(register):
    register("BCLoss", make_bc_loss)
