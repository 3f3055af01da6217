"""Suites of recipes trained over seeds and read against published scores: ``rlplug bench SUITE.toml --out DIR``.

A suite is a TOML file of ``[[entry]]`` tables, each a recipe (a path relative to the suite's folder, or
absolute), its ``seeds`` (a list, or a string such as ``"0-4"`` as ``rlplug run --seeds`` takes it), an
optional ``frames`` (``run.total_frames``), optional ``set`` (overrides as ``--set`` takes them), an optional
``name`` (the recipe file's stem by default) and a ``reference = {score = ..., source = "..."}``: the published
figure and where it is from. :func:`read_suite` validates all of it, and every entry's recipe for every seed,
before anything is written.

Every seed is a run directory ``DIR/runs/NAME/seed-N`` of rlplug's own (what ``rlplug run --seeds`` writes):
seeds that can be trained together are (``--batched``: ``batched.json`` in ``DIR/runs/NAME``), the others one
after another. :func:`plan` reads what ``DIR`` already holds, so that a second call goes on where the first
stopped: a seed whose ``summary.json`` says ``finished`` at the entry's frames (or ``stopped`` by a callback, or
``diverged``) is not trained again, and any other is resumed from its latest checkpoint as ``rlplug resume``
resumes it. :func:`train` trains what is left in this process (signals stop the run under way with a
checkpoint, as ``rlplug run``'s) or in ``jobs`` processes; :func:`write_report` writes ``report.json``,
``report.md`` and ``report.png`` from the run directories alone.

The report reads each seed's final evaluation return (``summary.json``'s ``eval_return_mean``: the mean over
``eval.episodes`` episodes of the deterministic policy at the end of training) and aggregates them with
rliable (:mod:`rlplug.run.statistics`): the interquartile mean and the mean, each with its 95% stratified
bootstrap interval. The ratio to the reference is :func:`ratio`.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlplug import recipe as recipes
from rlplug.errors import UserError, did_you_mean
from rlplug.registry.docs import inline_toml
from rlplug.run.directory import BATCHED_MARKER, write_atomically
from rlplug.run.resuming import changeable, differences, lookup, named
from rlplug.run.signals import SIGNAL_EXIT, StopOnSignal

SUITE_KEYS = ("entry", "description")
ENTRY_KEYS = ("recipe", "seeds", "frames", "set", "reference", "name")
REFERENCE_KEYS = ("score", "source")
#: What an entry's name may hold: it names the entry's folder, DIR/runs/NAME.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: How a suite's ratio is read, as the report states it.
RATIO_MEANING = ("ratio = 1 + (IQM - reference) / |reference|: IQM / reference for a positive reference; for a "
                 "negative one (returns as costs) 2 - IQM / reference, so that 1 is the reference and above 1 is "
                 "better in both cases (an IQM of -200 against -150 reads 0.67, -100 reads 1.33); none for a "
                 "reference of 0. It is linear in the returns, so the interval of the IQM maps onto it")
#: The files a bench writes in DIR beside runs/.
REPORT_JSON, REPORT_MD, REPORT_PNG, LOGS = "report.json", "report.md", "report.png", "logs"


# -- the suite ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    score: float
    source: str


@dataclass
class Entry:
    """One ``[[entry]]`` of a suite, validated: its recipe loaded for every seed (``recipe_by_seed``)."""

    index: int
    name: str
    #: the recipe path as the suite writes it, and the file it names
    recipe: str
    recipe_path: Path
    seeds: list[int]
    overrides: list[str]
    reference: Reference | None
    recipe_by_seed: dict[int, recipes.Recipe]
    frames: int

    @property
    def where(self) -> str:
        return f"entry[{self.index}]"

    def folder(self, out: Path) -> Path:
        return out / "runs" / self.name

    def run_dir(self, out: Path, seed: int) -> Path:
        return self.folder(out) / f"seed-{seed}"


@dataclass
class Suite:
    path: Path
    entries: list[Entry]
    description: str = ""

    def select(self, names: Sequence[str]) -> list[Entry]:
        """The entries named (``--only``), in the suite's order; an unknown name is refused."""
        known = [entry.name for entry in self.entries]
        for name in names:
            if name not in known:
                raise UserError(f"--only {name}: no entry of {self.path} has that name{did_you_mean(name, known)} "
                                f"(its entries: {', '.join(known)})")
        return [entry for entry in self.entries if entry.name in names]


def read_suite(path: Path, parse_seeds: Callable[[str], list[int]]) -> Suite:
    """The suite in ``path``, every entry checked and its recipe validated for each seed (``parse_seeds`` reads a
    seed string as ``rlplug run --seeds`` does); any problem is one :class:`UserError` naming the file and key."""
    file = str(path)
    data = read_toml(path)
    for key in data:
        if key not in SUITE_KEYS:
            raise UserError(f"unknown key{did_you_mean(key, SUITE_KEYS)}; a suite holds [[entry]] tables (and an "
                            f"optional description)", file=file, path=key)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise UserError("expected a string", file=file, path="description")
    tables = data.get("entry")
    if tables is None:
        raise UserError("no [[entry]] tables: a suite lists its recipes as [[entry]] tables with recipe, seeds and "
                        "reference", file=file)
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise UserError("expected [[entry]] tables (an array of tables)", file=file, path="entry")
    entries: list[Entry] = []
    for index, table in enumerate(tables):
        entry = read_entry(index, table, path, parse_seeds)
        twin = next((e for e in entries if e.name == entry.name), None)
        if twin is not None:
            raise UserError(f"'{entry.name}' names {twin.where} too; give each entry its own name (its runs go to "
                            f"DIR/runs/NAME)", file=file, path=f"{entry.where}.name")
        entries.append(entry)
    return Suite(path, entries, description)


def read_toml(path: Path) -> dict[str, Any]:
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("no such suite file; check the path (benchmarks/suites/ has the shipped suites)",
                        file=file) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read the suite: {error}", file=file) from None
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise UserError(recipes.TOO_DEEP.replace("a recipe", "a suite"), file=file) from None
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        where = re.search(r"\(at line (\d+), column (\d+)\)", message)
        detail = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        raise UserError(f"invalid TOML: {detail}", file=file, line=int(where.group(1)) if where else None) from None


def read_entry(index: int, table: dict[str, Any], suite: Path,
               parse_seeds: Callable[[str], list[int]]) -> Entry:
    file, where = str(suite), f"entry[{index}]"

    def refuse(key: str, message: str) -> UserError:
        return UserError(message, file=file, path=f"{where}.{key}" if key else where)

    for key in table:
        if key not in ENTRY_KEYS:
            raise refuse(key, f"unknown key{did_you_mean(key, ENTRY_KEYS)}; an entry takes "
                              f"{', '.join(ENTRY_KEYS)}")
    recipe = table.get("recipe")
    if recipe is None:
        raise refuse("recipe", "missing: the recipe file to train (relative to the suite's folder, or absolute)")
    if not isinstance(recipe, str) or not recipe.strip():
        raise refuse("recipe", "expected the recipe's path as a string")
    recipe_path = Path(recipe) if Path(recipe).is_absolute() else suite.parent / recipe
    if not recipe_path.is_file():
        raise refuse("recipe", f"{recipe_path}: no such recipe file (a relative path is read from the suite's "
                               f"folder)")
    seeds = read_seeds(table.get("seeds"), parse_seeds, refuse)
    frames = table.get("frames")
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int) or frames < 1):
        raise refuse("frames", f"expected a whole number of frames, at least 1 (run.total_frames), not "
                               f"{inline_toml(frames)}")
    sets = table.get("set", [])
    if not isinstance(sets, list) or not all(isinstance(item, str) for item in sets):
        raise refuse("set", "expected a list of overrides as --set takes them, e.g. [\"algorithm.lr=3e-4\"]")
    for item in sets:
        key = item.partition("=")[0].strip()
        if key == "run.seed" or key.startswith("run.seed."):
            raise refuse("set", f"{item!r}: the entry's seeds choose run.seed")
        if frames is not None and key == "run.total_frames":
            raise refuse("set", f"{item!r}: frames sets run.total_frames already; give one of them")
    reference = read_reference(table.get("reference"), refuse)
    name = table.get("name", Path(recipe).stem)
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise refuse("name" if "name" in table else "recipe",
                      f"{name!r} cannot name the entry's folder: letters, digits, '.', '_' and '-', starting with a "
                      f"letter or digit" + ("" if "name" in table else "; give the entry a name"))
    overrides = [*sets, *([f"run.total_frames={frames}"] if frames is not None else [])]
    recipe_by_seed: dict[int, recipes.Recipe] = {}
    for seed in seeds:
        try:
            recipe_by_seed[seed] = recipes.load(recipe_path, [*overrides, f"run.seed={seed}"])
        except UserError as error:
            raise refuse("", str(error)) from None
    frames = recipe_by_seed[seeds[0]].run.total_frames
    return Entry(index, name, recipe, recipe_path, seeds, overrides, reference, recipe_by_seed, frames)


def read_seeds(value: Any, parse_seeds: Callable[[str], list[int]], refuse) -> list[int]:
    if value is None:
        raise refuse("seeds", "missing: the seeds to train, a list ([0, 1, 2]) or a range as --seeds takes it "
                              "(\"0-4\", \"1,3,7\")")
    if isinstance(value, str):
        try:
            return parse_seeds(value)
        except UserError as error:
            raise refuse("seeds", error.message.removeprefix("--seeds ")) from None
    if not isinstance(value, list) or not value or \
            not all(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 for seed in value):
        raise refuse("seeds", f"expected a list of non-negative whole numbers or a range such as \"0-4\", not "
                              f"{inline_toml(value)}")
    if len(set(value)) != len(value):
        raise refuse("seeds", f"{inline_toml(value)}: a seed is listed twice")
    return list(value)


def read_reference(value: Any, refuse) -> Reference | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise refuse("reference", "expected a table: reference = {score = ..., source = \"...\"}")
    for key in value:
        if key not in REFERENCE_KEYS:
            raise refuse(f"reference.{key}", f"unknown key{did_you_mean(key, REFERENCE_KEYS)}; a reference takes "
                                             f"score and source")
    score = value.get("score")
    if score is None:
        raise refuse("reference.score", "missing: the published return this entry is read against")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise refuse("reference.score", f"expected a finite number, not {inline_toml(score)}")
    source = value.get("source")
    if source is None:
        raise refuse("reference.source", "missing: say where the score is published (the paper, table or "
                                         "repository file, with its frame budget and seeds)")
    if not isinstance(source, str) or not source.strip():
        raise refuse("reference.source", "expected a non-empty string naming where the score is published")
    return Reference(float(score), source.strip())


# -- what is left to train ------------------------------------------------------------------------------------


@dataclass
class Unit:
    """What one training does: seeds of one entry, trained together (one ``BatchedRun`` in the entry's folder)
    or one seed alone, new or resumed (``overrides``: the changes resume makes, as ``rlplug resume --set``)."""

    entry: Entry
    seeds: list[int]
    together: bool
    resume: bool
    overrides: list[str] = field(default_factory=list)
    #: frames still to train over the unit's seeds, as far as the run directories tell
    remaining: int = 0

    @property
    def key(self) -> str:
        """What names the unit to a ``--jobs`` worker process: ``NAME:SEEDS:together|alone:new|resume``."""
        return (f"{self.entry.name}:{','.join(map(str, self.seeds))}:{'together' if self.together else 'alone'}:"
                f"{'resume' if self.resume else 'new'}")

    @property
    def label(self) -> str:
        if len(self.seeds) == 1:
            return f"{self.entry.name} seed {self.seeds[0]}"
        return f"{self.entry.name} seeds {', '.join(map(str, self.seeds))} together"


def read_summary(run_dir: Path) -> dict[str, Any]:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def is_empty(run_dir: Path) -> bool:
    return not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir()))


def seed_state(entry: Entry, run_dir: Path) -> str:
    """``new`` (no run yet), ``done`` (finished at the entry's frames, or stopped by a callback), ``diverged``,
    or ``resume`` (anything else: stopped by a signal or killed, or finished short of more frames asked now)."""
    if is_empty(run_dir):
        return "new"
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: is a file, not a run directory; move it away, or give another --out")
    summary = read_summary(run_dir)
    status = summary.get("status")
    if status == "diverged":
        return "diverged"
    if status == "stopped" or (status == "finished" and int(summary.get("frames") or 0) >= entry.frames):
        return "done"
    return "resume"


def resume_changes(entry: Entry, seed: int, run_dir: Path) -> list[str]:
    """The ``--set`` overrides that take the run in ``run_dir`` to the recipe the entry now gives (more frames,
    other evaluations); a difference that trained weights cannot follow is refused in one line."""
    stored_file = run_dir / "recipe.toml"
    if not stored_file.is_file():  # claimed, never started training: it starts anew from its recipe
        return []
    stored = recipes.load(stored_file).resolved()
    wanted = entry.recipe_by_seed[seed].resolved()
    changed = differences(stored, wanted)
    fixed = [key for key in changed if not changeable(key)]
    if fixed:
        differ = "differs" if len(fixed) == 1 else "differ"
        raise UserError(f"{run_dir}: trained with another recipe than {entry.where} ({entry.name}) now gives "
                        f"({named(fixed)} {differ}); rename the entry to train it anew, or give another --out")
    return [f"{key}={inline_toml(lookup(wanted, key))}" for key in changed if lookup(wanted, key) is not None]


def batched_seeds(folder: Path) -> list[int]:
    """The seeds ``batched.json`` in an entry's folder says were trained together (none without it)."""
    marker = folder / BATCHED_MARKER
    if not marker.is_file():
        return []
    try:
        return [int(seed) for seed in json.loads(marker.read_text())["seeds"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"{marker}: not the record of seeds trained together ({error}); move it away, or give "
                        f"another --out") from None


def can_batch(entry: Entry) -> bool:
    """Whether the recipe alone allows its seeds together (what only a built run tells is tried when built)."""
    from rlplug.run.batched import refuse_unbatchable_recipe

    try:
        refuse_unbatchable_recipe(entry.recipe_by_seed[entry.seeds[0]])
    except UserError:
        return False
    return True


def plan(entries: Sequence[Entry], out: Path) -> list[Unit]:
    """What is left to train of ``entries`` in ``out``, as units: every seed of a batched group still to go on
    resumed together, every other seed to go on resumed alone, and the new seeds together where the recipe
    allows it (alone otherwise). Reads the run directories only; a run directory trained with another recipe
    than its entry now gives is refused here, before anything trains."""
    units: list[Unit] = []
    for entry in entries:
        folder = entry.folder(out)
        group = batched_seeds(folder)
        states = {seed: seed_state(entry, entry.run_dir(out, seed)) for seed in sorted({*entry.seeds, *group})}
        if group and all(states[seed] == "new" for seed in group):
            group = []  # built, stopped before training: batched.json alone, written again when built anew
        changes: dict[int, list[str]] = {}
        for seed, state in states.items():
            if state != "new" and (seed in entry.seeds or seed in group):
                changes[seed] = resume_changes(entry, seed, entry.run_dir(out, seed))
        going_on = [seed for seed in group if states[seed] == "resume"]
        if going_on:
            units.append(Unit(entry, going_on, together=True, resume=True, overrides=changes[going_on[0]],
                              remaining=sum(frames_left(entry, out, seed) for seed in going_on)))
        for seed in entry.seeds:
            if seed not in group and states[seed] == "resume":
                units.append(Unit(entry, [seed], together=False, resume=True, overrides=changes[seed],
                                  remaining=frames_left(entry, out, seed)))
        new = [seed for seed in entry.seeds if states[seed] == "new" and seed not in group]
        if len(new) > 1 and not group and can_batch(entry):
            units.append(Unit(entry, new, together=True, resume=False, remaining=entry.frames * len(new)))
        else:
            units.extend(Unit(entry, [seed], together=False, resume=False, remaining=entry.frames) for seed in new)
    return units


def frames_left(entry: Entry, out: Path, seed: int) -> int:
    """The frames a seed's run still has to train, as its ``summary.json`` tells (all of them without one)."""
    return max(0, entry.frames - int(read_summary(entry.run_dir(out, seed)).get("frames") or 0))


def unit_by_key(entries: Sequence[Entry], out: Path, key: str) -> Unit:
    """The unit a ``--jobs`` worker was started for (:attr:`Unit.key`), its resume changes read again."""
    parts = key.split(":")
    entry = next((e for e in entries if len(parts) == 4 and e.name == parts[0]), None)
    try:
        seeds = [int(seed) for seed in parts[1].split(",")]
    except (IndexError, ValueError):
        seeds = []
    if entry is None or not seeds or parts[2] not in ("together", "alone") or parts[3] not in ("new", "resume"):
        raise UserError(f"--unit {key}: not a unit of this suite")
    together, resume = parts[2] == "together", parts[3] == "resume"
    overrides = resume_changes(entry, seeds[0], entry.run_dir(out, seeds[0])) if resume else []
    return Unit(entry, seeds, together, resume, overrides)


# -- training -------------------------------------------------------------------------------------------------


@dataclass
class Progress:
    """Progress lines: which unit, and an estimate of the time left. Entries train at very different rates (a
    PPO frame costs little, an SAC frame a gradient step), so each entry's frames still to train are counted at
    the frames per second its finished seeds took (their run directories tell, earlier calls' too); frames of
    entries not timed yet are said apart, never guessed from another entry's rate."""

    units: Sequence[Unit]
    out: Path
    jobs: int = 1
    say: Callable[[str], None] = lambda line: print(line, flush=True)
    begun: int = 0

    def __post_init__(self) -> None:
        self.total = len(self.units)
        self.entries = {unit.entry.name: unit.entry for unit in self.units}
        #: each entry's frames still to train in this call
        self.left = {name: 0 for name in self.entries}
        for unit in self.units:
            self.left[unit.entry.name] += unit.remaining
        self.rates = {name: self.rate(entry) for name, entry in self.entries.items()}

    def rate(self, entry: Entry) -> float | None:
        """The frames per second of the entry's finished seeds (None before one finished)."""
        return EntryRuns.read(entry, self.out).frames_per_s

    def eta(self) -> str:
        timed = sum(frames / rate for name, frames in self.left.items() if frames and (rate := self.rates[name]))
        untimed = sum(frames for name, frames in self.left.items() if frames and not self.rates[name])
        if not timed and not untimed:
            return ""
        if not timed:  # each entry is timed by its own first finished seed, never by another entry's rate
            return f"; time left: not yet known ({untimed:,} frames of entries none of whose seeds has finished)"
        at_once = max(1, min(self.jobs, len(self.units)))  # train() runs a single unit in this process
        left = f"; about {duration(timed / at_once)} left"
        if untimed:
            return f"{left} for the entries timed so far, and {untimed:,} frames of entries not yet timed"
        return f"{left} (each entry at its own frames/s so far)"

    def starting(self, unit: Unit, what: str = "") -> None:
        self.begun += 1
        self.say(f"bench: [{self.begun}/{self.total}] {unit.label}: "
                 f"{'resuming' if unit.resume else 'training'} to {unit.entry.frames:,} frames{what}{self.eta()}")

    def finished(self, unit: Unit, out: Path) -> None:
        name = unit.entry.name
        self.left[name] = max(0, self.left[name] - unit.remaining)
        self.rates[name] = self.rate(unit.entry) or self.rates[name]
        parts = []
        for seed in unit.seeds:
            summary = read_summary(unit.entry.run_dir(out, seed))
            value = summary.get("eval_return_mean")
            shown = f"{value:.4g}" if isinstance(value, (int, float)) else "none"
            parts.append(f"seed {seed} {summary.get('status', 'no summary')}, final return {shown}")
        self.say(f"bench: {name}: {'; '.join(parts)}{self.eta()}")


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def between_runs() -> StopOnSignal:
    """A signal received while no run is training (between runs, or while one is built): the bench stops before
    the next training; during training the run's own handler stops it with a checkpoint."""
    return StopOnSignal("stopping before the next run")


def stop_when_orphaned(parent: int, every: float = 1.0) -> None:
    """A ``--jobs`` worker sends itself SIGTERM (its run stops with a checkpoint) once the bench that started it
    is gone (killed without passing a signal on), rather than training on and holding its run directory."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="bench-parent-watch", daemon=True).start()


def train_unit(unit: Unit, out: Path, stop: StopOnSignal, say: Callable[[str], None]) -> int:
    """Train ``unit`` in this process to its entry's frames; 0 when done (a seed that diverged included), else
    the exit status of a stop by signal (the run keeps its checkpoint, and resumes on the next call)."""
    from rlplug.core.stacked import RETRY
    from rlplug.run.batched import BatchedRun
    from rlplug.run.schedule import TrainingDiverged
    from rlplug.run.start import reopen, until_done_or_stopped
    from rlplug.run.trainer import Run

    entry, folder = unit.entry, unit.entry.folder(out)
    folder.mkdir(parents=True, exist_ok=True)  # made here, so that an abandoned run removes only its own folder
    if unit.together and unit.resume:
        try:
            target: Any = reopen(folder, unit.overrides)
        except UserError as error:  # checkpoints at different frames (a kill mid-checkpoint): each seed alone
            say(f"bench: {unit.label}: cannot go on together ({error}); each seed alone")
            return each_alone(unit, out, stop, say, resume=True)
    elif unit.together:
        (folder / BATCHED_MARKER).unlink(missing_ok=True)  # a group built and stopped before it trained
        try:
            target = BatchedRun.build([entry.recipe_by_seed[seed] for seed in unit.seeds], folder,
                                      {"bench": str(entry.recipe_path)})
        except UserError as error:
            if RETRY not in error.message:
                raise
            say(f"bench: {entry.name}: its seeds one after another ({error.message.split(';')[0]})")
            return each_alone(unit, out, stop, say, resume=False)
    elif unit.resume:
        target = reopen(entry.run_dir(out, unit.seeds[0]), unit.overrides)
    else:
        target = Run.build(entry.recipe_by_seed[unit.seeds[0]], entry.run_dir(out, unit.seeds[0]))
    if target is None:  # already trained its frames
        return 0
    if stop.signal is not None:  # asked to stop while it was built: a new run leaves nothing behind
        abandon(target, new=not unit.resume)
        return SIGNAL_EXIT.get(stop.signal, 1)
    try:
        return until_done_or_stopped(target)
    except TrainingDiverged as error:  # a seed alone: it stops with its last good checkpoint, the bench goes on
        say(f"bench: {unit.label}: {error}")
        return 0


def each_alone(unit: Unit, out: Path, stop: StopOnSignal, say: Callable[[str], None], *, resume: bool) -> int:
    for seed in unit.seeds:
        if stop.signal is not None:
            return SIGNAL_EXIT.get(stop.signal, 1)
        run_dir = unit.entry.run_dir(out, seed)
        state = seed_state(unit.entry, run_dir)
        if state in ("done", "diverged"):
            continue
        alone = Unit(unit.entry, [seed], together=False, resume=state == "resume",
                     overrides=resume_changes(unit.entry, seed, run_dir) if state == "resume" else [])
        status = train_unit(alone, out, stop, say)
        if status:
            return status
    return 0


def abandon(target: Any, *, new: bool) -> None:
    runs = getattr(target, "runs", None)
    for run in runs if runs is not None else [target]:
        run.close(abandon=new)
    if runs is not None and new:
        (target.out / BATCHED_MARKER).unlink(missing_ok=True)


@dataclass
class Outcome:
    """How a call's training ended: its exit status and each entry that could not be trained, with why."""

    status: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def train(units: Sequence[Unit], out: Path, *, jobs: int = 1, command: Callable[[Unit], list[str]] | None = None,
          say: Callable[[str], None] = lambda line: print(line, flush=True)) -> Outcome:
    """Train ``units`` in this process, or with ``jobs`` > 1 in that many processes running ``command(unit)``
    (this command again, for one unit). A unit that fails with a user error (a missing package, say) is named
    in the outcome and its entry's other units are left; SIGINT or SIGTERM stop it all, each run under way with
    a checkpoint."""
    progress = Progress(units, out, jobs, say=say)
    if jobs > 1 and len(units) > 1:
        assert command is not None, "worker processes run a command"
        return train_in_processes(units, out, jobs, command, progress)
    outcome = Outcome()
    with between_runs().installed() as stop:
        for unit in units:
            if unit.entry.name in outcome.failed:
                continue
            if stop.signal is not None:
                outcome.status = SIGNAL_EXIT.get(stop.signal, 1)
                break
            progress.starting(unit)
            try:
                status = train_unit(unit, out, stop, say)
            except UserError as error:
                outcome.failed[unit.entry.name] = str(error)
                say(f"bench: {unit.label}: not trained: {error}")
                continue
            if status:
                outcome.status = status
                break
            progress.finished(unit, out)
    return outcome


def train_in_processes(units: Sequence[Unit], out: Path, jobs: int, command: Callable[[Unit], list[str]],
                       progress: Progress) -> Outcome:
    """Each unit a process of its own (its output in ``DIR/logs/``), ``jobs`` at a time; a signal is handed on
    to each once (they stop with a checkpoint), and no new one starts."""
    outcome, pending = Outcome(), list(units)
    running: dict[subprocess.Popen, tuple[Unit, Path]] = {}
    (out / LOGS).mkdir(parents=True, exist_ok=True)
    for unit in units:
        unit.entry.folder(out).mkdir(parents=True, exist_ok=True)
    with StopOnSignal("handing it on to the runs under way, which stop with a checkpoint").installed() as stop:
        handed_on = False
        while pending or running:
            while stop.signal is None and pending and len(running) < jobs:
                unit = pending.pop(0)
                if unit.entry.name in outcome.failed:
                    continue
                log = out / LOGS / f"{unit.entry.name}-seed-{'-'.join(map(str, unit.seeds))}.log"
                with open(log, "a") as handle:  # the child has its own copy of the descriptor
                    process = subprocess.Popen(command(unit), stdout=handle, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True)
                running[process] = (unit, log)
                progress.starting(unit, f" (process {process.pid}, output in {log})")
            if stop.signal is not None and not handed_on:
                handed_on = True
                for process in running:
                    process.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            for process in [p for p in running if p.poll() is not None]:
                unit, log = running.pop(process)
                status = process.returncode
                if status == 0:
                    progress.finished(unit, out)
                elif status in SIGNAL_EXIT.values() or status < 0:
                    progress.say(f"bench: {unit.label}: stopped (status {status}); it resumes on the next call")
                    outcome.status = outcome.status or SIGNAL_EXIT.get(stop.signal or "", status)
                else:
                    outcome.failed[unit.entry.name] = last_error(log, status)
                    progress.say(f"bench: {unit.label}: not trained: {outcome.failed[unit.entry.name]}")
        if stop.signal is not None:
            outcome.status = SIGNAL_EXIT.get(stop.signal, 1)
    return outcome


def last_error(log: Path, status: int) -> str:
    """The one-line error a worker wrote last, or where to look."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    errors = [line.removeprefix("rlplug: error: ") for line in lines if line.startswith("rlplug: error: ")]
    return errors[-1] if errors else f"its process ended with status {status}; its output is in {log}"


# -- the report -----------------------------------------------------------------------------------------------


def ratio(value: float | None, reference: float) -> float | None:
    """``value`` (an IQM, or either end of its interval) read against ``reference``: 1 at the reference, above 1
    better; ``value / reference`` for a positive reference, ``2 - value / reference`` for a negative one (see
    :data:`RATIO_MEANING`); None for a reference of 0 or no value."""
    if value is None or reference == 0:
        return None
    return round(1.0 + (value - reference) / abs(reference), 6)


def summarise(returns: Sequence[float]) -> dict[str, Any]:
    """rliable's IQM and mean of final returns, each with its 95% stratified bootstrap interval."""
    from rlplug.run.statistics import aggregate_returns

    aggregate = aggregate_returns(dict(enumerate(returns)))
    return {"iqm": aggregate["iqm"], "ci": aggregate["ci95"]["iqm"], "mean": aggregate["mean"],
            "mean_ci": aggregate["ci95"]["mean"], "bootstrap": aggregate["bootstrap"]}


@dataclass
class EntryRuns:
    """What the run directories hold for an entry: the seeds with a final return, those still to train or
    diverged, and the wall seconds and frames of the finished ones (seeds trained together counted once)."""

    seeds: list[int]
    returns: list[float]
    #: each seed's recent training return (summary.json's train_return_recent; None where it has none)
    train_returns: list[float | None]
    pending: list[int]
    diverged: list[int]
    group: set[int]
    wall: float
    frames: int

    @classmethod
    def read(cls, entry: Entry, out: Path) -> EntryRuns:
        group = set(batched_seeds(entry.folder(out)))
        seeds, returns, pending, diverged = [], [], [], []
        train_returns: list[float | None] = []
        walls: dict[int, float] = {}
        frames = 0
        for seed in entry.seeds:
            run_dir = entry.run_dir(out, seed)
            summary = read_summary(run_dir)
            state = seed_state(entry, run_dir)
            value = summary.get("eval_return_mean")
            if state == "done" and isinstance(value, (int, float)):
                seeds.append(seed)
                returns.append(float(value))
                trained = summary.get("train_return_recent")
                train_returns.append(float(trained) if isinstance(trained, (int, float)) else None)
                walls[seed] = float(summary.get("wall_time_s") or 0.0)
                frames += int(summary.get("frames") or 0)
            elif state == "diverged":
                diverged.append(seed)
            else:
                pending.append(seed)
        # seeds trained together each count the whole group's seconds: counted once
        together = [walls[seed] for seed in seeds if seed in group]
        wall = sum(walls[seed] for seed in seeds if seed not in group) + (max(together) if together else 0.0)
        return cls(seeds, returns, train_returns, pending, diverged, group, wall, frames)

    @property
    def frames_per_s(self) -> float | None:
        return round(self.frames / self.wall, 1) if self.wall > 0 else None


def entry_report(entry: Entry, out: Path, failure: str | None = None) -> dict[str, Any]:
    """What the run directories hold for ``entry``: the seeds with a final return, and their aggregate."""
    runs = EntryRuns.read(entry, out)
    seeds, returns, group, wall, frames = runs.seeds, runs.returns, runs.group, runs.wall, runs.frames
    stats: dict[str, Any] = summarise(returns) if returns else \
        {"iqm": None, "ci": None, "mean": None, "mean_ci": None}
    stats.pop("bootstrap", None)
    reference = entry.reference
    result: dict[str, Any] = {
        "name": entry.name, "recipe": entry.recipe, "set": entry.overrides, "frames": entry.frames,
        "seeds": seeds, "returns": returns, **stats,
        "train_returns": runs.train_returns, "train_mean": train_mean(runs.train_returns),
        "reference": {"score": reference.score, "source": reference.source} if reference else None,
        "ratio": ratio(stats["iqm"], reference.score) if reference else None,
        "ratio_ci": [ratio(stats["ci"][0], reference.score), ratio(stats["ci"][1], reference.score)]
        if reference and stats["ci"] else None,
        "at_or_above": stats["iqm"] >= reference.score if reference and stats["iqm"] is not None else None,
        "wall_s": round(wall, 3), "frames_trained": frames, "frames_per_s": runs.frames_per_s,
        "seeds_together": sorted(group & set(entry.seeds)), "pending": runs.pending, "diverged": runs.diverged,
    }
    if failure is not None:
        result["error"] = failure
    return result


def train_mean(train_returns: Sequence[float | None]) -> float | None:
    """The seeds' mean recent training return, the measure of references that report training episodes
    (CleanRL's); None unless every seed has one."""
    if not train_returns or any(value is None for value in train_returns):
        return None
    return round(sum(value for value in train_returns if value is not None) / len(train_returns), 6)


def write_report(suite: Suite, out: Path, *, command: str, failed: dict[str, str] | None = None) -> list[Path]:
    """``report.json``, ``report.md`` and (where an entry has returns and a reference) ``report.png`` in ``out``,
    from the run directories of every entry of the suite; returns the paths written."""
    from rlplug.run.statistics import BOOTSTRAP_REPS, BOOTSTRAP_SEED, CONFIDENCE
    from rlplug.version import __version__

    failed = failed or {}
    entries = [entry_report(entry, out, failed.get(entry.name)) for entry in suite.entries]
    report = {
        "suite": str(suite.path), "description": suite.description, "command": command,
        "written": datetime.now(UTC).isoformat(timespec="seconds"), "rlplug_version": __version__,
        "returns": "each seed's final evaluation return: summary.json's eval_return_mean, the mean over "
                   "eval.episodes episodes of the deterministic policy at the end of training",
        "train_returns": "each seed's recent training return: summary.json's train_return_recent, the env's own "
                         "rewards over the last training episodes of the exploring policy (the measure of "
                         "references that report training episodes); train_mean is their mean",
        "ratio": RATIO_MEANING,
        "bootstrap": {"library": "rliable", "method": "stratified bootstrap, percentile intervals",
                      "reps": BOOTSTRAP_REPS, "confidence": CONFIDENCE, "seed": BOOTSTRAP_SEED},
        "entries": entries,
    }
    written = [out / REPORT_JSON]
    write_atomically(out / REPORT_JSON, (json.dumps(report, indent=2) + "\n").encode())
    plot = plot_ratios(entries, out / REPORT_PNG)
    if plot is not None:
        written.append(plot)
    write_atomically(out / REPORT_MD, markdown(report, plot).encode())
    written.insert(1, out / REPORT_MD)
    return written


def number(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 10 ** digits else f"{value:.{digits}g}"


def markdown(report: dict[str, Any], plot: Path | None) -> str:
    """``report.md``: one table row per entry, then what is missing, the references' sources and the plot."""
    lines = [f"# Benchmark: {Path(report['suite']).name}", ""]
    if report["description"]:
        lines += [report["description"].strip(), ""]
    lines += [f"`{report['command']}`, written {report['written']} by rlplug {report['rlplug_version']}.", "",
              "| entry | frames | seeds | IQM [95% CI] | mean | training mean | reference | ratio [95% CI] | wall s "
              "| frames/s |",
              "|---|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    notes = []
    for entry in report["entries"]:
        iqm = "-" if entry["iqm"] is None else \
            f"{number(entry['iqm'])} [{number(entry['ci'][0])}, {number(entry['ci'][1])}]"
        reference = "-" if entry["reference"] is None else number(entry["reference"]["score"])
        ratio_text = "-" if entry["ratio"] is None else f"{entry['ratio']:.2f}"
        if entry["ratio_ci"] and None not in entry["ratio_ci"]:
            ratio_text += f" [{entry['ratio_ci'][0]:.2f}, {entry['ratio_ci'][1]:.2f}]"
        frames_per_s = "-" if entry["frames_per_s"] is None else f"{entry['frames_per_s']:,.0f}"
        lines.append(f"| {entry['name']} | {entry['frames']:,} | {len(entry['seeds'])} | {iqm} | "
                     f"{number(entry['mean'])} | {number(entry['train_mean'])} | {reference} | {ratio_text} | "
                     f"{entry['wall_s']:,.0f} | {frames_per_s} |")
        missing = []
        if entry["pending"]:
            missing.append(f"seed{'s' * (len(entry['pending']) > 1)} {', '.join(map(str, entry['pending']))} "
                           f"not finished")
        if entry["diverged"]:
            missing.append(f"seed{'s' * (len(entry['diverged']) > 1)} {', '.join(map(str, entry['diverged']))} "
                           f"diverged")
        if entry.get("error"):
            missing.append(f"not trained: {entry['error']}")
        if missing:
            notes.append(f"- {entry['name']}: {'; '.join(missing)}")
    lines += [""]
    if notes:
        lines += ["Not in the table's figures:", "", *notes, ""]
    lines += [f"Returns: {report['returns']}. Training mean: the mean of each seed's recent training return "
              f"(summary.json's train_return_recent, the env's own rewards over its last training episodes: the "
              f"measure of references that report training episodes). IQM and mean with 95% intervals from "
              f"rliable's stratified bootstrap "
              f"({report['bootstrap']['reps']} samples). Wall s: seconds of training (building and start-up "
              f"aside), seeds trained together counted once; frames/s: every seed's frames over that.", "",
              f"Ratio: {RATIO_MEANING}.", ""]
    if plot is not None:
        lines += [f"![IQM and mean of each entry relative to its reference]({plot.name})", ""]
    lines += ["## References", ""]
    for entry in report["entries"]:
        if entry["reference"] is not None:
            lines.append(f"- {entry['name']}: {number(entry['reference']['score'])}: {entry['reference']['source']}")
    return "\n".join(lines) + "\n"


def plot_ratios(entries: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """rliable's interval-estimates figure of each entry's IQM and mean relative to its reference (the ratio of
    :func:`ratio`, whose line at 1 is the reference); None where no entry has both returns and a reference."""
    shown = [e for e in entries if e["reference"] is not None and e["iqm"] is not None and e["ratio"] is not None]
    if not shown:
        return None
    import warnings

    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from rliable import plot_utils

    from rlplug.run.statistics import save

    def relative(value: float, entry: dict[str, Any]) -> float:
        result = ratio(value, entry["reference"]["score"])
        assert result is not None
        return result

    names = [e["name"] for e in shown]
    points = {e["name"]: np.array([relative(e["iqm"], e), relative(e["mean"], e)]) for e in shown}
    intervals = {e["name"]: np.array([[relative(e["ci"][0], e), relative(e["mean_ci"][0], e)],
                                      [relative(e["ci"][1], e), relative(e["mean_ci"][1], e)]]) for e in shown}
    row_height = 0.6  # inches per entry; the axis label goes about half an inch under the axes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figure, axes = plot_utils.plot_interval_estimates(
            points, intervals, ["IQM", "Mean"], names, xlabel="return relative to the reference (1: the reference)",
            subfigure_width=4.0, row_height=row_height, xlabel_y_coordinate=-0.55 / (row_height * len(names)))
        for axis in np.atleast_1d(axes):
            axis.axvline(1.0, color="black", linestyle="--", linewidth=1)
        save(figure, path)
        pyplot.close(figure)
    return path

