"""C51, categorical DQN (Bellemare et al. 2017, "A Distributional Perspective on Reinforcement Learning"): the
Q-network gives, for every discrete action, a distribution of returns over ``atoms`` fixed values evenly spaced
in ``[v_min, v_max]``; each gradient step projects ``r + gamma (1 - terminated) z`` under the target network's
distribution (for the action the online network values most) onto those atoms and minimises the cross-entropy
of the online distribution of the action taken against it (TorchRL's ``DistributionalDQNLoss``). Acting is DQN's:
the action of the largest expected value, epsilon-greedy on DQN's schedule; the target network follows the online
one by DQN's frame count (``target_update_interval``, ``tau``).

Torch-free: the config (the recipe table), the registrations, the loss factory; the class and the loss's build
are in :mod:`.algorithm`, imported when built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rlplug import Check, Range, hookimpl
from rlplug.algorithms import REPLAY_CONTEXT, DQNConfig, factory_for, loss_fits, named, serving
from rlplug.registry.components import Loss, Network

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.c51.algorithm import C51


#: atoms per action: each is one output of the Q-network per action
Atoms = Annotated[int, Range(ge=2, le=10_000)]


@dataclass(frozen=True)
class C51Config(DQNConfig):
    """Categorical DQN (C51): a distribution of returns over fixed atoms per action, epsilon-greedy on its mean."""

    #: the Q-network: atoms outputs per action (writes action_value, laid out action by action)
    q_network: Network = named(Network, "mlp")
    #: what each gradient step minimises: TorchRL's DistributionalDQNLoss (built with this network)
    loss: Annotated[Loss, Check(loss_fits("c51"))] = named(Loss, "DistributionalDQNLoss")
    #: the fixed return values each action's distribution is over (the paper: 51)
    atoms: Atoms = 51
    #: the lowest atom: returns below it count as it
    v_min: float = -10.0
    #: the highest atom: returns above it count as it
    v_max: float = 10.0
    #: the online network chooses the next action, the target network's distribution for it is the target
    #: (TorchRL's DistributionalDQNLoss always does: false is refused)
    double: bool = True


def c51() -> type[C51]:
    from rlplug.plugins.algorithms.c51.algorithm import C51
    return C51


@serving("c51")
def make_distributional_dqn_loss(networks: Mapping[str, Any], settings: Any, action_spec,
                                 observation_spec=None, device: str = "cpu"):
    """TorchRL's DistributionalDQNLoss, built with the algorithm's Q-network, atoms, v_min and v_max; the
    discount is the algorithm's gamma."""
    from rlplug.plugins.algorithms.c51 import algorithm

    return algorithm.torchrl_loss(networks, settings, action_spec, observation_spec=observation_spec)


@hookimpl
def rlplug_register_algorithms(register):
    register("c51", factory_for(C51Config, c51, REPLAY_CONTEXT))


@hookimpl
def rlplug_register_losses(register):
    register("DistributionalDQNLoss", make_distributional_dqn_loss)
