"""One recipe run by two checkouts of rlplug (before and after a change), alternating, as whole processes.

    python benchmarks/checkouts.py --before /path/to/old/checkout --after . --pairs 3 --markdown
    python benchmarks/checkouts.py --before . --after . --set-after run.compile=true   # one checkout, two settings

Each run is ``python -m rlplug run RECIPE`` with ``PYTHONPATH`` set to the checkout, so both use the same
installed dependencies and differ only in rlplug's own code (and in ``--set`` options). Runs alternate
(before, after, before, ...) so that a busy machine slows both alike; the report gives medians, min-max, the
after/before ratio of medians and the range of per-pair ratios, and each run's final evaluation return.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(checkout: Path, recipe: Path, overrides: list[str], out: Path) -> dict:
    command = [sys.executable, "-m", "rlplug", "run", str(recipe), "--out", str(out)]
    for override in overrides:
        command += ["--set", override]
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": ""}
    started = time.perf_counter()
    result = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{checkout}: exit {result.returncode}: {result.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": wall, "train_s": summary["wall_time_s"], "eval": summary["eval_return_mean"]}


def commit_of(checkout: Path) -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "rlplug"], cwd=checkout, capture_output=True, text=True)
    return result.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--recipe", default="recipes/cartpole-ppo.toml")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="for both sides")
    parser.add_argument("--set-before", action="append", default=[])
    parser.add_argument("--set-after", action="append", default=[])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    sides = {"before": (args.before.resolve(), args.overrides + args.set_before),
             "after": (args.after.resolve(), args.overrides + args.set_after)}
    results: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as scratch:
        for pair in range(args.pairs):
            for name, (checkout, overrides) in sides.items():
                out = Path(scratch) / f"{name}-{pair}"
                results[name].append(run_once(checkout, checkout / args.recipe, overrides, out))
                print(f"pair {pair} {name}: {results[name][-1]}", file=sys.stderr, flush=True)
    median = {name: statistics.median(r["wall_s"] for r in runs) for name, runs in results.items()}
    pairs = [a["wall_s"] / b["wall_s"] for a, b in zip(results["after"], results["before"])]
    lines = []
    if args.markdown:
        lines += [f"`python benchmarks/checkouts.py {' '.join(sys.argv[1:])}`, "
                  f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
                  f"{os.cpu_count()} cores; before {commit_of(sides['before'][0])}, "
                  f"after {commit_of(sides['after'][0])}", "",
                  "| side | wall s median (min-max) | train s median | eval returns |", "| --- | --- | --- | --- |"]
    for name, runs in results.items():
        walls = [r["wall_s"] for r in runs]
        returns = ", ".join(f"{r['eval']:.1f}" for r in runs)
        row = (f"| {name} | {median[name]:.1f} ({min(walls):.1f}-{max(walls):.1f}) | "
               f"{statistics.median(r['train_s'] for r in runs):.1f} | {returns} |")
        lines.append(row if args.markdown else row.strip("| ").replace(" | ", "  "))
    lines.append(f"after/before: {median['after'] / median['before']:.3f} of medians, per pair "
                 f"{min(pairs):.3f}-{max(pairs):.3f}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
