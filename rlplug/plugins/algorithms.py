"""Built-in algorithms, each registered from its config dataclass: the dataclass's fields are the
algorithm's recipe table (see :func:`rlplug.algorithms.config.factory_for`)."""

from __future__ import annotations

import rlplug
from rlplug.algorithms.config import A2CConfig, PPOConfig, PPOKLConfig, SurrogateConfig, VPGConfig, factory_for
from rlplug.algorithms.offpolicy_config import DDPGConfig, DQNConfig, SACConfig, TD3Config, offpolicy_factory


@rlplug.hookimpl
def rlplug_register_algorithms(register):
    register("ppo", factory_for(PPOConfig, "rlplug.algorithms.ppo:PPO"))
    register("ppo-kl", factory_for(PPOKLConfig, "rlplug.algorithms.ppo:PPOKL"), aliases=("ppo_kl",))
    register("a2c", factory_for(A2CConfig, "rlplug.algorithms.pg:A2C"))
    register("vpg", factory_for(VPGConfig, "rlplug.algorithms.pg:VPG"), aliases=("reinforce",))
    register("surrogate", factory_for(SurrogateConfig, "rlplug.algorithms.pg:Surrogate"))
    register("ddpg", offpolicy_factory(DDPGConfig, "rlplug.algorithms.ddpg:DDPG"))
    register("td3", offpolicy_factory(TD3Config, "rlplug.algorithms.td3:TD3"))
    register("sac", offpolicy_factory(SACConfig, "rlplug.algorithms.sac:SAC"))
    register("dqn", offpolicy_factory(DQNConfig, "rlplug.algorithms.dqn:DQN"))
