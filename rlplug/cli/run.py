"""``rlplug run RECIPE`` (one run, or one per seed with ``--seeds``) and ``rlplug resume RUN_DIR``."""

from __future__ import annotations

import argparse
import contextlib
import gc
import signal
import sys
from pathlib import Path

from rlplug.errors import UserError


def add_commands(subparsers) -> None:
    """Adds ``run`` and ``resume``."""
    from rlplug.cli.eval import add_unverified_option

    run = subparsers.add_parser("run", help="train from a recipe")
    run.add_argument("recipe", type=Path, help="the recipe TOML file")
    run.add_argument("--out", type=Path, help="run directory (default: a fresh one under runs/)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a recipe value, e.g. --set algorithm.lr=3e-4 (repeatable)")
    run.add_argument("--seeds", metavar="SEEDS", help="one run per seed, e.g. 0-4 or 1,3,7, under --out/seed-N, "
                     "then the aggregate (rliable's IQM, mean, median and optimality gap with 95%% bootstrap "
                     "intervals, in aggregate.json) and one plot")
    run.add_argument("--batched", action="store_true",
                     help="with --seeds: train the seeds together in this process, their networks stacked and "
                          "updated at once (torch.vmap), their envs stepped together; each still gets its seed-N "
                          "directory, and rlplug resume DIR continues them")
    run.add_argument("--gap-threshold", type=float, metavar="RETURN",
                     help="with --seeds: the return the optimality gap is measured to (default: the env's "
                          "reward_threshold in gymnasium's registry, e.g. 475 for CartPole-v1)")
    run.set_defaults(handler=cmd_run)

    resume = subparsers.add_parser("resume", help="continue a run from its latest checkpoint")
    resume.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    resume.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="change what trained weights allow: run.total_frames, run.checkpoint_every_frames, "
                             "run.keep_checkpoints, run.num_threads, run.compile, eval.*, loggers, runner (repeatable)")
    add_unverified_option(resume)
    resume.set_defaults(handler=cmd_resume)


def cmd_run(args: argparse.Namespace) -> int:
    from rlplug import recipe as recipes
    from rlplug.registry import get_registry

    get_registry().report_failures()
    if args.gap_threshold is not None and args.seeds is None:
        raise UserError("--gap-threshold sets the optimality gap of the aggregate over seeds; give --seeds too")
    if args.batched and args.seeds is None:
        raise UserError("--batched trains the seeds of --seeds together; give --seeds too (e.g. --seeds 0-7)")
    if args.seeds is not None:
        return run_seeds(args)
    recipe = recipes.load(args.recipe, args.overrides)
    with long_lived_objects():
        with hidden_from_torchrl(packages_torchrl_need_not_load(recipe)):
            from rlplug.run.directory import default_run_dir
            from rlplug.run.trainer import Run  # heavy imports only once the recipe is known to be good

        run_dir = args.out or default_run_dir(args.recipe)
        try:
            run = Run.build(recipe, run_dir)
        except UserError as error:
            raise error.located(file=str(args.recipe)) from None
    return train_until_done_or_stopped(run)


@contextlib.contextmanager
def long_lived_objects():
    """Importing torch, tensordict and TorchRL and building a run make millions of objects that live as long
    as the process. Python's cyclic garbage collector would scan them again and again, during the imports and at
    interpreter exit (what that costs: BENCHMARKS.md). Collection is
    paused while they are made, then they are frozen (``gc.freeze``: left out of every later collection;
    reference counting still frees whatever of them is dropped)."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def packages_torchrl_need_not_load(recipe) -> list[str]:
    """Optional packages TorchRL imports at its own import whenever they are installed, which this run never
    reaches through TorchRL: Ray (TorchRL's Ray replay buffer) unless the runner is Ray's, and MuJoCo (probed
    for TorchRL's own MuJoCo envs) always; what each costs at start-up is in BENCHMARKS.md. Only for recipes of
    rlplug's own components: a plugin's might use those parts of TorchRL. (A gymnasium MuJoCo env imports
    MuJoCo itself, after TorchRL is loaded.)"""
    if not all(component.spec.qualified_name.startswith("rlplug:") for _, component in recipe.components()):
        return []
    return ["mujoco"] + (["ray"] if recipe.runner.spec.qualified_name == "rlplug:local" else [])


@contextlib.contextmanager
def hidden_from_torchrl(packages: list[str]):
    """While TorchRL is imported, ``import`` of each of ``packages`` fails and ``find_spec`` says it is
    absent, as TorchRL expects on a machine without it (BENCHMARKS.md: start-up); afterwards they import as
    usual, though the TorchRL parts that wanted them stay off in this process."""
    hidden = [name for name in packages if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # None marks a module unimportable
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]


#: ``--seeds`` runs one seed after another: more than this many is a typo, not a plan.
MAX_SEEDS = 1000


def parse_seeds(text: str) -> list[int]:
    """``0-4`` -> 0..4, ``1,3,7`` -> those, ``5`` -> 5."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            span = range(int(low), int(high or low) + 1)
            if len(seeds) + len(span) > MAX_SEEDS:  # checked before the list is made: 0-99999999999 fits no memory
                raise UserError(f"--seeds {text!r}: at most {MAX_SEEDS} seeds, one run after another")
            seeds.extend(span)
    except ValueError:
        raise UserError(f"--seeds {text!r}: expected seeds like 0-4 or 1,3,7") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise UserError(f"--seeds {text!r}: expected distinct non-negative seeds like 0-4 or 1,3,7")
    return seeds


def run_seeds(args: argparse.Namespace) -> int:
    """One run per seed, one after another (or together, ``--batched``), under one directory; then the
    aggregate and one plot (:func:`rlplug.run.seeds.train_seeds`)."""
    from rlplug import recipe as recipes

    seeds = parse_seeds(args.seeds)
    if any(o.strip().startswith("run.seed") for o in args.overrides):
        raise UserError("--seeds and --set run.seed both choose seeds; give one of them")
    recipe_by_seed = {seed: recipes.load(args.recipe, [*args.overrides, f"run.seed={seed}"]) for seed in seeds}
    with long_lived_objects():
        from rlplug.run.directory import default_run_dir
        from rlplug.run.seeds import train_seeds

    return train_seeds(recipe_by_seed, args.out or default_run_dir(args.recipe), batched=args.batched,
                       gap_threshold=args.gap_threshold, train=train_until_done_or_stopped, file=str(args.recipe))


def cmd_resume(args: argparse.Namespace) -> int:
    from rlplug.run.directory import BATCHED_MARKER

    if (args.run_dir / BATCHED_MARKER).is_file():
        return resume_batched(args)
    with long_lived_objects():
        from rlplug.run.trainer import Run

        run = Run.resume(args.run_dir, args.overrides, allow_unverified=args.allow_unverified)
    if run.frames >= run.recipe.run.total_frames:
        print(f"{args.run_dir}: already trained for its {run.recipe.run.total_frames} frames; nothing to do")
        return 0
    start = "at frame" if (args.run_dir / "checkpoint.pt").exists() else "from frame 0 (it wrote no checkpoint),"
    changed = f", with {', '.join(run.changed)} changed" if run.changed else ""
    print(f"resuming {args.run_dir} {start} {run.frames} of {run.recipe.run.total_frames}{changed}", flush=True)
    return train_until_done_or_stopped(run)


def resume_batched(args: argparse.Namespace) -> int:
    """``rlplug resume DIR`` of seeds trained together: on from their latest checkpoints, together again."""
    with long_lived_objects():
        from rlplug.run.batched import BatchedRun

        batched, note = BatchedRun.resume(args.run_dir, args.overrides)
    if batched is None:
        raise UserError(f"{args.run_dir}: every seed diverged; nothing to resume")
    total = batched.runs[0].recipe.run.total_frames
    if batched.frames >= total:
        batched.close()
        print(f"{args.run_dir}: already trained for its {total} frames; nothing to do")
        return 0
    print(f"resuming {args.run_dir} (seeds {', '.join(map(str, batched.seeds))}, together) at frame "
          f"{batched.frames} of {total}", flush=True)
    from rlplug.run.seeds import train_batched

    return train_batched(batched, note.get("gap_threshold"), train_until_done_or_stopped)


def stopped_by(error: OSError, run) -> UserError:
    """The one line for a run stopped by a failing file write (a full disk): the file, the reason, what is kept
    and how to go on once the cause is gone (the half-written file was removed)."""
    from rlplug.run.directory import remedy

    where = f"{error.filename}: " if error.filename else ""
    if (run.run_dir / "checkpoint.pt").exists():
        kept = f"the run stopped at frame {run.frames} and its last checkpoint is kept; "
    elif (run.run_dir / "recipe.toml").exists():
        kept = "the run stopped before its first checkpoint; "
    else:
        return UserError(f"{where}{error.strerror or error}; nothing of the run was written: fix that, then run "
                         f"it again with the same --out {run.run_dir}")
    return UserError(f"{where}{error.strerror or error}; {kept}{remedy(error)}, then continue with: "
                     f"python -m rlplug resume {run.run_dir}")


#: Exit statuses after a stop by signal, as shells report them.
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}


def train_until_done_or_stopped(run) -> int:
    """Train; SIGINT or SIGTERM stop it after the current gradient step with a checkpoint (a second one at once)."""
    def stop(signum, frame):
        name = signal.Signals(signum).name
        if run.stop_reason is not None:
            raise KeyboardInterrupt
        run.request_stop(name)
        print(f"rlplug: {name}: stopping after this gradient step and writing a checkpoint "
              f"(send it again to stop at once)", file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = run.train()
    except OSError as error:  # a full disk, say: what, where, and how to go on
        raise stopped_by(error, run) from error
    finally:
        try:
            run.close()  # envs' worker processes end with the run, however it ends
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    print(f"run directory: {run.run_dir}")
    if summary["status"] == "interrupted":
        print(f"stopped at frame {run.frames}; continue with: python -m rlplug resume {run.run_dir}", file=sys.stderr)
        return SIGNAL_EXIT.get(summary.get("signal"), 1)
    return 0
