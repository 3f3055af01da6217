"""rlplug vs Stable-Baselines3 on the same work, measured side by side.

Workloads: ``ppo-cartpole`` (the canonical recipe against SB3 PPO with the same rl-baselines3-zoo
hyperparameters), ``ddpg-pendulum`` (``recipes/pendulum-ddpg.toml`` against SB3 DDPG with the recipe's
hyperparameters), ``sac-pendulum`` (``recipes/pendulum-sac.toml`` against SB3 SAC with the recipe's
hyperparameters) and ``dqn-cartpole`` (``recipes/cartpole-dqn.toml`` against SB3 DQN with the zoo's settings the
recipe starts from) and ``ppo-lstm-cartpole-novel`` (``recipes/cartpole-novel-ppo-lstm.toml`` against
sb3-contrib's RecurrentPPO with the recipe's hyperparameters) and ``sac-gsde-mountaincar``
(``recipes/mountaincarcontinuous-sac-gsde.toml`` against SB3's SAC with gSDE and the zoo's settings).
``ppo-cartpole`` has a third column, the eager
floor: ``benchmarks/peers/eager_ppo_cartpole.py``, a single-file PPO in plain eager PyTorch with the recipe's
hyperparameters (what a careful user writes by hand), so the ratios say what rlplug's layers cost over plain torch
as well as over SB3. Each training run is a whole child process, so
the numbers include interpreter start-up, imports and evaluation: what a user waits for. The runs alternate
(rlplug, sb3, rlplug, sb3, ...) so that drift on a shared, noisy machine hits every
system alike, and results are reported as medians with min-max and as ratios
rather than as absolute times.

    python benchmarks/versus_sb3.py                      # ppo-cartpole, seeds 0 1 2, recipe defaults
    python benchmarks/versus_sb3.py --workload ddpg-pendulum --markdown
    python benchmarks/versus_sb3.py --frames 20000 --only sb3
    python benchmarks/versus_sb3.py --repeats 3 --markdown
    python benchmarks/versus_sb3.py --workload ppo-cartpole --seeds 0 1 --only rlplug eager
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    recipe: str
    peer_script: str
    peer_default_frames: int  # the recipe's total_frames
    solved_return: float  # the return every run should reach
    #: --set overrides that make rlplug do the peer's work, no more (never hyperparameters)
    same_work: tuple[str, ...] = ()
    #: a single-file eager PyTorch run of the same hyperparameters (the "eager" system), where there is one
    floor_script: str | None = None

    def systems(self) -> tuple[str, ...]:
        """rlplug, its eager floor where the workload has one, SB3: the order each seed's runs alternate in."""
        return ("rlplug", "eager", "sb3") if self.floor_script else ("rlplug", "sb3")


WORKLOADS = {
    # 475: CartPole-v1's reward_threshold in gymnasium. The SB3 peer evaluates once, at the end: so does rlplug
    # here (the recipe also evaluates at 25k, 50k and 75k frames; BENCHMARKS.md has runs with and without)
    "ppo-cartpole": Workload("recipes/cartpole-ppo.toml", "benchmarks/peers/sb3_ppo_cartpole.py", 100_000, 475.0,
                             same_work=("eval.every_frames=0",),
                             floor_script="benchmarks/peers/eager_ppo_cartpole.py"),
    # -250: issue 5's threshold for the Pendulum recipes at 20k frames
    # the SB3 peer evaluates once, at the end: so does rlplug here (the recipe also evaluates every 5k frames)
    "ddpg-pendulum": Workload("recipes/pendulum-ddpg.toml", "benchmarks/peers/sb3_ddpg_pendulum.py", 20_000, -250.0,
                              same_work=("eval.every_frames=0",)),
    # -250: issue 5's threshold for the Pendulum recipes at 20k frames; SB3 SAC with the recipe's hyperparameters
    "sac-pendulum": Workload("recipes/pendulum-sac.toml", "benchmarks/peers/sb3_sac_pendulum.py", 20_000, -250.0,
                             same_work=("eval.every_frames=0",)),
    # 400: issue 15's threshold for cartpole-dqn; SB3 runs the zoo's settings, the recipe changes three of them
    # (double DQN, a cosine learning rate, 256 gradient steps a round: benchmarks/peers/sb3_dqn_cartpole.py)
    "dqn-cartpole": Workload("recipes/cartpole-dqn.toml", "benchmarks/peers/sb3_dqn_cartpole.py", 50_000, 400.0,
                             same_work=("eval.every_frames=0",)),
    # 475: the recipe's threshold; sb3-contrib's RecurrentPPO with the recipe's hyperparameters
    "ppo-lstm-cartpole-novel": Workload("recipes/cartpole-novel-ppo-lstm.toml",
                                        "benchmarks/peers/sb3_recurrent_ppo_cartpole_novel.py", 100_000, 475.0,
                                        same_work=("eval.every_frames=0",)),
    # 90: MountainCarContinuous-v0's reward_threshold in gymnasium; rl-baselines3-zoo's SAC with gSDE on both sides
    "sac-gsde-mountaincar": Workload("recipes/mountaincarcontinuous-sac-gsde.toml",
                                     "benchmarks/peers/sb3_sac_gsde_mountaincar.py", 50_000, 90.0,
                                     same_work=("eval.every_frames=0",)),
}
SYSTEMS = ("rlplug", "eager", "sb3")
#: the peers rlplug's times are divided by, in the report's order
PEERS = ("eager", "sb3")
STDERR_TAIL_LINES = 40


@dataclass
class RunResult:
    system: str
    seed: int
    repeat: int
    ok: bool
    wall_s: float = float("nan")
    peak_rss_mib: float = float("nan")
    cpu_s: float = float("nan")  # user + system CPU time of the child: above wall time, it used several cores
    eval_return: float = float("nan")
    frames: int = 0
    train_s: float = float("nan")  # the child's own timing, without start-up and imports
    error: str = ""


def log(message: str) -> None:
    """Progress goes to stderr so that stdout stays clean for the report (e.g. --markdown)."""
    print(message, file=sys.stderr, flush=True)


def child_command(workload: Workload, system: str, seed: int, frames: int | None,
                  out_dir: Path) -> tuple[list[str], Path]:
    """The command line for one run and the JSON file it leaves its result in."""
    if system == "rlplug":
        run_dir = out_dir
        cmd = [sys.executable, "-m", "rlplug", "run", workload.recipe, "--out", str(run_dir),
               "--set", f"run.seed={seed}"]
        if frames is not None:
            cmd += ["--set", f"run.total_frames={frames}"]
        for override in workload.same_work:
            cmd += ["--set", override]
        return cmd, run_dir / "summary.json"
    json_out = out_dir.with_suffix(".json")
    script = workload.floor_script if system == "eager" else workload.peer_script
    if script is None:
        raise ValueError(f"this workload has no {system} run")
    cmd = [sys.executable, script, "--seed", str(seed),
           "--frames", str(frames if frames is not None else workload.peer_default_frames),
           "--json-out", str(json_out)]
    return cmd, json_out


def run_child(cmd: list[str], log_prefix: Path, timeout_s: float) -> tuple[int, float, float, float]:
    """Run one child to completion; return (exit code, wall seconds, peak RSS in MiB, CPU seconds).

    os.wait4 reports ru_maxrss (KiB on Linux) for this child alone, unlike
    getrusage(RUSAGE_CHILDREN) which would mix in every earlier run. Output goes to
    files rather than pipes so a chatty child can never block on a full pipe.
    """
    with open(log_prefix.with_suffix(".stdout"), "wb") as out, \
            open(log_prefix.with_suffix(".stderr"), "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=out, stderr=err)
        killer = threading.Timer(timeout_s, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall_s = time.perf_counter() - start
    exit_code = os.waitstatus_to_exitcode(status)
    proc.returncode = exit_code  # already reaped: keep Popen from waiting on it again
    return exit_code, wall_s, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def stderr_tail(log_prefix: Path) -> str:
    lines = log_prefix.with_suffix(".stderr").read_text(errors="replace").splitlines()
    return "\n".join(lines[-STDERR_TAIL_LINES:])


def run_one(system: str, seed: int, repeat: int, args: argparse.Namespace, work_dir: Path) -> RunResult:
    name = f"{system}-seed{seed}" + (f"-r{repeat}" if args.repeats > 1 else "")
    cmd, result_path = child_command(WORKLOADS[args.workload], system, seed, args.frames, work_dir / name)
    exit_code, wall_s, peak_rss_mib, cpu_s = run_child(cmd, work_dir / f"{name}.log", args.timeout)
    result = RunResult(system, seed, repeat, ok=False, wall_s=wall_s, peak_rss_mib=peak_rss_mib, cpu_s=cpu_s)
    if exit_code != 0:
        result.error = f"exit code {exit_code}"
    else:
        try:
            summary = json.loads(result_path.read_text())
            result.eval_return = float(summary["eval_return_mean"])
            result.frames = int(summary["frames"])
            result.train_s = float(summary.get("wall_time_s", summary.get("train_wall_time_s", "nan")))
            result.ok = True
        except (OSError, ValueError, KeyError) as exc:
            result.error = f"no usable result in {result_path}: {exc!r}"
    if not result.ok:
        log(f"  FAILED {name}: {result.error}\n  command: {shlex.join(cmd)}\n"
            f"  --- stderr tail ---\n{stderr_tail(work_dir / f'{name}.log')}\n  ---")
    return result


# ----------------------------------------------------------------------------- report


def spread(values: list[float], fmt: str) -> str:
    """Median with min-max: on a noisy machine the range says how far to trust the median."""
    if not values:
        return "-"
    med = format(statistics.median(values), fmt)
    if min(values) == max(values):
        return med
    return f"{med} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def system_row(system: str, runs: list[RunResult], seeds: list[int], solved_return: float) -> dict[str, str]:
    ok = [r for r in runs if r.ok]
    per_seed = []
    for seed in seeds:
        returns = [r.eval_return for r in ok if r.seed == seed]
        per_seed.append(f"{seed}: {statistics.median(returns):.1f}" if returns else f"{seed}: failed")
    solved = sum(r.eval_return >= solved_return for r in ok)
    all_solved = solved == len(runs) and bool(runs)
    return {
        "system": system,
        "runs ok": f"{len(ok)}/{len(runs)}",
        "frames": spread([r.frames for r in ok], ".0f"),
        "wall s": spread([r.wall_s for r in ok], ".1f"),
        "CPU s": spread([r.cpu_s for r in ok], ".1f"),
        "train s (self)": spread([r.train_s for r in ok], ".1f"),
        "peak RSS MiB": spread([r.peak_rss_mib for r in ok], ".0f"),
        "eval return by seed": ", ".join(per_seed),
        f">= {solved_return:.0f} all seeds": f"{'yes' if all_solved else 'no'} ({solved}/{len(runs)})",
    }


def ratio_rows(results: list[RunResult]) -> list[dict[str, str]]:
    """rlplug/peer ratios for each peer that ran (the eager floor, SB3): of the medians, and the range of
    per-pair ratios.

    Pairs are the runs of one (seed, repeat), which ran back to back, so their
    ratio cancels most of the slow drift of a shared machine.
    """
    by_key = {(r.system, r.seed, r.repeat): r for r in results if r.ok}
    rows = []
    for peer in PEERS:
        for label, attr in (("wall time", "wall_s"), ("CPU time", "cpu_s"), ("peak RSS", "peak_rss_mib"),
                            ("train time (self)", "train_s")):
            ours = [getattr(r, attr) for r in results if r.ok and r.system == "rlplug"]
            theirs = [getattr(r, attr) for r in results if r.ok and r.system == peer]
            if not ours or not theirs:
                continue
            paired = [
                getattr(r, attr) / getattr(by_key[(peer, r.seed, r.repeat)], attr)
                for r in results
                if r.ok and r.system == "rlplug" and (peer, r.seed, r.repeat) in by_key
            ]
            rows.append({
                "ratio": f"rlplug / {peer}",
                "of": label,
                "ratio of medians": f"{statistics.median(ours) / statistics.median(theirs):.2f}x",
                "paired ratios": spread(paired, ".2f"),
            })
    return rows


def plain_table(rows: list[dict[str, str]]) -> str:
    headers = list(rows[0])
    widths = [max(len(h), *(len(row[h]) for row in rows)) for h in headers]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(row[h].ljust(w) for h, w in zip(headers, widths)) for row in rows]
    return "\n".join(lines)


def markdown_table(rows: list[dict[str, str]]) -> str:
    headers = list(rows[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row[h] for h in headers) + " |" for row in rows]
    return "\n".join(lines)


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_lines() -> list[str]:
    """Enough context to tell whether two BENCHMARKS.md entries are comparable."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = ", ".join(
        f"{name} {package_version(name)}"
        for name in ("rlplug", "torch", "torchrl", "tensordict", "stable-baselines3", "gymnasium")
    )
    return [
        f"- Date (UTC): {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M')}",
        f"- Machine: nproc {cores}, {cpu_model()}, {platform.system()} {platform.release()}",
        f"- Python {platform.python_version()}; {versions}",
    ]


def report(results: list[RunResult], systems: list[str], args: argparse.Namespace) -> str:
    solved_return = WORKLOADS[args.workload].solved_return
    rows = [system_row(s, [r for r in results if r.system == s], args.seeds, solved_return) for s in systems]
    ratios = ratio_rows(results)
    if args.markdown:
        command = "python " + shlex.join([os.path.relpath(sys.argv[0], REPO_ROOT), *sys.argv[1:]])
        parts = [f"```\n{command}\n```", "", *machine_lines(), "", markdown_table(rows)]
        if ratios:
            parts += ["", markdown_table(ratios)]
    else:
        parts = [plain_table(rows)]
        if ratios:
            parts += ["", plain_table(ratios)]
    parts += ["", "wall s: whole child process (start-up, imports, training, evaluation); CPU s: its user + "
              "system CPU time (near wall s: one core busy; above it: several); "
              "train s (self): as timed by the child; median (min-max). Eval return: deterministic "
              "policy over 10 episodes, median over repeats."]
    return "\n".join(parts)


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=list(WORKLOADS), default="ppo-cartpole")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=None,
                        help="training frames for both (default: the recipe's budget)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds per seed (rlplug, eager floor, sb3)")
    parser.add_argument("--only", choices=SYSTEMS, nargs="+", default=None,
                        help="run only these systems (eager: ppo-cartpole's floor)")
    parser.add_argument("--markdown", action="store_true", help="print a report for BENCHMARKS.md")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before a run is killed")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep run outputs and logs in this directory instead of a temporary one")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    missing = sorted(set(args.only or ()) - set(WORKLOADS[args.workload].systems()))
    if missing:
        parser.error(f"--workload {args.workload} has no {' or '.join(missing)} run")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    systems = [s for s in WORKLOADS[args.workload].systems() if not args.only or s in args.only]
    # bytecode for rlplug's modules, as an installed package (SB3 here) has: a source checkout under
    # PYTHONDONTWRITEBYTECODE=1 would otherwise compile them again in every run (about 0.1 s)
    compileall.compile_dir(REPO_ROOT / "rlplug", quiet=1)
    with tempfile.TemporaryDirectory(prefix="rlplug-bench-") as tmp:
        work_dir = args.keep or Path(tmp)
        work_dir.mkdir(parents=True, exist_ok=True)
        schedule = [(seed, repeat, system) for seed in args.seeds
                    for repeat in range(args.repeats) for system in systems]
        results = []
        for index, (seed, repeat, system) in enumerate(schedule, start=1):
            log(f"[{index}/{len(schedule)}] {system} seed={seed} repeat={repeat} ...")
            result = run_one(system, seed, repeat, args, work_dir)
            if result.ok:
                log(f"    {result.wall_s:.1f} s wall, {result.cpu_s:.1f} s CPU, "
                    f"{result.peak_rss_mib:.0f} MiB peak RSS, "
                    f"eval return {result.eval_return:.1f} over {result.frames} frames")
            results.append(result)
    frames_seen = {r.frames for r in results if r.ok}
    if len(frames_seen) > 1 and max(frames_seen) > 1.05 * min(frames_seen):
        log(f"warning: runs trained for different frame counts {sorted(frames_seen)}; pass --frames")
    print(report(results, systems, args))
    failed = [r for r in results if not r.ok]
    if failed:
        log(f"{len(failed)} of {len(results)} runs failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
