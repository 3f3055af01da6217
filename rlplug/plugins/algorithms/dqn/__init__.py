"""DQN (Mnih et al. 2015) as Stable-Baselines3 has it: one Q-value per discrete action, epsilon-greedy exploration,
a target network, the Huber loss; ``double = true`` for double DQN. Losses: rlplug's ``dqn-loss`` (the default) or
TorchRL's ``DQNLoss``.

Its config, :class:`~rlplug.plugins.algorithms.offpolicy.config.DQNConfig`, is the family's: the kit hands it out
with the class as the base of value-based algorithms (C51 builds on them), and the family's update reads its
``tau``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlplug import hookimpl
from rlplug.algorithms import REPLAY_CONTEXT, Distance, DQNConfig, factory_for, serving
from rlplug.registry.networks import QNetworks

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.dqn.algorithm import DQN


def dqn() -> type[DQN]:
    from rlplug.plugins.algorithms.dqn.algorithm import DQN
    return DQN


@serving("dqn")
def make_dqn_objective(networks: QNetworks, settings: Any, action_spec=None):
    """rlplug's DQN loss: the Huber loss against the target network's value (double DQN as the algorithm says).
    Its options are the algorithm's keys."""
    from rlplug.plugins.algorithms.dqn import algorithm

    return algorithm.objective(networks, settings, action_spec)


@serving("dqn")
def make_dqn_loss(
    networks: QNetworks, settings: Any, action_spec,
    #: the distance of Q to its target (unset: 'smooth_l1', the Huber loss the algorithm uses)
    loss_function: Distance | None = None,
    #: double DQN (unset: the algorithm's double)
    double_dqn: bool | None = None,
    observation_spec=None,  # context (rlplug fills it in): whether the env masks actions
):
    """TorchRL's DQNLoss, built with the algorithm's Q-network; the discount is the algorithm's gamma."""
    from rlplug.plugins.algorithms.dqn import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec,
                                  loss_function=loss_function, double_dqn=double_dqn)


@hookimpl
def rlplug_register_algorithms(register):
    register("dqn", factory_for(DQNConfig, dqn, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("dqn-loss", make_dqn_objective)
    register("DQNLoss", make_dqn_loss)
