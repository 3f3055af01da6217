"""Built-in algorithms, each registered from its config dataclass (the dataclass's fields are the algorithm's
recipe table; see :func:`rlplug.plugins.algorithms.common.factory_for`) and its class, named by a typed function
that imports it when built (so mypy checks the reference and listing stays torch-free).

- ``onpolicy/``: collect a batch, then learn from it over epochs of minibatches: ``ppo``, ``ppo-kl``, ``a2c``,
  ``vpg``, ``surrogate``, and ``impala`` (the same update, V-trace targets, fed by asynchronous Ray workers);
- ``offpolicy/``: store transitions in a replay buffer, learn from samples: ``ddpg``, ``td3``, ``sac``,
  ``crossq``, ``redq``, ``mpo``, ``dqn``; each one's home module holds its class and its losses, registered
  here too (:mod:`~rlplug.plugins.algorithms.offpolicy.loss_factories`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlplug.plugins.algorithms.common import factory_for
from rlplug.plugins.algorithms.onpolicy.config import (
    A2CConfig,
    ImpalaConfig,
    PPOConfig,
    PPOKLConfig,
    SurrogateConfig,
    VPGConfig,
)
from rlplug.registry.hookspecs import hookimpl

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.onpolicy.impala import IMPALA
    from rlplug.plugins.algorithms.onpolicy.pg import A2C, VPG, Surrogate
    from rlplug.plugins.algorithms.onpolicy.ppo import PPO, PPOKL


# -- the classes, imported when an algorithm is built ----------------------------------------------------

def ppo() -> type[PPO]:
    from rlplug.plugins.algorithms.onpolicy.ppo import PPO
    return PPO


def ppo_kl() -> type[PPOKL]:
    from rlplug.plugins.algorithms.onpolicy.ppo import PPOKL
    return PPOKL


def a2c() -> type[A2C]:
    from rlplug.plugins.algorithms.onpolicy.pg import A2C
    return A2C


def vpg() -> type[VPG]:
    from rlplug.plugins.algorithms.onpolicy.pg import VPG
    return VPG


def surrogate() -> type[Surrogate]:
    from rlplug.plugins.algorithms.onpolicy.pg import Surrogate
    return Surrogate


def impala() -> type[IMPALA]:
    from rlplug.plugins.algorithms.onpolicy.impala import IMPALA
    return IMPALA


@hookimpl
def rlplug_register_algorithms(register):
    register("ppo", factory_for(PPOConfig, ppo))
    register("ppo-kl", factory_for(PPOKLConfig, ppo_kl), aliases=("ppo_kl",))
    register("a2c", factory_for(A2CConfig, a2c))
    register("vpg", factory_for(VPGConfig, vpg), aliases=("reinforce",))
    register("surrogate", factory_for(SurrogateConfig, surrogate))
    register("impala", factory_for(ImpalaConfig, impala))

