"""Stable-Baselines3 SAC with gSDE on MountainCarContinuous-v0: the reference point for ``benchmarks/versus_sb3.py
--workload sac-gsde-mountaincar``.

Hyperparameters are rl-baselines3-zoo's tuned MountainCarContinuous-v0 SAC (hyperparams/sac.yml), which
``recipes/mountaincarcontinuous-sac-gsde.toml`` writes as an rlplug recipe: gSDE with log sigma from -3.67, a new
exploration matrix at each rollout of 32 steps, 32 gradient steps of 512 transitions after each, [64, 64] ReLU
networks. Runs standalone (one process per seed) so the harness can time the whole process.
"""

from __future__ import annotations

import sys

import gymnasium as gym
from sb3_common import run_peer  # sets one torch thread before SB3 builds anything
from stable_baselines3 import SAC

ENV_ID = "MountainCarContinuous-v0"


def build_model(seed: int) -> SAC:
    return SAC(
        "MlpPolicy",
        gym.make(ENV_ID),
        learning_rate=3e-4,
        buffer_size=50_000,
        batch_size=512,
        ent_coef=0.1,
        train_freq=32,
        gradient_steps=32,
        gamma=0.9999,
        tau=0.01,
        learning_starts=0,
        use_sde=True,
        policy_kwargs={"log_std_init": -3.67, "net_arch": [64, 64]},
        seed=seed,
        device="cpu",
        verbose=0,
    )


def main(argv: list[str] | None = None) -> int:
    return run_peer(build_model, name="sac-gsde", env_id=ENV_ID, default_frames=50_000,
                    description=__doc__.splitlines()[0], argv=argv)


if __name__ == "__main__":
    sys.exit(main())
