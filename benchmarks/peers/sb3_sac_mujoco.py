"""Stable-Baselines3 SAC on a MuJoCo env: the peer of ``benchmarks/suites/mujoco-100k.toml``'s SAC entries.

Hyperparameters are those of ``recipes/halfcheetah-sac.toml``, which are rl-baselines3-zoo's MuJoCo SAC settings
(SB3's SAC defaults: lr 3e-4, batch 256, tau 0.005, gamma 0.99, a 1M-transition buffer, one gradient step per env
step, [256, 256] ReLU networks, the entropy coefficient tuned from 1.0) with 10k uniformly random actions before
learning. The zoo's trained agents were made on the v3 envs; this trains on whichever ``--env-id`` names (the
suite's are v5), so the two libraries meet at the same env version, frames and settings.
"""

from __future__ import annotations

import sys

import gymnasium as gym
from sb3_common import run_peer  # sets one torch thread before SB3 builds anything
from stable_baselines3 import SAC


def build_model(seed: int, env_id: str) -> SAC:
    # the zoo's MuJoCo entries set only learning_starts; the rest are SB3's defaults, as the docstring lists them
    return SAC("MlpPolicy", gym.make(env_id), learning_starts=10_000, seed=seed, device="cpu", verbose=0)


def main(argv: list[str] | None = None) -> int:
    return run_peer(build_model, name="sac", env_id="Hopper-v5", default_frames=100_000,
                    description=__doc__.splitlines()[0], argv=argv, env_choice=True)


if __name__ == "__main__":
    sys.exit(main())
