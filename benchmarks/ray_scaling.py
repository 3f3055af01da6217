"""The ray runner against the local one: frames/s with 1, 2, 4, 8... workers, side by side.

    python benchmarks/ray_scaling.py                                   # both recipes, 1 and 2 workers, 3 rounds
    python benchmarks/ray_scaling.py --workers 1 2 4 8 --rounds 2      # on a machine with the cores for it
    python benchmarks/ray_scaling.py --recipes cartpole-impala-ray --frames 50000

Every run is a whole ``python -m rlplug run`` process that starts (and stops) its own local Ray instance; the
configurations alternate within each round so that drift on a shared machine hits them alike. frames/s is
frames over the training time the run reports (``summary.json``'s ``wall_time_s``: collection, updates,
evaluations; not start-up), compared with the local runner's as a ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from versus_sb3 import log, machine_lines, markdown_table, run_child, spread

RECIPES = ("cartpole-ppo", "cartpole-impala-ray")


def configurations(recipe: str, workers: list[int]) -> list[tuple[str, list[str]]]:
    """(label, --set overrides) for the local runner, then the ray runner with each worker count."""
    local = ("local", ["--set", 'runner={use="local"}'])
    return [local, *((f"ray, {n} worker{'s' * (n > 1)}",
                      ["--set", f'runner={{use="ray", workers={n}, mode="experience"}}']) for n in workers)]


def run_once(recipe: str, overrides: list[str], frames: int | None, out: Path, timeout: float) -> dict | None:
    command = [sys.executable, "-m", "rlplug", "run", f"recipes/{recipe}.toml", "--out", str(out), *overrides]
    if frames:
        command += ["--set", f"run.total_frames={frames}"]
    code, process_s, _, _ = run_child(command, out.with_suffix(".log"), timeout)
    if code:
        log(f"  FAILED ({code}): {' '.join(command)}; see {out.with_suffix('.log.stderr')}")
        return None
    summary = json.loads((out / "summary.json").read_text())
    return {"fps": summary["frames"] / summary["wall_time_s"], "train_s": summary["wall_time_s"],
            "process_s": process_s, "return": summary["eval_return_mean"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", choices=RECIPES, default=list(RECIPES))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frames", type=int, default=None, help="training frames (default: each recipe's)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds before a run is killed")
    args = parser.parse_args()
    rows, failed = [], 0
    with tempfile.TemporaryDirectory(prefix="rlplug-ray-") as scratch:
        for recipe in args.recipes:
            results: dict[str, list[dict]] = {}
            for round_ in range(args.rounds):
                for label, overrides in configurations(recipe, args.workers):
                    log(f"{recipe}, {label}, round {round_ + 1}/{args.rounds} ...")
                    out = Path(scratch) / f"{recipe}-{label.replace(', ', '-').replace(' ', '')}-{round_}"
                    result = run_once(recipe, overrides, args.frames, out, args.timeout)
                    failed += result is None
                    if result:
                        results.setdefault(label, []).append(result)
            local_fps = statistics.median(r["fps"] for r in results["local"]) if "local" in results else None
            for label, runs in results.items():
                fps = statistics.median(r["fps"] for r in runs)
                rows.append({
                    "recipe": recipe, "runner": label, "frames/s": spread([r["fps"] for r in runs], ",.0f"),
                    "vs local": f"{fps / local_fps:.2f}x" if local_fps else "-",
                    "train s": spread([r["train_s"] for r in runs], ".1f"),
                    "process s": spread([r["process_s"] for r in runs], ".1f"),
                    "eval return by round": ", ".join(f"{r['return']:.1f}" for r in runs),
                })
    print(f"```\npython benchmarks/ray_scaling.py {' '.join(sys.argv[1:])}\n```\n")
    print("\n".join(machine_lines()) + "\n")
    print(markdown_table(rows) if rows else "no run finished")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
