"""``python -m rlplug bench SUITE.toml --out DIR [--jobs J] [--only NAMES] [--dry-run]``: every entry of a suite
trained over its seeds into ``DIR/runs/NAME/seed-N``, then ``DIR/report.json``, ``report.md`` and ``report.png``
against each entry's published reference (:mod:`rlplug.run.bench`). A second call with the same DIR continues:
finished runs are not trained again, and stopped or killed ones resume from their latest checkpoint.

One bench at a time holds DIR (a lock on the directory itself). ``--jobs J`` trains J units at once, each in a
process of this command again (``--unit``, hidden), whose output goes to ``DIR/logs/``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from pathlib import Path

from rlplug.errors import RlplugWarning, UserError


def add_commands(subparsers) -> None:
    """Adds ``bench``."""
    bench = subparsers.add_parser(
        "bench", help="train a suite of recipes over seeds and report them against published scores",
        description="Train every [[entry]] of SUITE.toml (recipe, seeds, optional frames, set, name, and "
                    "reference = {score, source}) over its seeds, each seed a run directory under "
                    "DIR/runs/NAME/, seeds together where the recipe allows; then DIR/report.json, report.md and "
                    "report.png: each entry's final evaluation returns, their IQM and mean with 95% stratified "
                    "bootstrap intervals (rliable), and the ratio to the reference. The same command again "
                    "continues: finished runs are kept, stopped or killed ones resume from their checkpoint.")
    bench.add_argument("suite", type=Path, metavar="SUITE.toml", help="the suite (benchmarks/suites/ has some)")
    bench.add_argument("--out", type=Path, required=True, metavar="DIR",
                       help="the bench's directory: new, or an earlier bench's to continue it")
    bench.add_argument("--jobs", type=int, default=1, metavar="J",
                       help="trainings at once, each in its own process (default 1: in this process)")
    bench.add_argument("--only", metavar="NAMES",
                       help="train only these entries (names, comma-separated); the report still lists them all")
    bench.add_argument("--dry-run", action="store_true",
                       help="check the suite and say what would be trained; nothing is written")
    bench.add_argument("--unit", help=argparse.SUPPRESS)  # a process started by --jobs: one unit's training
    bench.set_defaults(handler=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from rlplug.cli.run import parse_seeds
    from rlplug.registry import get_registry
    from rlplug.run.bench import read_suite

    get_registry().report_failures()
    if args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: expected at least 1")
    suite = read_suite(args.suite, parse_seeds)
    entries = suite.entries
    if args.only is not None:
        entries = suite.select([name.strip() for name in args.only.split(",") if name.strip()])
        if not entries:
            raise UserError(f"--only {args.only!r}: expected entry names, comma-separated")
    out: Path = args.out
    check_out(out)
    with heavy_imports(entries):
        from rlplug.run import bench

    if args.unit is not None:
        unit = bench.unit_by_key(suite.entries, out, args.unit)
        bench.stop_when_orphaned(os.getppid())
        with bench.between_runs().installed() as stop:
            return bench.train_unit(unit, out, stop, say)
    units = bench.plan(entries, out)
    seeds = sum(len(entry.seeds) for entry in entries)
    going = sum(len(unit.seeds) for unit in units)
    if args.dry_run:
        say(f"bench: {suite.path}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {seeds} seed runs, "
            f"{seeds - going} of them finished in {out}")
        for unit in units:
            changes = f" (with {', '.join(unit.overrides)})" if unit.overrides else ""
            say(f"bench: would {'resume' if unit.resume else 'train'} {unit.label}{changes}: "
                f"{unit.remaining:,} frames left")
        if not units:
            say("bench: nothing to train")
        if any(unit.together and not unit.resume for unit in units):
            say("bench: (seeds together: trained as run --seeds --batched does, where the built run allows it; "
                "else one after another)")
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if args.jobs > cores:
        warnings.warn(RlplugWarning(f"--jobs {args.jobs}: more processes than the {cores} CPU cores this bench may "
                                    f"use; they share them, each slower (and frames/s in the report with them)"),
                      stacklevel=2)
    with held(out):
        say(f"bench: {suite.path}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {seeds} seed runs: "
            f"{seeds - going} finished earlier, {going} to train"
            + (f" in {min(args.jobs, len(units))} processes" if args.jobs > 1 and len(units) > 1 else "")
            + ("" if units else "; nothing to train"))
        outcome = bench.train(units, out, jobs=args.jobs, command=lambda unit: worker_command(args, unit.key))
        written = bench.write_report(suite, out, command=command_line(args), failed=outcome.failed)
        if outcome.status:  # the report so far: the finished seeds, the others listed as not finished
            print(f"bench: stopped; every run keeps its latest checkpoint: run the same command again to "
                  f"continue ({command_line(args)}); the report so far: {out / bench.REPORT_MD}",
                  file=sys.stderr, flush=True)
            return outcome.status
    say(f"bench: report: {', '.join(map(str, written))}")
    for entry in entries:
        show(bench.entry_report(entry, out, outcome.failed.get(entry.name)))
    if outcome.failed:
        failed = "; ".join(f"{name}: {why}" for name, why in outcome.failed.items())
        raise UserError(f"{len(outcome.failed)} entr{'y' if len(outcome.failed) == 1 else 'ies'} not trained "
                        f"({failed}); the report lists {'it' if len(outcome.failed) == 1 else 'them'} as not "
                        f"trained: fix that and run the same command again")
    return 0


def say(line: str) -> None:
    print(line, flush=True)


def show(entry: dict) -> None:
    """One line per entry: its IQM and interval, against its reference."""
    if entry["iqm"] is None:
        say(f"bench: {entry['name']}: no finished seed")
        return
    low, high = entry["ci"]
    line = (f"bench: {entry['name']}: IQM {entry['iqm']:.4g} [{low:.4g}, {high:.4g}], mean {entry['mean']:.4g} "
            f"over {len(entry['seeds'])} seed{'s' * (len(entry['seeds']) != 1)} at {entry['frames']:,} frames")
    if entry["reference"] is not None:
        ratio = "" if entry["ratio"] is None else f", ratio {entry['ratio']:.2f}"
        line += f"; reference {entry['reference']['score']:.4g}{ratio}"
    say(line)


def check_out(out: Path) -> None:
    """``--out`` refused before anything is written: a file, or a directory holding something else than a bench."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"--out {out}: is a file, not a bench's directory; choose a new directory, or an earlier "
                        f"bench's --out to continue it")
    if any(out.iterdir()) and not ((out / "runs").is_dir() or (out / "report.json").is_file()):
        raise UserError(f"--out {out}: exists and holds no bench (no runs/ or report.json); choose a new "
                        f"directory, or an earlier bench's --out to continue it")


@contextlib.contextmanager
def held(out: Path):
    """An exclusive lock on the directory ``out`` (made where missing) while the block runs; released when the
    process ends, however it ends."""
    import fcntl

    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise UserError(f"--out {out}: cannot write there ({error.strerror or error})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(f"--out {out}: another rlplug bench is running in this directory; wait for it to "
                            f"finish, or choose another --out") from None
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def heavy_imports(entries):
    """torch, TorchRL and the run machinery imported as ``rlplug run`` imports them: the optional packages no
    entry reaches through TorchRL hidden from it meanwhile, and the objects made frozen for the collector."""
    from rlplug.cli.run import hidden_from_torchrl, long_lived_objects, packages_torchrl_need_not_load

    hidden = None
    for entry in entries:
        packages = set(packages_torchrl_need_not_load(entry.recipe_by_seed[entry.seeds[0]]))
        hidden = packages if hidden is None else hidden & packages
    with long_lived_objects(), hidden_from_torchrl(sorted(hidden or ())):
        import rlplug.run.batched  # noqa: F401
        import rlplug.run.start  # noqa: F401

        yield


def worker_command(args: argparse.Namespace, key: str) -> list[str]:
    return [sys.executable, "-m", "rlplug", "bench", str(args.suite), "--out", str(args.out), "--unit", key]


def command_line(args: argparse.Namespace) -> str:
    parts = ["rlplug", "bench", str(args.suite), "--out", str(args.out)]
    parts += ["--jobs", str(args.jobs)] if args.jobs != 1 else []
    parts += ["--only", args.only] if args.only else []
    return " ".join(parts)
