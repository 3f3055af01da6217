"""Stable-Baselines3 PPO on CartPole-v1: the reference point for benchmarks/ppo_cartpole.py.

Hyperparameters are rl-baselines3-zoo's tuned CartPole-v1 PPO settings, so the
comparison is against a well-tuned peer rather than a strawman. Runs standalone
(one process per seed) so the harness can time and measure the whole process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

# Pin to one intra-op thread before anything builds a tensor: the rlplug side does the
# same, and on a small shared machine extra threads only add noise.
torch.set_num_threads(1)

import gymnasium as gym  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

ENV_ID = "CartPole-v1"
EVAL_EPISODES = 10


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000, help="environment steps to train for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out", type=Path, default=None, help="where to write the result JSON")
    args = parser.parse_args(argv)

    model = build_model(args.seed)
    start = time.perf_counter()
    model.learn(total_timesteps=args.frames)
    train_wall_time_s = time.perf_counter() - start

    # A fresh env, seeded apart from the training envs, so the score is not read off
    # the training episodes.
    eval_env = Monitor(gym.make(ENV_ID))
    eval_env.reset(seed=args.seed + 10_000)
    mean_return, std_return = evaluate_policy(
        model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True
    )
    eval_env.close()

    result = {
        "frames": int(model.num_timesteps),
        "eval_return_mean": float(mean_return),
        "eval_return_std": float(std_return),
        "train_wall_time_s": round(train_wall_time_s, 3),
        "seed": args.seed,
    }
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"sb3 ppo {ENV_ID} seed={args.seed} frames={result['frames']} "
        f"train={train_wall_time_s:.1f}s eval_return={mean_return:.1f}±{std_return:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
