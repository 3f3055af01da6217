"""Stable-Baselines3 SAC on Pendulum-v1: the reference point for ``benchmarks/versus_sb3.py --workload
sac-pendulum``.

Hyperparameters are those of ``recipes/pendulum-sac.toml`` (rl-baselines3-zoo's Pendulum-v1 SAC with [64, 64]
ReLU networks: lr 1e-3, batch 256, a 1M-transition buffer, one gradient step per env step from step 100, the
entropy coefficient tuned from 1.0 towards -1), so both sides do the same arithmetic on the same number of
frames. SB3 acts at random before learning_starts, the recipe from its policy (random_frames = 0): 100 frames of
20k. Runs standalone (one process per seed) so the harness can time the whole process.
"""

from __future__ import annotations

import sys

import gymnasium as gym
from sb3_common import run_peer  # sets one torch thread before SB3 builds anything
from stable_baselines3 import SAC

ENV_ID = "Pendulum-v1"


def build_model(seed: int) -> SAC:
    return SAC(
        "MlpPolicy",
        gym.make(ENV_ID),
        learning_rate=1e-3,
        buffer_size=1_000_000,
        learning_starts=100,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto_1.0",
        policy_kwargs={"net_arch": [64, 64]},  # ReLU, SB3's default for SAC
        seed=seed,
        device="cpu",
        verbose=0,
    )


def main(argv: list[str] | None = None) -> int:
    return run_peer(build_model, name="sac", env_id=ENV_ID, default_frames=20_000,
                    description=__doc__.splitlines()[0], argv=argv)


if __name__ == "__main__":
    sys.exit(main())
