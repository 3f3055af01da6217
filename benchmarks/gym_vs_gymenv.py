"""The canonical recipe with rlplug's ``gym`` env against TorchRL's ``GymEnv``, through the same collector.

    python benchmarks/gym_vs_gymenv.py --pairs 3 --markdown
    python benchmarks/gym_vs_gymenv.py --sides gym,gym-tensordicts,GymEnv --set run.total_frames=20000

Sides (each a whole training run of RECIPE, the local runner's collector, in a process of its own):

- ``gym``: rlplug's ``gym`` env as the recipe builds it; it offers the array step, so the collector steps it
  with numpy arrays (``rlplug.registry.protocols.Env``);
- ``gym-tensordicts``: the same env with the array step hidden: the collector's TensorDict road on it;
- ``GymEnv``: TorchRL's ``GymEnv(id, num_envs=...)`` over the recipe's gymnasium id, the TensorDict road.

The algorithm, its networks and the evaluation env are the recipe's on every side: only the training env and
so the road differ. Sides alternate (a, b, c, a, b, c...) so that a busy machine slows all alike; the report
gives each side's median wall time of training (the run's own ``wall_time_s``), min-max, its ratio to the
first side's median, and the final evaluation returns.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("gym", "gym-tensordicts", "GymEnv")


class WithoutArraySteps:
    """An env seen without its array step: everything else is the env's own."""

    supports_tensor_steps = False

    def __init__(self, env):
        self.__dict__["_env"] = env

    def __getattr__(self, name):
        if name in ("reset_arrays", "step_arrays"):
            raise AttributeError(name)
        return getattr(self._env, name)


def train_one(side: str, recipe_path: str, overrides: list[str], out: Path) -> dict:
    """One run of ``side`` in this process; its summary."""
    from rlplug import recipe as recipes
    from rlplug.run.trainer import Run

    recipe = recipes.load(recipe_path, overrides)
    run = Run.build(recipe, out)
    if side != "gym":
        if side == "GymEnv":
            from torchrl.envs import GymEnv

            params = recipe.env.params
            env = GymEnv(params["id"], num_envs=params.get("num_envs", 1), device=recipe.run.device)
        else:
            env = WithoutArraySteps(run.env)
        runner = recipe.runner.build(device=recipe.run.device, seed=recipe.run.seed)
        run.env, run.collector = env, runner.collector(env, run.algorithm.policy, run.algorithm.frames_per_batch,
                                                       seed=recipe.run.seed, recipe=recipe, algorithm=run.algorithm)
    assert (run.collector.array_actor is not None) == (side == "gym"), side
    return run.train()


def run_side(side: str, recipe: str, overrides: list[str], out: Path) -> dict:
    command = [sys.executable, __file__, "--one", side, "--recipe", recipe, "--out", str(out)]
    for override in overrides:
        command += ["--set", override]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{side}: exit {result.returncode}: {result.stderr[-2000:]}")
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    return {"train_s": summary["wall_time_s"], "eval": summary["eval_return_mean"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/cartpole-ppo.toml")
    parser.add_argument("--sides", default="gym,GymEnv", help=f"comma-separated, from {', '.join(SIDES)}")
    parser.add_argument("--pairs", type=int, default=3, help="rounds of every side")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--one", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a worker: one run, its summary as the last line of stdout
        summary = train_one(args.one, args.recipe, args.overrides, args.out)
        print(json.dumps({k: summary.get(k) for k in ("wall_time_s", "eval_return_mean", "frames")}))
        return 0

    sides = [side.strip() for side in args.sides.split(",")]
    unknown = [side for side in sides if side not in SIDES]
    if unknown:
        parser.error(f"unknown side {unknown[0]!r}; sides: {', '.join(SIDES)}")
    results: dict[str, list[dict]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.pairs):
            for side in sides:
                result = run_side(side, args.recipe, args.overrides, Path(scratch) / f"{side}-{round_}")
                results[side].append(result)
                print(f"round {round_ + 1} {side}: {result['train_s']:.1f} s, eval {result['eval']:.1f}",
                      file=sys.stderr)
    first = statistics.median(r["train_s"] for r in results[sides[0]])
    rows = []
    for side in sides:
        times = [r["train_s"] for r in results[side]]
        median = statistics.median(times)
        rows.append((side, f"{median:.1f}", f"{min(times):.1f}-{max(times):.1f}", f"{median / first:.2f}x",
                     ", ".join(f"{r['eval']:.0f}" for r in results[side])))
    header = ("side", "median train s", "min-max", f"vs {sides[0]}", "eval returns")
    overrides = " ".join(f"--set {o}" for o in args.overrides)
    print(f"{args.recipe} {overrides} x{args.pairs}, {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}")
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        for row in (header, *rows):
            print("  ".join(f"{cell:>16}" for cell in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
