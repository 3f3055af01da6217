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

Alpha = Annotated[float, Range(gt=0.0)]


# -- rlplug's own: their options are the algorithm's keys --------------------------------------------------

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


def register_losses(register) -> None:
    register("mpo-loss", make_mpo_objective)
    register("dqn-loss", make_dqn_objective)
    register("DQNLoss", make_dqn_loss)
