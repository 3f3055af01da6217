"""``python -m rlplug tune RECIPE --space SPACE.toml --trials N [--jobs J] [--out DIR] [--set ...] [--seeds ...]``:
a hyperparameter search on Optuna (:mod:`rlplug.run.tune`), kept in DIR/study.db so that a second tune on
the same DIR continues it; trials.csv, best.toml and plots are rewritten after every call.

One tune at a time holds DIR (a lock file); trials it finds still running were left by a tune that was
killed, and are marked failed. ``--jobs J`` runs J worker processes (this command again, with ``--worker``)
on the one database, and writes the files once they have all finished.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

from rlplug.errors import RlplugWarning, UserError

LOCK = "tune.lock"
#: The most trials one call may ask for: Optuna numbers a study's trials in SQLite's signed 64-bit integers.
MAX_TRIALS = 2**63 - 1


def add_commands(subparsers) -> None:
    """Adds ``tune``."""
    tune = subparsers.add_parser(
        "tune", help="search hyperparameters with Optuna (needs pip install \"rlplug[tune]\")",
        description="Search a recipe's hyperparameters with Optuna: SPACE.toml maps dotted recipe keys to "
                    "distributions, e.g. \"algorithm.lr\" = {type = \"float\", low = 1e-4, high = 3e-3, log = "
                    "true}; {type = \"int\", low = 1, high = 20}; {type = \"categorical\", choices = [...]}. "
                    "Each trial is a run directory under DIR/trials/, pruned on its evaluations "
                    "(eval.every_frames); the study is DIR/study.db, continued by a later tune on the same DIR.")
    tune.add_argument("recipe", type=Path, help="the recipe TOML file")
    tune.add_argument("--space", type=Path, required=True, metavar="SPACE.toml", help="the search space")
    tune.add_argument("--trials", type=int, required=True, metavar="N", help="trials to run in this call")
    tune.add_argument("--jobs", type=int, default=1, metavar="J", help="trials at once, in J processes (default 1)")
    tune.add_argument("--out", type=Path, metavar="DIR",
                      help="the study's directory (default: a fresh one under runs/); an earlier tune's to continue it")
    tune.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                      help="override a recipe value in every trial (repeatable)")
    tune.add_argument("--seeds", metavar="SEEDS",
                      help="run each trial on these seeds (0-2 or 1,3,7); its value is the IQM of their returns")
    tune.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # a process started by --jobs
    tune.set_defaults(handler=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    from rlplug.run.directory import ensure_writable
    from rlplug.run.tune import optuna

    optuna()  # the one-line hint to install the extra, before anything else
    if args.trials < 1:
        raise UserError(f"--trials {args.trials}: expected at least 1")
    if args.trials > MAX_TRIALS:
        raise UserError(f"--trials {args.trials}: more trials than a study can number (SQLite's integers stop at "
                        f"{MAX_TRIALS}); for a tune that goes on until you stop it, give a large --trials and press "
                        f"Ctrl-C: the finished trials are kept")
    if args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: expected at least 1")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if args.jobs > cores:
        warnings.warn(RlplugWarning(f"--jobs {args.jobs}: more processes than the {cores} CPU cores this tune may "
                                    f"use; its trials share them, each slower (--jobs {cores} or fewer keeps "
                                    f"one core each)"), stacklevel=2)
    study_spec = prepare(args)
    out = study_spec.out
    if args.worker is not None:
        return work(study_spec, args)
    check_out(out)
    ensure_writable(out)
    if args.jobs > 1 and study_spec.recipe({}).runner.spec.qualified_name != "rlplug:local":
        raise UserError("--jobs runs trials in processes on this machine; with [runner] use = \"ray\" give "
                        "--jobs 1 (the runner already spreads each trial's collection over Ray's workers)")
    with writing(out, out):
        out.mkdir(parents=True, exist_ok=True)
    with held(out / LOCK):
        study = study_spec.open()
        stale = study_spec.fail_stale_trials(study)
        earlier = len(study.trials)
        print(f"study {out / 'study.db'}: {earlier} earlier trial{'s' * (earlier != 1)}"
              f"{f' ({stale} left running by a stopped tune, marked failed)' if stale else ''}; "
              f"running {args.trials} more{f' in {args.jobs} processes' if args.jobs > 1 else ''}", flush=True)
        status = 0
        try:
            if args.jobs == 1:
                study_spec.open(sampler_seed=earlier).optimize(objective(study_spec), n_trials=args.trials)
            else:
                status = run_workers(args, out)
        except KeyboardInterrupt:
            status = 130
            print("rlplug: interrupted; the finished trials are kept: run the same tune again to continue",
                  file=sys.stderr)
        report(study_spec.open(), study_spec)
    return status


def prepare(args: argparse.Namespace):
    """The recipe (with ``--set``) validated, the space read and checked against it: the study to run."""
    import copy

    from rlplug import recipe as recipes
    from rlplug.cli.init import check_builds
    from rlplug.cli.run import parse_seeds
    from rlplug.run.directory import default_run_dir
    from rlplug.run.tune import Study
    from rlplug.run.tune_files import check_space, read_space

    seeds = parse_seeds(args.seeds) if args.seeds is not None else None
    if seeds is not None and any(o.strip().startswith("run.seed") for o in args.overrides):
        raise UserError("--seeds and --set run.seed both choose seeds; give one of them")
    base = recipes.read_toml(args.recipe)
    for override in args.overrides:
        recipes.apply_override(base, override, file=str(args.recipe))
    try:
        recipes.validate(copy.deepcopy(base), file=str(args.recipe))
    except UserError as error:
        raise recipes.with_switch_hint(error, args.overrides) from None
    space = read_space(args.space)
    out = args.out or default_run_dir(Path(f"tune-{args.recipe.stem}"))
    study = Study(args.recipe, base, space, seeds, out)
    check_space(space, study, args.space, seeds, build=check_builds)
    return study


def check_out(out: Path) -> None:
    """``--out`` refused before anything is written in it: another tune at work there, or a directory (or
    study.db) that is not an rlplug tune study, whose files a new study would overwrite."""
    from rlplug.run.tune import DATABASE, study_problem

    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"--out {out}: is a file, not a study's directory; choose a new directory, or an earlier "
                        f"tune's --out to continue its study")
    if (out / LOCK).is_file() and locked(out / LOCK):
        raise busy(out)
    database = out / DATABASE
    others = [path for path in out.iterdir() if path.name not in (LOCK, DATABASE)]
    if database.exists() or database.is_symlink():
        problem = study_problem(database, alone=not others)
        if problem is not None:
            raise UserError(f"--out {out}: {problem}; nothing was changed: move it away to start a new study "
                            f"there, or choose another --out")
        if not os.access(database, os.W_OK):
            raise UserError(f"--out {out}: cannot write to {database}; make it writable, or copy the directory "
                            f"to a place you can write to and give that --out")
    elif others:
        raise UserError(f"--out {out}: exists and holds no rlplug tune study; choose a new directory, or an "
                        f"earlier tune's --out to continue its study")


def objective(study_spec):
    from rlplug.run.tune import Objective

    return Objective(study_spec, say=lambda line: print(line, flush=True))


def work(study_spec, args: argparse.Namespace) -> int:
    """A worker process of ``--jobs``: its share of the trials, on the study its parent opened."""
    from rlplug.run.tune import stop_when_orphaned

    study = study_spec.open(sampler_seed=1000 * (args.worker + 1) + len(study_spec.open().trials))
    study.optimize(objective(study_spec), n_trials=args.trials, callbacks=[stop_when_orphaned(os.getppid())])
    return 0


def run_workers(args: argparse.Namespace, out: Path) -> int:
    """``--jobs`` processes of this command, the trials shared out among them; stopped with this one."""
    shares = [args.trials // args.jobs + (i < args.trials % args.jobs) for i in range(args.jobs)]
    passed = [str(args.recipe), "--space", str(args.space), "--out", str(out)]
    passed += [f"--set={override}" for override in args.overrides]
    passed += [f"--seeds={args.seeds}"] if args.seeds is not None else []
    workers = [subprocess.Popen([sys.executable, "-m", "rlplug", "tune", *passed, "--trials", str(share),
                                 "--worker", str(index)])
               for index, share in enumerate(shares) if share]
    try:
        statuses = [worker.wait() for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.terminate()
                worker.wait()
    return max(statuses)


@contextlib.contextmanager
def held(path: Path):
    """An exclusive lock on ``path`` for as long as the block runs (released when the process ends, however)."""
    try:
        import fcntl
    except ImportError:  # no advisory locks here (Windows): one tune at a time is up to the user
        yield
        return
    with contextlib.ExitStack() as stack:
        with writing(path.parent, path):  # only the opening: what fails in the block is not the lock's
            handle = stack.enter_context(open(path, "a"))
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy(path.parent) from None
        yield


def locked(path: Path) -> bool:
    """Whether another process holds the lock ``path`` now (looked at without creating or keeping it)."""
    try:
        import fcntl
    except ImportError:
        return False
    with open(path, "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def busy(out: Path) -> UserError:
    return UserError(f"--out {out}: another rlplug tune is running in this directory; wait for it to finish, "
                     f"or choose another --out")


def report(study, study_spec) -> None:
    """trials.csv, best.toml and the plots, and where they are."""
    from rlplug.run.tune_files import write_best, write_plots, write_trials_csv

    out = study_spec.out
    states: dict[str, int] = {}
    for trial in study.trials:
        states[trial.state.name.lower()] = states.get(trial.state.name.lower(), 0) + 1
    with writing(out, out / "trials.csv"):
        table = write_trials_csv(study, out / "trials.csv")
    print(f"{len(study.trials)} trials: {', '.join(f'{n} {state}' for state, n in states.items())}; {table}")
    with writing(out, out / "best.toml"):
        best = write_best(study, study_spec, out / "best.toml")
    if best is None:
        print("no trial has finished yet: no best.toml")
    else:
        path, trial = best
        print(f"best: trial {trial.number}, {trial.value:.4g} ({trial.user_attrs.get('run_dir')}); recipe: {path}")
    with writing(out, "the plots"):
        written, skipped = write_plots(study, out)
    plots = ", ".join(map(str, written)) or "none"
    print(f"plots: {plots}{'; not drawn: ' + '; '.join(skipped) if skipped else ''}")


@contextlib.contextmanager
def writing(out: Path, what: Path | str):
    """A write in ``out`` that fails (a read-only path, a full disk) as one line naming ``what``, not the
    temporary file it went through, and saying what to do for this tune."""
    from rlplug.run.directory import NO_SPACE, remedy
    from rlplug.run.tune import DATABASE

    try:
        yield
    except OSError as error:
        todo = remedy(error) if error.errno in NO_SPACE else f"{remedy(error)}, or give an --out you can write to"
        kept = (f", then run the same tune again: the finished trials are kept in {out / DATABASE}"
                if (out / DATABASE).is_file() else "")
        raise UserError(f"--out {out}: cannot write {what}: {error.strerror or error}; {todo}{kept}") from None
