"""``rlplug run RECIPE`` (one run, or one per seed with ``--seeds``) and ``rlplug resume RUN_DIR``."""

from __future__ import annotations

import argparse
import contextlib
import gc
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
    run.add_argument("--init-from", type=Path, metavar="SOURCE",
                     help="start from the weights of a run directory's latest checkpoint, or of a checkpoint file "
                          "(best.pt, checkpoints/frames-N.pt): networks, env normalisation statistics, "
                          "preprocessor; a new run with its own frame count")
    run.add_argument("--init-optimiser", action="store_true",
                     help="with --init-from: take the checkpoint's optimiser state too (default: a fresh optimiser)")
    add_unverified_option(run)
    run.set_defaults(handler=cmd_run)

    resume = subparsers.add_parser("resume", help="continue a run from its latest checkpoint")
    resume.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    resume.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="change what trained weights allow: run.total_frames, run.checkpoint_every_frames, "
                             "run.keep_checkpoints, run.num_threads, run.compile, run.log_every_frames, eval.*, "
                             "loggers, runner (repeatable)")
    add_unverified_option(resume)
    resume.set_defaults(handler=cmd_resume)


def cmd_run(args: argparse.Namespace) -> int:
    """Parses and validates, then builds and trains with :mod:`rlplug.run.start`, as the Python API builds."""
    from rlplug import recipe as recipes
    from rlplug.registry import get_registry

    get_registry().report_failures()
    if args.gap_threshold is not None and args.seeds is None:
        raise UserError("--gap-threshold sets the optimality gap of the aggregate over seeds; give --seeds too")
    if args.batched and args.seeds is None:
        raise UserError("--batched trains the seeds of --seeds together; give --seeds too (e.g. --seeds 0-7)")
    if args.init_from is None and (args.init_optimiser or args.allow_unverified):
        flag = "--init-optimiser" if args.init_optimiser else "--allow-unverified"
        raise UserError(f"{flag} is about the checkpoint of --init-from; give --init-from SOURCE too")
    if args.init_from is not None and args.seeds is not None:
        raise UserError("--init-from starts one run from a checkpoint; it does not take --seeds (start each seed "
                        "with its own --set run.seed=N --init-from ...)")
    if args.seeds is None:
        recipe = recipes.load(args.recipe, args.overrides)
        chosen: recipes.Recipe | dict[int, recipes.Recipe] = recipe
    else:
        seeds = parse_seeds(args.seeds)
        if any(o.strip().startswith("run.seed") for o in args.overrides):
            raise UserError("--seeds and --set run.seed both choose seeds; give one of them")
        chosen = {seed: recipes.load(args.recipe, [*args.overrides, f"run.seed={seed}"]) for seed in seeds}
        recipe = chosen[seeds[0]]
    with long_lived_objects():
        with hidden_from_torchrl(packages_torchrl_need_not_load(recipe)):
            from rlplug.run.directory import default_run_dir
            from rlplug.run.init_from import Source
            from rlplug.run.start import build, train_to_end  # heavy imports only once the recipe is known good

        source = None if args.init_from is None else \
            Source.read(args.init_from, optimiser=args.init_optimiser, allow_unverified=args.allow_unverified)
        target = build(chosen, args.out or default_run_dir(args.recipe), batched=args.batched,
                       gap_threshold=args.gap_threshold, file=str(args.recipe), init_from=source)
    return train_to_end(target)


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


def cmd_resume(args: argparse.Namespace) -> int:
    with long_lived_objects():
        from rlplug.run.start import reopen, train_to_end

        target = reopen(args.run_dir, args.overrides, allow_unverified=args.allow_unverified)
    return 0 if target is None else train_to_end(target)
