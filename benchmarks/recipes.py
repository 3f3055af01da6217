"""Learning check: each shipped recipe, several seeds, final deterministic eval return against its threshold.

    python benchmarks/recipes.py                                   # every recipe with a threshold, seeds 0 1 2
    python benchmarks/recipes.py --recipes cartpole-a2c --seeds 0 1 2 3 4
    python benchmarks/recipes.py --recipes pendulum-ddpg --set env.observation_indices=[0,1] \
        --set run.total_frames=30000                             # the MLP on pendulum-ddpg-lstm's observations

Each run is a whole ``python -m rlplug run`` process; the table gives per-seed returns, the median, the wall
time and whether every seed reached the threshold, next to the published number it should be read against.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: recipe -> (threshold the issue asks for, the published reference for the same env and budget)
RECIPES = {
    "cartpole-ppo": (475, "rl-baselines3-zoo PPO, 100k steps: 500.0 +- 0.0"),
    "cartpole-ppo-kl": (475, "rl-baselines3-zoo PPO (clip), 100k steps: 500.0 +- 0.0"),
    "cartpole-a2c": (400, "rl-baselines3-zoo A2C, 500k steps: 500.0 +- 0.0"),
    "cartpole-vpg": (300, "no zoo entry; REINFORCE with a baseline"),
    "pendulum-ppo": (-300, "rl-baselines3-zoo PPO (with gSDE), 100k steps: -172.2 +- 104.2"),
    "pendulum-ddpg": (-250, "rl-baselines3-zoo DDPG, 20k steps: about -152 (issue 5)"),
    "pendulum-td3": (-250, "rl-baselines3-zoo TD3, 20k steps: -151.9 +- 90.2"),
    "pendulum-sac": (-250, "rl-baselines3-zoo SAC, 20k steps: -157.0 +- 88.7"),
    "pendulum-ddpg-lstm": (-300, "no zoo entry (velocity removed); compare the MLP DDPG on the same observations "
                                 "(the --set example above)"),
    "cartpole-dqn": (400, "rl-baselines3-zoo DQN, 50k steps: 500.0 +- 0.0"),
    "pendulum-crossq": (-250, "the CrossQ paper evaluates on MuJoCo, not Pendulum; compare pendulum-sac"),
    "pendulum-redq": (-250, "the REDQ paper evaluates on MuJoCo, not Pendulum; compare pendulum-sac"),
    "pendulum-mpo": (-250, "no zoo entry; the MPO paper evaluates on the DeepMind control suite; compare "
                           "pendulum-sac"),
    "cartpole-novel-ppo-lstm": (475, "rl-baselines3-zoo RecurrentPPO on CartPoleNoVel-v1, 100k steps: "
                                     "benchmarks/versus_sb3.py --workload ppo-lstm-cartpole-novel"),
}


def run(recipe: str, seed: int, out: Path, overrides: list[str] = ()) -> dict:
    command = [sys.executable, "-m", "rlplug", "run", str(ROOT / "recipes" / f"{recipe}.toml"), "--out", str(out),
               "--set", f"run.seed={seed}", *(item for override in overrides for item in ("--set", override))]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode:
        return {"error": result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed", "wall": wall}
    summary = json.loads((out / "summary.json").read_text())
    return {"return": summary["eval_return_mean"], "frames": summary["frames"], "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe override for every run (as rlplug run --set)")
    args = parser.parse_args()
    sets = "".join(f" --set {override}" for override in args.set)
    print(f"python benchmarks/recipes.py --recipes {' '.join(args.recipes)} --seeds {' '.join(map(str, args.seeds))}"
          f"{sets}")
    print(f"date (UTC) {datetime.now(UTC):%Y-%m-%d %H:%M}\n")
    print("| recipe | frames | eval return by seed | median | threshold | all seeds | wall s (median) | published |")
    print("|---|---|---|---|---|---|---|---|")
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        for recipe in args.recipes:
            threshold, published = RECIPES[recipe]
            results = {seed: run(recipe, seed, Path(scratch) / f"{recipe}-{seed}", args.set) for seed in args.seeds}
            returns = [r["return"] for r in results.values() if "return" in r]
            shown = ", ".join(f"{s}: {r['return']:.1f}" if "return" in r else f"{s}: error ({r['error']})"
                              for s, r in results.items())
            ok = len(returns) == len(results) and all(r >= threshold for r in returns)
            failed |= not ok
            frames = next((r["frames"] for r in results.values() if "frames" in r), "-")
            median = f"{statistics.median(returns):.1f}" if returns else "-"
            wall = statistics.median(r["wall"] for r in results.values())
            print(f"| {recipe} | {frames} | {shown} | {median} | >= {threshold} | {'yes' if ok else 'no'} "
                  f"| {wall:.0f} | {published} |", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
