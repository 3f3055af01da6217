"""Stable-Baselines3 PPO on CartPole-v1: the reference point for ``benchmarks/versus_sb3.py``.

Hyperparameters are rl-baselines3-zoo's tuned CartPole-v1 PPO settings, so the
comparison is against a well-tuned peer rather than a strawman. Runs standalone
(one process per seed) so the harness can time and measure the whole process.
"""

from __future__ import annotations

import sys

from sb3_common import run_peer  # sets one torch thread before SB3 builds anything
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

ENV_ID = "CartPole-v1"


def linear_schedule(initial: float):
    """Decay linearly from `initial` to 0 over training (SB3 passes progress_remaining 1 -> 0)."""

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


def build_model(seed: int) -> PPO:
    """PPO with the zoo's CartPole-v1 hyperparameters; everything else is SB3's default."""
    train_env = make_vec_env(ENV_ID, n_envs=8, seed=seed, vec_env_cls=DummyVecEnv)
    return PPO(
        "MlpPolicy",  # 64-64 tanh actor and critic, SB3 default
        train_env,
        n_steps=32,
        batch_size=256,
        n_epochs=20,
        gamma=0.98,
        gae_lambda=0.8,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        learning_rate=linear_schedule(1e-3),
        clip_range=linear_schedule(0.2),
        normalize_advantage=True,
        seed=seed,
        device="cpu",
        verbose=0,
    )


def main(argv: list[str] | None = None) -> int:
    return run_peer(build_model, name="ppo", env_id=ENV_ID, default_frames=100_000,
                    description=__doc__.splitlines()[0], argv=argv)


if __name__ == "__main__":
    sys.exit(main())
