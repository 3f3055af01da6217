"""Seeds trained together (``--seeds 0-N --batched``) against one seed, and against SB3 training one seed.

Every run is a whole child process (start-up, imports, training, evaluations), as in ``versus_sb3.py``, whose
child runner and SB3 peer this reuses. One round runs, back to back: rlplug one seed, SB3 one seed, then
``--batched`` with each seed count asked; rounds repeat so drift on a shared machine hits all alike, and each
batched run is reported as a ratio to the one-seed runs of its own round.

    python benchmarks/batched_seeds.py                         # cartpole-ppo, 1 2 4 8 16 seeds, one round
    python benchmarks/batched_seeds.py --counts 8 --rounds 3 --markdown
    python benchmarks/batched_seeds.py --sequential 8          # also plain --seeds 0-7, one after another
    python benchmarks/batched_seeds.py --workload sac-pendulum --counts 8 --no-sb3   # no SB3 peer for SAC
    python benchmarks/batched_seeds.py --workload dqn-cartpole --counts 8 --no-sb3   # nor for DQN
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from versus_sb3 import REPO_ROOT, WORKLOADS, Workload, child_command, log, run_child  # noqa: E402

#: workloads measured here against one seed of rlplug only (no SB3 peer: run with --no-sb3)
OWN_WORKLOADS = {
    # -250: issue 5's threshold for the Pendulum recipes at 20k frames; evaluated once, at the end
    "sac-pendulum": Workload("recipes/pendulum-sac.toml", "", 20_000, -250.0, same_work=("eval.every_frames=0",)),
    # 400: what BENCHMARKS.md asks of every seed of the DQN recipe at its 50k frames; evaluated once, at the end
    "dqn-cartpole": Workload("recipes/cartpole-dqn.toml", "", 50_000, 400.0, same_work=("eval.every_frames=0",)),
}


def batched_run(workload: Workload, seeds: int, frames: int | None, out: Path, timeout: float,
                batched: bool = True) -> dict:
    """``rlplug run RECIPE --seeds 0-(seeds-1) [--batched]``: wall time and each seed's final eval return (the
    same work as the one-seed run: the workload's overrides)."""
    cmd = [sys.executable, "-m", "rlplug", "run", workload.recipe, "--seeds", f"0-{seeds - 1}", "--out", str(out)]
    cmd += ["--batched"] if batched else []
    cmd += ["--set", f"run.total_frames={frames}"] if frames else []
    cmd += [arg for override in workload.same_work for arg in ("--set", override)]
    code, wall, rss, cpu = run_child(cmd, out.with_suffix(".log"), timeout)
    returns = {}
    for seed in range(seeds):
        try:
            returns[seed] = json.loads((out / f"seed-{seed}" / "summary.json").read_text())["eval_return_mean"]
        except (OSError, ValueError, KeyError):
            returns[seed] = None
    return {"ok": code == 0, "wall_s": wall, "cpu_s": cpu, "rss_mib": rss, "returns": returns}


def single_run(workload, system: str, frames: int | None, out: Path, timeout: float) -> dict:
    cmd, result = child_command(workload, system, 0, frames, out)
    code, wall, rss, cpu = run_child(cmd, out.with_suffix(".log") if system == "rlplug" else out, timeout)
    try:
        eval_return = json.loads(result.read_text())["eval_return_mean"]
    except (OSError, ValueError, KeyError):
        eval_return = None
    return {"ok": code == 0, "wall_s": wall, "cpu_s": cpu, "rss_mib": rss, "returns": {0: eval_return}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted({**WORKLOADS, **OWN_WORKLOADS}), default="ppo-cartpole")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="seed counts, batched")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--frames", type=int, help="run.total_frames (default: the recipe's)")
    parser.add_argument("--sequential", type=int, nargs="*", default=[], help="seed counts run one after another")
    parser.add_argument("--no-sb3", action="store_true")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    workload = {**WORKLOADS, **OWN_WORKLOADS}[args.workload]
    if args.workload in OWN_WORKLOADS and not args.no_sb3:
        parser.error(f"{args.workload} has no SB3 peer: add --no-sb3")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlplug-batched-") as tmp:
        for round_ in range(args.rounds):
            work = Path(tmp) / f"round-{round_}"
            work.mkdir()
            log(f"round {round_ + 1}/{args.rounds}: one seed")
            one = single_run(workload, "rlplug", args.frames, work / "one", args.timeout)
            sb3 = None if args.no_sb3 else single_run(workload, "sb3", args.frames, work / "sb3", args.timeout)
            rows.append(("rlplug, 1 seed alone", one, one, sb3))
            if sb3:
                rows.append(("SB3, 1 seed", sb3, one, sb3))
            for count in args.counts:
                log(f"round {round_ + 1}/{args.rounds}: {count} seeds batched")
                rows.append((f"rlplug, {count} seeds --batched",
                             batched_run(workload, count, args.frames, work / f"b{count}", args.timeout),
                             one, sb3))
            for count in args.sequential:
                log(f"round {round_ + 1}/{args.rounds}: {count} seeds one after another")
                rows.append((f"rlplug, {count} seeds --seeds (one after another)",
                             batched_run(workload, count, args.frames, work / f"s{count}", args.timeout,
                                         batched=False), one, sb3))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                            text=True).stdout.strip()
    print(f"{workload.recipe}, {args.frames or 'recipe'} frames; {dt.datetime.now().isoformat(timespec='minutes')}, "
          f"commit {commit}, {platform.processor() or platform.machine()}, {args.rounds} round(s)\n")
    header = ["run", "wall s", "CPU s", "/ 1 seed", "/ SB3 1 seed", "per seed s", "eval returns", "all >= solved"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for name, result, one, sb3 in rows:
        returns = [r for r in result["returns"].values()]
        count = len(returns)
        solved = all(r is not None and r >= workload.solved_return for r in returns)
        shown = ", ".join("-" if r is None else f"{r:.0f}" for r in returns)
        ratio_sb3 = f"{result['wall_s'] / sb3['wall_s']:.2f}x" if sb3 else "-"
        if count > 8:
            known = [r or -1e9 for r in returns]
            shown = f"min {min(known):.0f}, median {statistics.median(known):.0f}"
        print(f"| {name} | {result['wall_s']:.1f} | {result['cpu_s']:.1f} | {result['wall_s'] / one['wall_s']:.2f}x | "
              f"{ratio_sb3} | {result['wall_s'] / count:.1f} | {shown} | "
              f"{'yes' if solved and result['ok'] else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
