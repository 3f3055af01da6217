"""Intrinsic rewards (exploration bonuses) for ``[algorithm.intrinsic]``: ``rnd`` (Burda et al. 2018) and ``re3``
(Seo et al. 2021). Torch-free: the factories import their modules (:mod:`.rnd`, :mod:`.re3`) when built.
``coef``, ``schedule`` and ``decay`` are rlplug's keys of the table (:class:`rlplug.registry.components.Intrinsic`),
not these factories'."""

from __future__ import annotations

from typing import Annotated

from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Range

Width = Annotated[int, Range(ge=1)]


def make_rnd(
    #: hidden layer widths of the target and the predictor networks
    hidden: list[Width] | None = None,
    #: the size of the target's random features, which the predictor learns to reproduce
    features: Width = 64,
    #: the predictor's learning rate (Adam)
    lr: Annotated[float, Range(gt=0.0, le=1.0)] = 1e-4,
    #: passes of the predictor over each batch
    epochs: Width = 1,
    #: transitions per predictor step
    minibatch_size: Width = 256,
    #: the share of each minibatch the predictor learns from (the paper's 0.25 with 128 envs keeps its pace
    #: as envs are added); TorchRL's RNDLoss draws the mask
    update_fraction: Annotated[float, Range(gt=0.0, le=1.0)] = 1.0,
    #: the discount of the intrinsic returns whose running standard deviation divides the reward
    gamma: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.99,
    observation_spec=None,
    device="cpu",
    seed=0,
):
    """Random network distillation (Burda et al. 2018): the reward is a trained predictor's error at a fixed random
    network's features of the next observation, high where observations are new.

    Observations are standardised by their running mean and variance (clipped to [-5, 5]) before both networks;
    the reward is the predictor's squared error (mean over features) divided by the running standard deviation of
    the discounted intrinsic returns, each env's summed along its row of the batch across episodes (the paper's
    non-episodic return). The predictor then takes its steps on the batch (TorchRL's ``RNDLoss``)."""
    from rlplug.plugins.intrinsic.rnd import RandomNetworkDistillation

    return RandomNetworkDistillation(observation_spec, hidden=tuple(hidden or (64, 64)), features=features, lr=lr,
                                     epochs=epochs, minibatch_size=minibatch_size, update_fraction=update_fraction,
                                     gamma=gamma, device=device)


def make_re3(
    #: the neighbour whose distance is the reward: the k-th nearest of the batch's other observations
    k: Width = 3,
    #: the size of the random encoder's embedding
    features: Width = 64,
    #: hidden layer widths of the random encoder
    hidden: list[Width] | None = None,
    observation_spec=None,
    device="cpu",
    seed=0,
):
    """RE3, random encoders for efficient exploration (Seo et al. 2021): a fixed random encoder embeds each next
    observation and the reward is log(1 + the distance to its k-th nearest neighbour among the batch's embeddings).

    Nothing is trained, so the bonus follows only how spread the batch's states are; a batch must hold more than
    ``k`` transitions (on-policy ``frames_per_batch``; off-policy ``num_envs x steps_per_update``)."""
    from rlplug.plugins.intrinsic.re3 import RandomEncoder

    return RandomEncoder(observation_spec, k=k, features=features, hidden=tuple(hidden or (64,)), device=device)


@hookimpl
def rlplug_register_intrinsic_rewards(register):
    register("rnd", make_rnd, aliases=("random-network-distillation",))
    register("re3", make_re3)
