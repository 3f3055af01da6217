"""When a run does what it does between updates, written once for a single run and for seeds trained together:
evaluations and checkpoints every so many frames, the seed its envs restart from at a checkpoint (the same for a
run left alone and one resumed there), how a stop request, lost workers or divergence end it, and that its
loggers are closed and its summary written however it ends.

:func:`train` asks a :class:`Driver` (:class:`~rlplug.run.trainer.Run`, :class:`~rlplug.run.batched.BatchedRun`)
for each step; the driver knows how to collect and update, whose loggers to feed, where its files go."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rlplug.core.training import allow_updates
from rlplug.errors import UserError, WorkersLost
from rlplug.recipe import Recipe
from rlplug.run import changes
from rlplug.run.callbacks import Callbacks


class TrainingDiverged(UserError):
    """A loss, gradient or parameter became NaN or infinite."""


class Driver(Protocol):
    """What :func:`train` drives: one run, or seeds trained together."""

    stop_reason: str | None

    @property
    def recipe(self) -> Recipe: ...

    @property
    def run_dir(self) -> Path: ...

    @property
    def frames(self) -> int: ...

    @property
    def iterations(self) -> int: ...

    def prepare(self) -> None:
        """Before training: the directory writable and the recipe written (a failure here leaves no summary)."""

    def start_loggers(self) -> None:
        """Loggers built; whichever started are closed by :meth:`end`, whatever fails after."""

    def iterate(self, started: float, frames_before: int) -> dict[str, float] | None:
        """One collection and one update, its metrics logged (``fps`` counted from ``started``, ``frames_before``)
        and returned where there is one set of them (one run)."""

    def evaluation(self) -> list[float] | None:
        """The returns where there is one set of them (one run)."""

    def checkpoint(self) -> Any: ...

    def restart(self) -> None:
        """After a checkpoint taken while training goes on: every env restarts from :func:`episode_seed`."""

    def end(self, outcome: dict[str, Any], failing: bool, seconds: float) -> None:
        """Training ended as ``outcome`` (``status``, ``signal``) after ``seconds``: summaries written and loggers
        closed (with ``failing``, their errors are reported rather than raised over the one under way)."""


def next_multiple(frames: int, every: int) -> int | None:
    """The first multiple of ``every`` after ``frames`` (None when ``every`` is 0: never)."""
    return (frames // every + 1) * every if every else None


def log_due(previous: int, frames: int, every: int) -> bool:
    """Whether an update that took the run from ``previous`` to ``frames`` gives the loggers a row: every update
    when ``every`` (``run.log_every_frames``) is 0, else the one that reached the next multiple of ``every``."""
    return not every or frames // every > previous // every


def episode_seed(seed: int, frames: int) -> int:
    """The seed every env restarts from at a checkpoint taken at ``frames``: a resumed run uses the same."""
    return (seed * 1_000_003 + frames) % 2**31


def reward_problem(batch: Any, recipe: Recipe) -> str | None:
    """Where the env gave a reward that is NaN or infinite in ``batch`` (a collected batch, ``("next",
    "reward")``): which env and copy, for the divergence line. Checked before the update, so that a NaN the env
    made is blamed on the env, not on the learning rate, and never reaches the weights."""
    import torch

    from rlplug.core.envs import env_label

    reward = batch.get(("next", "reward"), None)
    if not isinstance(reward, torch.Tensor) or not reward.is_floating_point() or bool(torch.isfinite(reward).all()):
        return None
    where = (~torch.isfinite(reward)).nonzero()[0].tolist()
    value = reward[tuple(where)].item()
    copy = f" (copy {where[0]})" if batch.ndim >= 2 and batch.batch_size[0] > 1 else ""
    return f"the reward env {env_label(recipe.env)}{copy} gave ({value})"


def train(driver: Driver, *, max_frames: int | None = None, max_iters: int | None = None,
          eval_every: int | None = None, more: Callable[[], bool] | None = None,
          callbacks: Callbacks | None = None) -> dict[str, Any]:
    """Train ``driver`` to the recipe's ``total_frames``, or until the first limit given (counted from this call),
    or until ``more()`` says no; returns the outcome, ``status`` (``finished``, ``paused`` or ``interrupted``, with
    the ``signal``) and whatever :meth:`Driver.end` adds.

    Evaluates every ``eval_every`` frames (default: the recipe's ``eval.every_frames``) and at the end;
    checkpoints every ``run.checkpoint_every_frames`` and at the end; stops early, with a checkpoint, on a stop
    request (``driver.stop_reason`` set, by a signal handler or a callback: then ``status`` is ``stopped``) or
    when the runner's workers are lost (:class:`WorkersLost`, raised again saying how to go on). ``callbacks``
    (started on this training) are told of each update, evaluation and checkpoint."""
    settings = driver.recipe.run
    stop_frames = min(settings.total_frames, driver.frames + max_frames if max_frames else settings.total_frames)
    stop_iters = driver.iterations + max_iters if max_iters else None
    eval_every = driver.recipe.eval.every_frames if eval_every is None else eval_every
    next_eval = next_multiple(driver.frames, eval_every)
    next_checkpoint = next_multiple(driver.frames, settings.checkpoint_every_frames)

    told = callbacks or Callbacks()
    driver.prepare()
    outcome: dict[str, Any] = {"status": "failed"}
    driver.stop_reason = None
    allow_updates()
    started, frames_before = time.perf_counter(), driver.frames
    evaluated_at = None  # the frame of the latest evaluation
    try:
        driver.start_loggers()
        told.started()
        while driver.frames < stop_frames and (stop_iters is None or driver.iterations < stop_iters) \
                and driver.stop_reason is None and (more is None or more()):
            changes.take_requests(driver)  # parameters changed by rlplug set or the Python API
            told.updated(driver.iterate(started, frames_before))
            frames = driver.frames
            if next_eval is not None and next_eval <= frames < stop_frames:
                next_eval = next_multiple(frames, eval_every)
                told.evaluated(driver.evaluation())
                evaluated_at = frames
            if next_checkpoint is not None and next_checkpoint <= frames < settings.total_frames:
                next_checkpoint = next_multiple(frames, settings.checkpoint_every_frames)
                told.checkpointed(driver.checkpoint())
                driver.restart()
        if driver.stop_reason is not None:
            if told.outcome() is not None and evaluated_at != driver.frames:
                # a callback's stop ends the run as its end would: evaluated (a signal's stop does not wait)
                told.evaluated(driver.evaluation())
            told.checkpointed(driver.checkpoint())
            outcome = told.outcome() or {"status": "interrupted", "signal": driver.stop_reason}
        else:
            told.evaluated(driver.evaluation())
            told.checkpointed(driver.checkpoint())
            done = driver.frames >= settings.total_frames
            outcome = {"status": "finished"} if done else told.outcome() or {"status": "paused"}
    except TrainingDiverged:
        outcome = {"status": "diverged"}
        raise
    except WorkersLost as error:  # the learner's state is whole: kept, and the run goes on with resume
        outcome = {"status": "stopped"}
        kept = "keeping the last checkpoint"  # a lost learner took the state a new one would need
        if error.state_whole:
            try:
                driver.checkpoint()
                kept = "with a checkpoint"
            except TrainingDiverged:  # env statistics the failing env made NaN: the last good checkpoint stays
                kept = "keeping the last good checkpoint"
        raise WorkersLost(f"{error.message}; stopped at frame {driver.frames} {kept}; continue with: "
                          f"python -m rlplug resume {driver.run_dir}", path=error.path) from error
    except KeyboardInterrupt:
        outcome = {"status": "interrupted"}
        raise
    finally:
        allow_updates()  # the stop was for this training; updates called later run whole
        told.end()
        driver.end(outcome, sys.exc_info()[1] is not None, time.perf_counter() - started)
    return outcome
