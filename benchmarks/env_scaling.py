"""Frames/s of the ``gym`` env's copies stepped in this process (``sync``) and in worker processes (``async``).

    python benchmarks/env_scaling.py --envs halfcheetah,breakout --copies 1,2 --markdown
    python benchmarks/env_scaling.py --envs breakout --copies 1,2,4,8,16 --steps 2000

For each env and number of copies N, one env of N copies is built as its recipe's ``[env]`` table says
(``recipes/halfcheetah-ppo.toml`` for HalfCheetah-v5, ``recipes/breakout-ppo.toml`` for Breakout: its whole
Atari pipeline) with ``vectorization`` set to each side, and stepped with uniformly random actions on the array
road (``step_arrays``, what the collector calls) for ``--steps`` vector steps after a warm-up: frames/s is
N * steps / seconds, the env alone, no policy. Sides alternate (sync, async, sync, async...) over ``--repeats``
so that a busy machine slows both; the report gives each side's median and async/sync.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {"halfcheetah": ROOT / "recipes" / "halfcheetah-ppo.toml", "breakout": ROOT / "recipes" / "breakout-ppo.toml"}


def build(name: str, copies: int, vectorization: str):
    """The recipe's env with ``copies`` copies, in this process or in worker processes."""
    from rlplug import recipe as recipes

    table = tomllib.loads(RECIPES[name].read_text())["env"]
    data = {"env": {**table, "num_envs": copies, "vectorization": vectorization}, "algorithm": {"use": "ppo"}}
    env_component = recipes.validate(data, file=str(RECIPES[name])).env
    from rlplug.core.envs import build_env

    return build_env(env_component, device="cpu")


def frames_per_second(name: str, copies: int, vectorization: str, steps: int, warmup: int = 50) -> float:
    env = build(name, copies, vectorization)
    try:
        space = env.stage.action_space
        space.seed(0)
        actions = [space.sample() for _ in range(64)]
        env.reset_arrays(seed=0)
        for i in range(warmup):
            env.step_arrays(actions[i % 64])
        start = time.perf_counter()
        for i in range(steps):
            env.step_arrays(actions[i % 64])
        return copies * steps / (time.perf_counter() - start)
    finally:
        env.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="halfcheetah,breakout")
    parser.add_argument("--copies", default="1,2", help="numbers of copies (= worker processes for async)")
    parser.add_argument("--steps", type=int, default=1000, help="vector steps timed per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("MUJOCO_GL", "disable")
    from rlplug.core.process import set_compute_threads

    set_compute_threads(1)
    rows = []
    for name in args.envs.split(","):
        for copies in (int(c) for c in args.copies.split(",")):
            measured = {"sync": [], "async": []}
            for _ in range(args.repeats):
                for side in measured:
                    measured[side].append(frames_per_second(name, copies, side, args.steps))
            sync, in_workers = (statistics.median(measured[side]) for side in ("sync", "async"))
            rows.append((name, copies, sync, in_workers))
            print(f"{name} x{copies}: sync {sync:,.0f} frames/s, async {in_workers:,.0f} frames/s "
                  f"({in_workers / sync:.2f}x)", file=sys.stderr, flush=True)
    if args.markdown:
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores; python {platform.python_version()}; "
              f"{args.steps} vector steps x {args.repeats} repeats, medians\n")
        print("| env | copies (= worker processes) | sync frames/s | async frames/s | async / sync |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, copies, sync, in_workers in rows:
            print(f"| {name} | {copies} | {sync:,.0f} | {in_workers:,.0f} | {in_workers / sync:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
