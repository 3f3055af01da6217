"""One gradient step of an off-policy algorithm under several losses, in one process: each variant's algorithm
built from the same recipe and filled with the same number of collected frames, then timed in rounds that
alternate the variants (load drift on a shared host hits all alike; read the ratios). A step is what a run's
update does per sample: the loss, one backward, the learners' optimiser steps, the targets moved.

    python benchmarks/loss_step.py                                        # pendulum-sac: sac-loss, SACLoss
    python benchmarks/loss_step.py --losses sac-loss 'SACLoss, deactivate_vmap = true' SACLoss
    python benchmarks/loss_step.py --recipe pendulum-td3 --losses td3-loss TD3Loss
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from versus_sb3 import REPO_ROOT, machine_lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="pendulum-sac")
    parser.add_argument("--losses", nargs="+", default=["sac-loss", "SACLoss"],
                        help="each a loss name, optionally with its keys: 'SACLoss, deactivate_vmap = true'")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50, help="timed steps per variant and round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--compile", action="store_true", help="run.compile = true (one variant per process: "
                        "torch's recompile limit is shared by the losses of one class)")
    args = parser.parse_args(argv)

    from rlplug.core.training import MetricMean
    from rlplug.recipe import load
    from rlplug.run.trainer import Run

    algorithms, samples = {}, {}
    with tempfile.TemporaryDirectory() as work:
        for index, loss in enumerate(args.losses):
            name, _, keys = loss.partition(",")
            table = f'{{use = "{name.strip()}"{", " + keys.strip() if keys else ""}}}'
            overrides = [f"algorithm.loss={table}", "run.seed=0", f"run.compile={str(args.compile).lower()}"]
            run = Run.build(load(REPO_ROOT / "recipes" / f"{args.recipe}.toml", overrides), Path(work) / str(index))
            algorithm = run.algorithm
            while len(algorithm.replay) < 4 * args.batch_size:
                algorithm.store(run.collector.collect())
            algorithms[loss] = algorithm
            samples[loss] = [algorithm.replay.sample(args.batch_size) for _ in range(args.steps)]
        times: dict[str, list[float]] = {loss: [] for loss in algorithms}
        for _ in range(args.rounds):
            for loss, algorithm in algorithms.items():
                metrics = MetricMean()
                for sample in samples[loss][:5]:  # warm (the first compiles)
                    algorithm.gradient_step(sample.clone(), metrics)
                start = time.perf_counter()
                for sample in samples[loss]:
                    algorithm.gradient_step(sample.clone(), metrics)
                times[loss].append((time.perf_counter() - start) / args.steps * 1e3)
    first = args.losses[0]
    print("\n".join(machine_lines()))
    print(f"- {args.recipe}, batch {args.batch_size}, {args.steps} steps x {args.rounds} rounds, alternating"
          f"{', compiled' if args.compile else ''}\n")
    print(f"| loss | ms per step (median, min-max) | per step / {first}'s (median of paired ratios) |\n|---|---|---|")
    for loss, values in times.items():
        ratio = statistics.median(t / f for t, f in zip(values, times[first]))
        print(f"| {loss} | {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
