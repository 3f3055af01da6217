"""Stable-Baselines3 DDPG on Pendulum-v1: the reference point for ``benchmarks/versus_sb3.py --workload
ddpg-pendulum``.

Hyperparameters are those of ``recipes/pendulum-ddpg.toml`` (rl-baselines3-zoo's Pendulum-v1 DDPG, with
[64, 64] ReLU networks and learning from 1000 frames), so both sides do the same arithmetic on the same
number of frames. Runs standalone (one process per seed) so the harness can time the whole process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

# One intra-op thread, as rlplug sets it: small networks run faster so on a small CPU.
torch.set_num_threads(1)

import gymnasium as gym  # noqa: E402
from stable_baselines3 import DDPG  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.noise import NormalActionNoise  # noqa: E402

ENV_ID = "Pendulum-v1"
EVAL_EPISODES = 10


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20_000, help="environment steps to train for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out", type=Path, default=None, help="where to write the result JSON")
    args = parser.parse_args(argv)

    model = build_model(args.seed)
    start = time.perf_counter()
    model.learn(total_timesteps=args.frames)
    train_wall_time_s = time.perf_counter() - start

    eval_env = Monitor(gym.make(ENV_ID))
    eval_env.reset(seed=args.seed + 10_000)
    mean_return, std_return = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    eval_env.close()

    result = {"frames": int(model.num_timesteps), "eval_return_mean": float(mean_return),
              "eval_return_std": float(std_return), "train_wall_time_s": round(train_wall_time_s, 3),
              "seed": args.seed}
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"sb3 ddpg {ENV_ID} seed={args.seed} frames={result['frames']} "
          f"train={train_wall_time_s:.1f}s eval_return={mean_return:.1f}±{std_return:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
