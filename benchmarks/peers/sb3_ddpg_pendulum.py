"""Stable-Baselines3 DDPG on Pendulum-v1: the reference point for ``benchmarks/versus_sb3.py --workload
ddpg-pendulum``.

Hyperparameters are those of ``recipes/pendulum-ddpg.toml`` (rl-baselines3-zoo's Pendulum-v1 DDPG, with
[64, 64] ReLU networks and learning from 1000 frames), so both sides do the same arithmetic on the same
number of frames. Runs standalone (one process per seed) so the harness can time the whole process.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
from sb3_common import run_peer  # sets one torch thread before SB3 builds anything
from stable_baselines3 import DDPG
from stable_baselines3.common.noise import NormalActionNoise

ENV_ID = "Pendulum-v1"


def build_model(seed: int) -> DDPG:
    """DDPG as the rlplug recipe sets it; SB3's noise sigma is on actions scaled to [-1, 1], as rlplug's is."""
    env = gym.make(ENV_ID)
    actions = env.action_space.shape[0]
    return DDPG(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        buffer_size=200_000,
        learning_starts=1000,
        batch_size=256,
        tau=0.005,
        gamma=0.98,
        train_freq=1,
        gradient_steps=1,
        action_noise=NormalActionNoise(np.zeros(actions), 0.1 * np.ones(actions)),
        policy_kwargs={"net_arch": [64, 64]},  # ReLU, SB3's default for DDPG
        seed=seed,
        device="cpu",
        verbose=0,
    )


def main(argv: list[str] | None = None) -> int:
    return run_peer(build_model, name="ddpg", env_id=ENV_ID, default_frames=20_000,
                    description=__doc__.splitlines()[0], argv=argv)


if __name__ == "__main__":
    sys.exit(main())
