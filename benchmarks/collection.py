"""Collection speed: rlplug's collection path against gymnasium stepping the same envs on its own.

rlplug's side is exactly what the training loop runs: the recipe's env and MLP policy built through the
registry, :class:`rlplug.core.collect.Collector` sampling actions and recording every field the update reads
(observations, actions, log-probabilities, next observations, rewards, done flags, episode returns).
gymnasium's side is ``SyncVectorEnv`` with random actions and nothing recorded: the floor.
The two alternate, several rounds each, and the table gives medians and the ratio.

    python benchmarks/collection.py --envs 1 8 64 256 --frames 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from rlplug import recipe as recipes  # noqa: E402
from rlplug.core.collect import Collector  # noqa: E402
from rlplug.run.trainer import Run  # noqa: E402

CANONICAL = os.path.join(os.path.dirname(__file__), "..", "recipes", "cartpole-ppo.toml")


def rlplug_fps(num_envs: int, frames: int) -> float:
    steps = max(1, 256 // num_envs)
    recipe = recipes.load(CANONICAL, [f"env.num_envs={num_envs}", f"algorithm.frames_per_batch={steps * num_envs}"])
    run = Run.build(recipe, run_dir=_unused_dir())
    collector = Collector(run.env, run.algorithm.policy, steps * num_envs, seed=0)
    collector.collect()  # warm-up
    collected, started = 0, time.perf_counter()
    while collected < frames:
        collected += collector.collect().numel()
    return collected / (time.perf_counter() - started)


def gymnasium_fps(num_envs: int, frames: int) -> float:
    env = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(64)]
    collected, started, i = 0, time.perf_counter(), 0
    while collected < frames:
        env.step(actions[i % 64])
        collected += num_envs
        i += 1
    return collected / (time.perf_counter() - started)


def _unused_dir():
    import pathlib
    import tempfile

    return pathlib.Path(tempfile.mkdtemp()) / "run"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'envs':>5} {'rlplug fps':>12} {'gymnasium fps':>14} {'ratio':>7}  "
          f"(medians of {args.rounds} alternating rounds)")
    for num_envs in args.envs:
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(rlplug_fps(num_envs, args.frames))
            theirs.append(gymnasium_fps(num_envs, args.frames))
        ratio = statistics.median(np.divide(ours, theirs))
        print(f"{num_envs:>5} {statistics.median(ours):>12,.0f} {statistics.median(theirs):>14,.0f} {ratio:>7.2f}")


if __name__ == "__main__":
    main()
