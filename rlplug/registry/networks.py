"""The networks an algorithm hands its loss (the ``networks`` a loss factory is given), by algorithm family.

Each is a ``typing.TypedDict``: a plain dict at run time, so a loss reads ``networks["policy"]`` as before,
and a type checker knows each key a loss may read. Torch-free (types named as strings), like the rest of the
registry: a plugin author imports them for annotations, e.g. ``def make_my_loss(networks: ActorCriticNetworks,
settings, ...)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, TypedDict

if TYPE_CHECKING:
    from tensordict.nn import TensorDictModuleBase


class ActorCriticNetworks(TypedDict):
    """DDPG's, TD3's, SAC's and CrossQ's: an actor and Q-critics of (observation, action)."""

    #: the actor: a ``deterministic_policy`` network (DDPG, TD3) or a ``policy`` one (SAC, CrossQ)
    policy: TensorDictModuleBase
    #: the first critic, a ``q_value`` network (what TorchRL's losses take, making their twins from it)
    critic: TensorDictModuleBase
    #: every critic the algorithm built (one for DDPG, the twins for TD3, SAC and CrossQ)
    critics: list[TensorDictModuleBase]


class ValueActorCriticNetworks(ActorCriticNetworks):
    """IQL's: an actor, Q-critics, and a value network of the observation alone."""

    #: a ``value`` network (the expectile of the critics' values)
    value: TensorDictModuleBase


class QNetworks(TypedDict):
    """DQN's: one network of one Q-value per discrete action."""

    #: a ``q_values`` network
    q_network: TensorDictModuleBase


#: what an off-policy algorithm hands its loss
OffPolicyNetworks: TypeAlias = "ActorCriticNetworks | QNetworks"
