"""What the Stable-Baselines3 peers share: the command line, timing, a final evaluation and the result JSON.

Imported by the peer scripts next to it (run as scripts, so this folder is on ``sys.path``); they only say
how to build their model.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

# One intra-op thread before anything builds a tensor, as rlplug sets it: small networks run faster so on a
# small CPU, and extra threads only add noise on a shared machine.
torch.set_num_threads(1)

import gymnasium as gym  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402

EVAL_EPISODES = 10


def run_peer(build_model: Callable[..., object], *, name: str, env_id: str, default_frames: int,
             description: str, argv: list[str] | None = None,
             make_eval_env: Callable[[object], object] | None = None, env_choice: bool = False) -> int:
    """Train ``build_model(seed)`` for ``--frames``, evaluate it deterministically over 10 episodes of a fresh
    env (seeded apart from the training envs), and write ``--json-out``. ``make_eval_env(model)``: that env,
    where ``gym.make(env_id)`` is not it (a wrapped env, or one that shares the model's normalisation).
    ``env_choice``: a peer of one set of settings for several envs takes ``--env-id`` (default ``env_id``) and
    is built as ``build_model(seed, env_id)``, its evaluation env as ``make_eval_env(model, env_id)``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--frames", type=int, default=default_frames, help="environment steps to train for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out", type=Path, default=None, help="where to write the result JSON")
    if env_choice:
        parser.add_argument("--env-id", default=env_id, help="the gymnasium id to train and evaluate on")
    args = parser.parse_args(argv)

    if env_choice:
        env_id = args.env_id
        model = build_model(args.seed, env_id)
    else:
        model = build_model(args.seed)
    start = time.perf_counter()
    model.learn(total_timesteps=args.frames)
    train_wall_time_s = time.perf_counter() - start

    if make_eval_env is None:
        eval_env = Monitor(gym.make(env_id))
    else:
        eval_env = make_eval_env(model, env_id) if env_choice else make_eval_env(model)
    if hasattr(eval_env, "num_envs"):  # a VecEnv: seeded for its next reset
        eval_env.seed(args.seed + 10_000)
    else:
        eval_env.reset(seed=args.seed + 10_000)
    mean_return, std_return = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    eval_env.close()

    result = {"frames": int(model.num_timesteps), "eval_return_mean": float(mean_return),
              "eval_return_std": float(std_return), "train_wall_time_s": round(train_wall_time_s, 3),
              "seed": args.seed}
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"sb3 {name} {env_id} seed={args.seed} frames={result['frames']} "
          f"train={train_wall_time_s:.1f}s eval_return={mean_return:.1f}±{std_return:.1f}")
    return 0


def frozen_normalisation(model, make_env: Callable[[], gym.Env]) -> VecNormalize:
    """An evaluation env: ``make_env()`` with its observations normalised by ``model``'s training statistics,
    frozen, and its rewards as the env gives them (as rlplug evaluates a run that normalises observations)."""
    env = VecNormalize(DummyVecEnv([lambda: Monitor(make_env())]), norm_obs=True, norm_reward=False, training=False)
    env.obs_rms = model.get_vec_normalize_env().obs_rms
    return env
