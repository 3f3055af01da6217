"""MPO (Abdolmaleki et al. 2018, maximum a posteriori policy optimisation, with the decoupled KL bounds): a
Gaussian actor fitted to its critic's softmax-weighted samples of the target policy, within KL bounds on its mean
and on its covariance; one Q-critic; target copies of both. Its loss is rlplug's ``mpo-loss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from rlplug import Check, Range, hookimpl
from rlplug.algorithms import (
    REPLAY_CONTEXT,
    ActorCriticConfig,
    PolyakTargets,
    Positive,
    Rate,
    factory_for,
    loss_fits,
    named,
    serving,
)
from rlplug.plugins.limits import Limit
from rlplug.registry.components import Loss, Noise
from rlplug.registry.networks import ActorCriticNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.mpo.algorithm import MPO

#: actions per state: each gradient step values batch_size x action_samples actions at once
ActionSamples: TypeAlias = Annotated[int, Range(ge=1), Limit(10_000, "each gradient step values batch_size x "
                                                                     "action_samples actions at once, beyond "
                                                                     "memory (typical: 20)")]


@dataclass(frozen=True)
class MPOConfig(PolyakTargets, ActorCriticConfig):
    """Maximum a posteriori policy optimisation: a Gaussian actor fitted to its critic's weighted samples.

    The weights are softmax(Q / temperature) over actions drawn from the target policy; the fit stays within
    separate KL bounds on the mean and on the covariance. One Q-critic; target copies of it and the actor."""

    #: what each gradient step minimises: rlplug's MPO loss (built with these networks)
    loss: Annotated[Loss, Check(loss_fits("mpo"))] = named(Loss, "mpo-loss")
    #: actions drawn from the target policy for each sampled state (the E-step's and the critic's target's)
    action_samples: ActionSamples = 20
    #: the E-step's bound on the KL of the reweighted samples from the target policy (sets the temperature)
    epsilon: Positive = 0.1
    #: the M-step's bound on the KL of the policy's mean from the target policy's
    epsilon_mean: Positive = 0.01
    #: the M-step's bound on the KL of the policy's covariance from the target policy's
    epsilon_sigma: Positive = 1e-4
    #: the temperature of the sample weights softmax(Q / temperature) to start from (then learned from its dual)
    initial_temperature: Positive = 1.0
    #: the Lagrange multipliers of the mean and covariance bounds to start from (then learned)
    initial_multiplier: Positive = 1.0
    #: learning rate of the temperature and the Lagrange multipliers
    dual_lr: Rate = 0.01
    #: the actor explores by sampling its policy: no added noise unless set
    exploration_noise: Noise | None = None


def mpo() -> type[MPO]:
    from rlplug.plugins.algorithms.mpo.algorithm import MPO
    return MPO


@serving("mpo")
def make_mpo_objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
                       device: str = "cpu"):
    """rlplug's MPO loss: the critic on the target policy's expected target value, the temperature's dual, the
    actor's weighted maximum likelihood within KL bounds on its mean and covariance. Its options are the
    algorithm's keys."""
    from rlplug.plugins.algorithms.mpo import algorithm

    return algorithm.objective(networks, settings)


@hookimpl
def rlplug_register_algorithms(register):
    register("mpo", factory_for(MPOConfig, mpo, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("mpo-loss", make_mpo_objective)
