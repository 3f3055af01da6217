"""TorchRL's off-policy losses against rlplug's own, per frame, on the same recipe: whole ``python -m rlplug run``
processes alternating (rlplug's loss, TorchRL's, rlplug's, ...), so that drift on a shared machine hits both
alike; read the ratios. Frames/s is the run's frames over its own training wall time (``summary.json``), so
interpreter start-up and imports are left out; every run evaluates once, at the end.

    python benchmarks/offpolicy_losses.py                                   # pendulum-sac: sac-loss vs SACLoss
    python benchmarks/offpolicy_losses.py --recipe pendulum-td3 --losses td3-loss TD3Loss --frames 3000
    python benchmarks/offpolicy_losses.py --set run.compile=true --frames 6000        # both compiled
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from versus_sb3 import REPO_ROOT, log, machine_lines


def one_run(recipe: str, loss: str, seed: int, frames: int, out: Path, sets: list[str]) -> dict:
    """One whole run with ``loss`` (and the ``--set`` values ``sets``); its summary."""
    cmd = [sys.executable, "-m", "rlplug", "run", f"recipes/{recipe}.toml", "--out", str(out),
           "--set", f"run.seed={seed}", "--set", f"run.total_frames={frames}", "--set", "eval.every_frames=0",
           "--set", "loggers=[]", "--set", f'algorithm.loss={{use="{loss}"}}']
    for value in sets:
        cmd += ["--set", value]
    subprocess.run(cmd, cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="pendulum-sac")
    parser.add_argument("--losses", nargs=2, default=["sac-loss", "SACLoss"], metavar=("OURS", "TORCHRL"))
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--rounds", type=int, default=2, help="pairs per seed")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe value for both losses' runs (run.compile=true); repeatable")
    args = parser.parse_args(argv)
    rates: dict[str, list[float]] = {loss: [] for loss in args.losses}
    pairs = []
    with tempfile.TemporaryDirectory() as work:
        for seed in args.seeds:
            for round_ in range(args.rounds):
                pair = {}
                for loss in args.losses:
                    summary = one_run(args.recipe, loss, seed, args.frames, Path(work) / f"{loss}-{seed}-{round_}",
                                      args.sets)
                    pair[loss] = summary["frames"] / summary["wall_time_s"]
                    rates[loss].append(pair[loss])
                    log(f"seed {seed} round {round_} {loss}: {pair[loss]:.1f} frames/s")
                pairs.append(pair[args.losses[0]] / pair[args.losses[1]])
    ours, theirs = args.losses
    print("\n".join(machine_lines()))
    sets = "".join(f", --set {value}" for value in args.sets)
    print(f"- {args.recipe}, {args.frames} frames, seeds {args.seeds}, {args.rounds} pairs each, alternating{sets}\n")
    print("| loss | frames/s (median, min-max) |\n|---|---|")
    for loss, values in rates.items():
        print(f"| {loss} | {statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f}) |")
    print(f"\n{theirs} is {statistics.median(pairs):.2f}x slower per frame than {ours} (median of paired "
          f"ratios, {min(pairs):.2f}-{max(pairs):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
