"""Starting, training and resuming runs: the one way ``rlplug run`` (one recipe, ``--seeds``, ``--batched``),
``rlplug resume`` and the Python API (:meth:`rlplug.Agent.from_recipe`) take. :func:`build` makes what trains
(a :class:`Run`, seeds together in a :class:`BatchedRun`, or seeds in turn in :class:`SeedRuns`); the API hands
it to the caller, a command trains it with :func:`train_to_end` (signals stop it with a checkpoint; the result
is the exit status) after :func:`build` or :func:`reopen`."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import overload

from rlplug.errors import UserError
from rlplug.recipe import Recipe
from rlplug.run.batched import BatchedRun
from rlplug.run.directory import BATCHED_MARKER, check_run_dir, remedy
from rlplug.run.init_from import Source, start_from
from rlplug.run.seeds import SeedRuns, final_return, write_aggregate
from rlplug.run.signals import SIGNAL_EXIT, StopOnSignal
from rlplug.run.trainer import Run

#: what :func:`build` and :func:`reopen` give: one run, seeds together, or seeds in turn
Trainable = Run | BatchedRun | SeedRuns


@overload
def build(recipes: Recipe, out: Path, *, batched: bool = ..., gap_threshold: float | None = ...,
          file: str | None = ..., init_from: Source | None = ...) -> Run: ...


@overload
def build(recipes: Mapping[int, Recipe], out: Path, *, batched: bool = ..., gap_threshold: float | None = ...,
          file: str | None = ..., init_from: Source | None = ...) -> BatchedRun | SeedRuns: ...


def build(recipes: Recipe | Mapping[int, Recipe], out: Path, *, batched: bool = False,
          gap_threshold: float | None = None, file: str | None = None, init_from: Source | None = None) -> Trainable:
    """One validated recipe built into ``out``; or recipes by seed (each with its ``run.seed``), one run per seed
    under ``out/seed-N`` (``out`` new or empty), trained together when ``batched`` (refused in one line where
    they cannot be), else one after another. ``gap_threshold``: the return the aggregate's optimality gap is
    measured to; ``file``: the recipe's file, named by a refusal of what it asks; ``init_from``: the checkpoint
    one run starts from (:mod:`rlplug.run.init_from`)."""
    if not isinstance(recipes, Recipe):
        assert init_from is None, "init_from starts one run"  # rlplug run refuses --init-from with --seeds
        check_run_dir(out)
    try:
        if isinstance(recipes, Recipe):
            return started_from(recipes, out, init_from) if init_from else Run.build(recipes, out)
        if batched:
            together = BatchedRun.build(list(recipes.values()), out, {"gap_threshold": gap_threshold})
            together.gap_threshold = gap_threshold
            return together
    except UserError as error:
        raise error.located(file=file) from None
    return SeedRuns(dict(recipes), out, gap_threshold)


def started_from(recipe: Recipe, out: Path, source: Source) -> Run:
    """A new run of ``recipe`` in ``out`` that starts from ``source``'s weights, saying so; refused before the
    directory exists where the checkpoint alone tells, and the directory removed again where the networks differ."""
    source.check_algorithm(recipe)
    run = Run.build(recipe, out)
    try:
        start_from(run, source)
    except BaseException:
        run.close(abandon=True)
        raise
    optimiser = "its optimiser state" if source.optimiser else "a fresh optimiser"
    print(f"starting from the weights of {source.path} (frame {source.state['frames']} of its run), with "
          f"{optimiser}, at frame 0", flush=True)
    return run


def reopen(run_dir: Path, overrides: Sequence[str] = (), *, allow_unverified: bool = False) -> Trainable | None:
    """The run (or seeds trained together) in ``run_dir`` rebuilt from its latest checkpoint with ``overrides``
    (``--set``), saying so; None, saying so, when it already trained all its frames."""
    if (run_dir / BATCHED_MARKER).is_file():
        batched, note = BatchedRun.resume(run_dir, overrides)
        if batched is None:
            raise UserError(f"{run_dir}: every seed diverged; nothing to resume")
        batched.gap_threshold = note.get("gap_threshold")
        total = batched.recipe.run.total_frames
        if batched.frames >= total:
            batched.close()
            print(f"{run_dir}: already trained for its {total} frames; nothing to do")
            return None
        print(f"resuming {run_dir} (seeds {', '.join(map(str, batched.seeds))}, together) at frame "
              f"{batched.frames} of {total}", flush=True)
        return batched
    run = Run.resume(run_dir, overrides, allow_unverified=allow_unverified)
    total = run.recipe.run.total_frames
    if run.frames >= total:
        run.close()
        print(f"{run_dir}: already trained for its {total} frames; nothing to do")
        return None
    start = "at frame" if (run_dir / "checkpoint.pt").exists() else "from frame 0 (it wrote no checkpoint),"
    changed = f", with {', '.join(run.changed)} changed" if run.changed else ""
    print(f"resuming {run_dir} {start} {run.frames} of {total}{changed}", flush=True)
    return run


def train_to_end(target: Trainable) -> int:
    """Train what :func:`build` or :func:`reopen` gave until done or stopped, then, for several seeds, their
    aggregate; the exit status (0 when done; the first seed's that was not, for seeds in turn)."""
    if isinstance(target, SeedRuns):
        for index, seed in enumerate(target.seeds):
            print(f"seed {seed} ({index + 1} of {len(target.seeds)})", flush=True)
            status = until_done_or_stopped(target.run(seed))
            if status:
                return status
        write_aggregate(target.out, {seed: final_return(target.out / f"seed-{seed}") for seed in target.seeds},
                        target.recipe_by_seed[target.seeds[0]], target.gap_threshold)
        return 0
    status = until_done_or_stopped(target)
    if status or isinstance(target, Run):
        return status
    finished = [seed for seed in target.seeds if seed not in target.diverged]
    if finished:
        write_aggregate(target.out, {seed: final_return(target.out / f"seed-{seed}") for seed in finished},
                        target.recipe, target.gap_threshold)
    if target.diverged:
        raise UserError(f"{target.out}: seed{'s' if len(target.diverged) > 1 else ''} "
                        f"{', '.join(map(str, target.diverged))} diverged (stopped alone, the last good checkpoint "
                        f"kept in seed-N/; each one's line is above); "
                        + (f"the aggregate is over the {len(finished)} others" if finished else "no aggregate"))
    return 0


def until_done_or_stopped(run: Run | BatchedRun) -> int:
    """Train; SIGINT or SIGTERM stop it after the current gradient step with a checkpoint (a second one at once,
    as :class:`~rlplug.run.signals.StopOnSignal` reads signals); the run is closed however it ends."""
    stop = StopOnSignal("stopping after this gradient step and writing a checkpoint", on_first=run.request_stop)
    with stop.installed():
        print(f"run directory: {run.run_dir}", flush=True)  # now, not only at the end: where to look while it trains
        try:
            summary = run.train()
        except OSError as error:  # a full disk, say: what, where, and how to go on
            raise stopped_by(error, run) from error
        finally:
            run.close()  # envs' worker processes end with the run, however it ends
    print(f"run directory: {run.run_dir}")
    if summary["status"] == "stopped":  # by a callback, as the recipe asked
        print(f"stopped by {summary['stopped_by']} at frame {run.frames}; continue with: python -m rlplug resume "
              f"{run.run_dir}", file=sys.stderr)
        return 0
    if summary["status"] == "interrupted":
        print(f"stopped at frame {run.frames}; continue with: python -m rlplug resume {run.run_dir}", file=sys.stderr)
        return SIGNAL_EXIT.get(summary.get("signal", ""), 1)
    return 0


def stopped_by(error: OSError, run: Run | BatchedRun) -> UserError:
    """The one line for a run stopped by a failing file write (a full disk): the file, the reason, what is kept
    and how to go on once the cause is gone (the half-written file was removed)."""
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
