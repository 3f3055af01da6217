"""The off-policy losses as the registry sees them: torch-free factories whose signatures are each loss's recipe
keys (a key left unset takes the algorithm's setting where it has one), each marked with the algorithms it
serves. Each imports its algorithm's home (``ddpg.py``, ``td3.py``, ``sac.py``, ``redq.py``, ``crossq.py``,
``mpo.py``, ``dqn.py``), where the loss is, only when built: listing and validating recipes never load torch.
Registered from
:func:`rlplug.plugins.algorithms.rlplug_register_losses`.
"""

from __future__ import annotations

from typing import Annotated, Any

from rlplug.plugins.algorithms.loss_parts import Distance, serving
from rlplug.registry.networks import ActorCriticNetworks, QNetworks
from rlplug.registry.schema import Range

Twins = Annotated[int, Range(ge=1)]
Alpha = Annotated[float, Range(gt=0.0)]


# -- rlplug's own: their options are the algorithm's keys --------------------------------------------------

@serving("sac")
def make_sac_objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
                  device: str = "cpu"):
    """rlplug's SAC loss: twin soft critics, the actor and the entropy coefficient. Its options are the
    algorithm's keys."""
    from rlplug.plugins.algorithms.offpolicy import sac

    return sac.objective(networks, settings, observation_spec, action_spec)


@serving("crossq")
def make_crossq_objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
                     device: str = "cpu"):
    """rlplug's CrossQ loss: twin soft critics valuing both batches in one pass, no targets, the actor and the
    entropy coefficient. Its options are the algorithm's keys."""
    from rlplug.plugins.algorithms.offpolicy import crossq

    return crossq.objective(networks, settings, observation_spec, action_spec)


@serving("mpo")
def make_mpo_objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
                       device: str = "cpu"):
    """rlplug's MPO loss: the critic on the target policy's expected target value, the temperature's dual, the
    actor's weighted maximum likelihood within KL bounds on its mean and covariance. Its options are the
    algorithm's keys."""
    from rlplug.plugins.algorithms.offpolicy import mpo

    return mpo.objective(networks, settings)


@serving("dqn")
def make_dqn_objective(networks: QNetworks, settings: Any, action_spec=None):
    """rlplug's DQN loss: the Huber loss against the target network's value (double DQN as the algorithm says).
    Its options are the algorithm's keys."""
    from rlplug.plugins.algorithms.offpolicy import dqn

    return dqn.objective(networks, settings, action_spec)


# -- TorchRL's, built with the algorithm's networks ---------------------------------------------------------

@serving("sac")
def make_sac_loss(
    networks: ActorCriticNetworks, settings: Any, action_spec=None,
    #: how many critics (TorchRL makes them from the algorithm's first)
    num_qvalue_nets: Twins | None = None,
    #: the critics' distance to their target (unset: 'l2', the algorithm's squared error)
    loss_function: Distance | None = None,
    #: the entropy coefficient to start from (unset: the algorithm's initial_entropy_coef)
    alpha_init: Alpha | None = None,
    #: keep alpha fixed (unset: the algorithm's learn_entropy_coef, negated)
    fixed_alpha: bool | None = None,
    #: the smallest and largest alpha (unset: unbounded)
    min_alpha: Alpha | None = None,
    max_alpha: Alpha | None = None,
    #: call the critics one after the other rather than under torch.vmap: the same values, slower per step, and
    #: with run.compile a new compilation at every step
    deactivate_vmap: bool = False,
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's SACLoss, built with the algorithm's actor and first critic (TorchRL makes the twins)."""
    from rlplug.plugins.algorithms.offpolicy import sac

    return sac.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                            num_qvalue_nets=num_qvalue_nets, loss_function=loss_function, alpha_init=alpha_init,
                            fixed_alpha=fixed_alpha, min_alpha=min_alpha, max_alpha=max_alpha,
                            deactivate_vmap=deactivate_vmap)


@serving("crossq")
def make_crossq_loss(
    networks: ActorCriticNetworks, settings: Any, action_spec=None,
    #: how many critics (TorchRL makes them from the algorithm's first)
    num_qvalue_nets: Twins | None = None,
    #: the critics' distance to their target (unset: 'l2', the algorithm's squared error)
    loss_function: Distance | None = None,
    #: the entropy coefficient to start from (unset: the algorithm's initial_entropy_coef)
    alpha_init: Alpha | None = None,
    #: keep alpha fixed (unset: the algorithm's learn_entropy_coef, negated)
    fixed_alpha: bool | None = None,
    #: the smallest and largest alpha (unset: unbounded)
    min_alpha: Alpha | None = None,
    max_alpha: Alpha | None = None,
    observation_spec=None,  # context (rlplug fills it in): one env's actions for TorchRL's loss
):
    """TorchRL's CrossQLoss, built with the algorithm's actor and first critic (TorchRL makes the twins); it
    keeps no target networks."""
    from rlplug.plugins.algorithms.offpolicy import crossq

    return crossq.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                               num_qvalue_nets=num_qvalue_nets, loss_function=loss_function, alpha_init=alpha_init,
                               fixed_alpha=fixed_alpha, min_alpha=min_alpha, max_alpha=max_alpha)


@serving("dqn")
def make_dqn_loss(
    networks: QNetworks, settings: Any, action_spec,
    #: the distance of Q to its target (unset: 'smooth_l1', the Huber loss the algorithm uses)
    loss_function: Distance | None = None,
    #: double DQN (unset: the algorithm's double)
    double_dqn: bool | None = None,
):
    """TorchRL's DQNLoss, built with the algorithm's Q-network; the discount is the algorithm's gamma."""
    from rlplug.plugins.algorithms.offpolicy import dqn

    return dqn.torchrl_loss(networks, settings, action_spec, loss_function=loss_function, double_dqn=double_dqn)


@serving("redq")
def make_redq_loss(
    networks: ActorCriticNetworks, settings: Any, observation_spec=None, action_spec=None,
    #: the critics' distance to their target (unset: 'l2', the squared error)
    loss_function: Distance | None = None,
    #: the smallest and largest alpha (unset: TorchRL's, 0.1 and 10)
    min_alpha: Alpha | None = None,
    max_alpha: Alpha | None = None,
):
    """TorchRL's REDQLoss, built with the algorithm's actor and critic (TorchRL makes the ensemble of the
    algorithm's critics); the ensemble, the subset, the entropy coefficient and the discount are the algorithm's."""
    from rlplug.plugins.algorithms.offpolicy import redq

    return redq.torchrl_loss(networks, settings, observation_spec, action_spec, loss_function=loss_function,
                             min_alpha=min_alpha, max_alpha=max_alpha)


def register_losses(register) -> None:
    register("sac-loss", make_sac_objective)
    register("crossq-loss", make_crossq_objective)
    register("mpo-loss", make_mpo_objective)
    register("dqn-loss", make_dqn_objective)
    register("SACLoss", make_sac_loss)
    register("CrossQLoss", make_crossq_loss)
    register("DQNLoss", make_dqn_loss)
    register("REDQLoss", make_redq_loss)
