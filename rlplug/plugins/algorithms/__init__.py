"""Built-in algorithms, each registered from its config dataclass (the dataclass's fields are the algorithm's
recipe table; see :func:`rlplug.plugins.algorithms.common.factory_for`).

- ``onpolicy/``: collect a batch, then learn from it over epochs of minibatches: ``ppo``, ``ppo-kl``, ``a2c``,
  ``vpg``, ``surrogate``, and ``impala`` (the same update, V-trace targets, fed by asynchronous Ray workers);
- ``offpolicy/``: store transitions in a replay buffer, learn from samples: ``ddpg``, ``td3``, ``sac``, ``dqn``.
"""

from __future__ import annotations

from rlplug.plugins.algorithms.common import REPLAY_CONTEXT, factory_for
from rlplug.plugins.algorithms.offpolicy.config import DDPGConfig, DQNConfig, REDQConfig, SACConfig, TD3Config
from rlplug.plugins.algorithms.onpolicy.config import (
    A2CConfig,
    ImpalaConfig,
    PPOConfig,
    PPOKLConfig,
    SurrogateConfig,
    VPGConfig,
)
from rlplug.registry.hookspecs import hookimpl

ONPOLICY = "rlplug.plugins.algorithms.onpolicy"
OFFPOLICY = "rlplug.plugins.algorithms.offpolicy"


@hookimpl
def rlplug_register_algorithms(register):
    register("ppo", factory_for(PPOConfig, f"{ONPOLICY}.ppo:PPO"))
    register("ppo-kl", factory_for(PPOKLConfig, f"{ONPOLICY}.ppo:PPOKL"), aliases=("ppo_kl",))
    register("a2c", factory_for(A2CConfig, f"{ONPOLICY}.pg:A2C"))
    register("vpg", factory_for(VPGConfig, f"{ONPOLICY}.pg:VPG"), aliases=("reinforce",))
    register("surrogate", factory_for(SurrogateConfig, f"{ONPOLICY}.pg:Surrogate"))
    register("impala", factory_for(ImpalaConfig, f"{ONPOLICY}.impala:IMPALA"))
    register("ddpg", factory_for(DDPGConfig, f"{OFFPOLICY}.ddpg:DDPG", REPLAY_CONTEXT))
    register("td3", factory_for(TD3Config, f"{OFFPOLICY}.td3:TD3", REPLAY_CONTEXT))
    register("sac", factory_for(SACConfig, f"{OFFPOLICY}.sac:SAC", REPLAY_CONTEXT))
    register("dqn", factory_for(DQNConfig, f"{OFFPOLICY}.dqn:DQN", REPLAY_CONTEXT))
    register("redq", factory_for(REDQConfig, f"{OFFPOLICY}.redq:REDQ", REPLAY_CONTEXT))
