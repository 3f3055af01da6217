"""Hyperparameter search on Optuna (``rlplug tune``): a search space over dotted recipe keys, a study kept in
SQLite, and every trial a normal run directory whose evaluations feed Optuna's pruner.

A trial trains in pieces of ``eval.every_frames`` (``Run.train(max_frames=...)``), each ending with the
run's own evaluation; the mean return (the IQM over seeds with ``--seeds``) is reported to the trial after
each piece, so the pruner can stop it, and a stopped trial still leaves a checkpoint ``rlplug resume`` takes.
The search space file and everything the study writes besides the runs are :mod:`rlplug.run.tune_files`'.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import sqlite3
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlplug import recipe as recipes
from rlplug.errors import UserError

STUDY_NAME = "rlplug"
DATABASE = "study.db"
#: Seconds a process waits for SQLite's lock (parallel trials write to the one database).
SQLITE_TIMEOUT = 60


def optuna():
    """Optuna, imported on first use, quiet: rlplug prints its own progress."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import optuna as module
    except ImportError:
        raise UserError("rlplug tune needs Optuna: pip install \"rlplug[tune]\"") from None
    module.logging.set_verbosity(module.logging.ERROR)
    return module


@dataclass(frozen=True)
class Dimension:
    """One key of the search space and its distribution."""

    key: str
    kind: str  # "float", "int" or "categorical"
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple = ()

    @property
    def encoded(self) -> bool:
        """Choices Optuna cannot store (lists, tables) go to it as JSON text."""
        return any(not isinstance(c, (bool, int, float, str)) for c in self.choices)

    def bounds(self) -> tuple[float, float]:
        """``(low, high)`` of a float or int dimension (a categorical one has none)."""
        if self.low is None or self.high is None:
            raise ValueError(f"{self.key}: a {self.kind} dimension without low and high")
        return self.low, self.high

    def suggest(self, trial) -> Any:
        if self.kind == "float":
            return trial.suggest_float(self.key, *self.bounds(), log=self.log, step=self.step)
        if self.kind == "int":
            return trial.suggest_int(self.key, *self.bounds(), log=self.log, step=self.step or 1)
        if self.encoded:
            return json.loads(trial.suggest_categorical(self.key, [json.dumps(c) for c in self.choices]))
        return trial.suggest_categorical(self.key, list(self.choices))

    def samples(self) -> dict[str, Any]:
        """Values that bound what the distribution can give, by what the space file calls them."""
        if self.kind == "categorical":
            return {f"choices[{i}]": choice for i, choice in enumerate(self.choices)}
        low, high = self.bounds()
        samples = {"low": low, "high": high}
        if self.kind == "float" and low < high:  # a fraction, which an integer key refuses
            samples["a value between low and high"] = low + (high - low) * 0.382
        return samples


@dataclass
class Study:
    """What a tune (or one of its worker processes) searches: the recipe as data after ``--set``, its file
    (for messages), the space, the seeds of each trial (None: the recipe's own), and the study's directory."""

    recipe_file: Path
    base: dict[str, Any]
    space: list[Dimension]
    seeds: list[int] | None
    out: Path
    storage: Any = None

    @property
    def storage_url(self) -> str:
        return f"sqlite:///{(self.out / DATABASE).resolve()}"

    def recipe_data(self, values: dict[str, Any]) -> dict[str, Any]:
        data = copy.deepcopy(self.base)
        for key, value in values.items():
            recipes.set_value(data, key, value, file=str(self.recipe_file))
        return data

    def recipe(self, values: dict[str, Any], seed: int | None = None):
        data = self.recipe_data(values)
        if seed is not None:
            recipes.set_value(data, "run.seed", seed, file=str(self.recipe_file))
        return recipes.validate(data, file=str(self.recipe_file))

    def identity(self) -> str:
        """What a continued study must share with the one in the directory: the recipe and the seeds."""
        return json.dumps({"recipe": self.base, "seeds": self.seeds}, sort_keys=True, default=str)

    def open(self, *, sampler_seed: int | None = None):
        """The study in ``out``'s database, created on first use; refuses one of another recipe."""
        optuna_ = optuna()
        self.storage = optuna_.storages.RDBStorage(self.storage_url,
                                                   engine_kwargs={"connect_args": {"timeout": SQLITE_TIMEOUT}})
        study = optuna_.create_study(
            study_name=STUDY_NAME, storage=self.storage, direction="maximize", load_if_exists=True,
            sampler=optuna_.samplers.TPESampler(seed=sampler_seed), pruner=optuna_.pruners.MedianPruner())
        known = study.user_attrs.get("identity")
        if known is None:
            study.set_user_attr("identity", self.identity())
        elif known != self.identity():
            raise UserError(f"--out {self.out}: its study searched another recipe (or other --set or --seeds); "
                            f"continue it with the same ones, or choose another --out")
        return study

    def fail_stale_trials(self, study) -> int:
        """Trials left running by a tune that was killed (the caller holds the study's lock): failed."""
        optuna_ = optuna()
        storage, stale = self.storage, study.get_trials(deepcopy=False, states=(optuna_.trial.TrialState.RUNNING,))
        study_id = storage.get_study_id_from_name(STUDY_NAME)
        for trial in stale:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
            storage.set_trial_system_attr(trial_id, "rlplug_interrupted", True)
            storage.set_trial_state_values(trial_id, optuna_.trial.TrialState.FAIL)
        return len(stale)


def study_problem(database: Path, alone: bool) -> str | None:
    """Why ``database`` is not a study a tune may go on with, or None. Read in SQLite's read-only mode,
    because Optuna opening a file creates its tables there: an empty or foreign file would become a new
    study in silence. ``alone``: nothing but the lock file beside it, so that an empty database (a tune
    stopped before its study was made) loses no earlier results by starting one."""
    if not database.is_file():
        return f"{database.name} is not a file"
    try:
        with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as db:
            check = db.execute("PRAGMA quick_check").fetchone()
            if check != ("ok",):
                return f"{database.name} is a damaged SQLite database ({check[0]})"
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            names = [name for (name,) in db.execute("SELECT study_name FROM studies")] if "studies" in tables else []
    except sqlite3.Error as error:
        return f"{database.name} is not a readable SQLite database ({error})"
    if tables and "studies" not in tables:
        return f"{database.name} is an SQLite database of something else (tables {', '.join(sorted(tables))})"
    if names and STUDY_NAME not in names:
        return f"{database.name} holds Optuna studies of other names ({', '.join(map(repr, names))})"
    if not names and not alone:
        return f"{database.name} holds no study, beside the files of an earlier tune"
    return None


class Objective:
    """One trial: values from the space, the runs trained piece by piece, each evaluation reported."""

    def __init__(self, study: Study, say=print):
        self.study, self.say = study, say

    def __call__(self, trial) -> float:
        values = {dimension.key: dimension.suggest(trial) for dimension in self.study.space}
        directory = self.study.out / "trials" / f"trial-{trial.number:04d}"
        trial.set_user_attr("values", values)
        trial.set_user_attr("run_dir", str(directory.relative_to(self.study.out)))
        self.say(f"trial {trial.number}: {', '.join(f'{k}={v!r}' for k, v in values.items())}")
        try:
            return self.train(trial, values, directory)
        except UserError as error:  # a diverged run, a combination of values the recipe refuses
            trial.set_user_attr("error", str(error))
            self.say(f"trial {trial.number}: failed: {error}")
            return math.nan  # Optuna records the trial as failed and goes on

    def train(self, trial, values: dict[str, Any], directory: Path) -> float:
        from rlplug.run.trainer import Run

        seeds: list[int | None] = [*self.study.seeds] if self.study.seeds else [None]
        runs: dict[int | None, Run] = {}
        for seed in seeds:
            recipe = self.study.recipe(values, seed)
            recipe = dataclasses.replace(recipe, loggers=[logger for logger in recipe.loggers
                                                          if logger.spec.qualified_name != "rlplug:console"])
            runs[seed] = Run.build(recipe, directory if seed is None else directory / f"seed-{seed}")
        try:
            return self.train_runs(trial, runs, recipe, directory)
        finally:  # their envs' worker processes stop with the trial
            for run in runs.values():
                run.close()

    def train_runs(self, trial, runs: dict[int | None, Any], recipe, directory: Path) -> float:
        seeds = self.study.seeds
        total = recipe.run.total_frames
        every = recipe.eval.every_frames or total
        value = math.nan
        while any(run.frames < total for run in runs.values()):
            for run in runs.values():
                run.train(max_frames=every, eval_every=0)  # each piece ends with one evaluation
            value = score([mean(run.eval_returns) for run in runs.values()])
            frames = max(run.frames for run in runs.values())
            trial.report(value, frames)
            what = "return" if seeds is None else "IQM of the returns"
            if frames < total and trial.should_prune():
                self.say(f"trial {trial.number}: pruned at frame {frames} ({what} {value:.4g})")
                raise optuna().TrialPruned()
            self.say(f"trial {trial.number}: frame {frames}: {what} {value:.4g}")
        if seeds is not None:
            from rlplug.run.seeds import write_aggregate  # as ``rlplug run --seeds`` writes it, without the plot

            write_aggregate(directory, {seed: mean(run.eval_returns) for seed, run in runs.items()
                                        if seed is not None}, recipe, None, plot=False)
        return value


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan


def score(returns: list[float]) -> float:
    """The trial's value: the mean return of one run; rliable's IQM of several seeds' mean returns."""
    if len(returns) == 1:
        return returns[0]
    import numpy as np

    from rlplug.run.statistics import rliable

    _, metrics = rliable()
    return float(metrics.aggregate_iqm(np.asarray(returns, dtype=float).reshape(-1, 1)))


def stop_when_orphaned(parent: int):
    """An Optuna callback for a worker process: no new trial once the tune that started it is gone."""
    def callback(study, trial) -> None:
        if os.getppid() != parent:
            study.stop()
    return callback
