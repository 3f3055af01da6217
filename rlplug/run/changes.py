"""Parameters changed while a run goes on, as the run sees them: ``rlplug set``'s requests (files in the run
directory, checked against its stored recipe before they are written), taken by the run at the start of its
next iteration, and the record of every change: a line of ``parameters.jsonl`` (frame, name, old, new,
source), a row of the run's metrics, and, for a request, a line on the console. What a change does to the
algorithm is :mod:`rlplug.plugins.algorithms.parameters`'.

A request waits in ``set-requests/`` until a run takes it: the one training in the directory now (an update
under way ends after its current gradient step for it), or the next ``resume``; a finished run takes none. Each
change taken is on disk in ``parameters.jsonl`` before its request is removed, and a checkpoint counts the
changes it holds: ``resume`` makes those recorded after it again (:func:`made_again`), so that a kill or a
divergence before the next checkpoint loses none. Seeds trained together (``--seeds --batched``) share one
update, so their directories take no requests."""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlplug.core.files import refuse_link
from rlplug.errors import RlplugWarning, UserError
from rlplug.recipe import apply_override, read_toml, validate
from rlplug.registry import protocols
from rlplug.run.directory import BATCHED_MARKER, append_line, in_use, own_folder, write_atomically

#: the folder of a run directory where ``rlplug set`` leaves its requests, one JSON file each
REQUESTS = "set-requests"
#: every change made to a run's algorithm, one JSON object a line
RECORD = "parameters.jsonl"
#: how often (seconds) an update under way looks for a request: besides its gradient step, the longest a request
#: waits for a run training
LOOK_EVERY = 0.2


def checked_request(run_dir: Path, assignments: Sequence[str]) -> dict[str, Any]:
    """``algorithm.NAME=VALUE`` assignments checked against ``run_dir``'s recipe (the names that can change, then
    the values by the recipe's own rules, as ``--set`` would); returns ``{NAME: value}``. Torch-free."""
    recipe_file = run_dir / "recipe.toml"
    if not recipe_file.is_file():
        raise UserError(f"{run_dir}: not a run directory (no recipe.toml in it); set takes the directory of a run, "
                        f"the --out of rlplug run")
    if (run_dir / BATCHED_MARKER).exists() or (run_dir.parent / BATCHED_MARKER).exists():
        raise UserError(f"{run_dir}: seeds trained together (--batched) share one update, so set cannot change one "
                        f"seed's parameters; train the seeds one after another (--seeds without --batched)")
    data = read_toml(recipe_file)
    algorithm = validate(data, file=str(recipe_file)).algorithm
    live = protocols.live_parameters(algorithm.spec.factory)
    if live is None:
        raise UserError(f"{algorithm.title} has no parameters that change during a run (its factory has no "
                        f"live_parameters)", file=str(recipe_file), path="algorithm")
    try:
        return checked_values(data, algorithm, live, assignments, str(recipe_file))
    except UserError as error:
        raise error.located(file=error.file or str(recipe_file)) from None


def checked_values(data: dict[str, Any], algorithm: Any, live: protocols.LiveParameters, assignments: Sequence[str],
                   file: str) -> dict[str, Any]:
    """The requested values, each checked by the recipe's rules; those of recipe keys also together, as the
    recipe they make (``alpha``, DQN's ``epsilon`` are no recipe keys: checked alone)."""
    requested: dict[str, Any] = {}
    keys = algorithm.spec.schema.params
    for text in assignments:
        key, sep, _ = text.partition("=")
        name = key.strip().removeprefix("algorithm.")
        if not sep or not key.strip().startswith("algorithm.") or not name:
            raise UserError(f"set {text!r}: expected algorithm.NAME=VALUE (e.g. algorithm.lr=1e-4); other recipe "
                            f"keys change with resume --set")
        live.annotation(algorithm.params, name)  # a name that cannot change: refused first
        scratch: dict[str, Any] = {}
        apply_override(scratch, text, file=file)
        value: Any = scratch
        for part in key.strip().split("."):
            value = value[part]
        if name.split(".")[0] in keys:
            apply_override(data, text, file=file)
        requested[name] = value
    changed = validate(data, file=file).algorithm  # the values by the recipe's rules, together
    for name, value in requested.items():
        live.check(changed.params, name, value)
    return requested


def update_parameter(algorithm: Any, name: str, value: Any) -> tuple[Any, Any]:
    """``algorithm.update_algorithm_parameter(name, value)`` (the protocol's), the value before and the value now;
    one that returns nothing (pytorchrl's own signature) reports no value before."""
    update = protocols.capability(algorithm, protocols.Algorithm.update_algorithm_parameter)
    if update is None:
        raise UserError(f"{type(algorithm).__name__} takes no parameter changes during a run",
                        path=f"algorithm.{name}")
    result = update(name, value)
    return result if isinstance(result, tuple) and len(result) == 2 else (None, value)


def request(run_dir: Path, assignments: Sequence[str]) -> tuple[dict[str, Any], bool]:
    """Write the checked assignments as one request (atomically) for the run in ``run_dir``; returns them and
    whether a run is training there now (else the request waits for ``resume``)."""
    requested = checked_request(run_dir, assignments)
    training = in_use(run_dir)
    if not training:
        refuse_finished(run_dir)
    folder = own_folder(run_dir / REQUESTS)
    data = json.dumps({"changes": requested, "source": "rlplug set"}).encode()
    write_atomically(folder / f"{time.time_ns():020d}-{os.getpid()}.json", data)
    return requested, training


def refuse_finished(run_dir: Path) -> None:
    """``UserError`` for a run that trained all its frames (``summary.json`` says it finished, and its recipe asks
    for no more): no run would ever take a request, since ``resume`` of it trains nothing."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        total = read_toml(run_dir / "recipe.toml")["run"]["total_frames"]
        done = summary["status"] == "finished" and int(summary["frames"]) >= int(total)
    except (OSError, ValueError, KeyError, TypeError, UserError):  # no summary, or one of no finished run
        return
    if done:
        raise UserError(f"{run_dir}: the run has finished (all its {total} frames trained), so the change would never "
                        f"take effect; to train on with it, resume for more frames (python -m rlplug resume "
                        f"{run_dir} --set run.total_frames=MORE) and set it while that trains")


def change(run: Any, name: str, value: Any, source: str) -> tuple[Any, Any]:
    """Change ``name`` of ``run``'s algorithm (``run``: a :class:`~rlplug.run.trainer.Run`) and record it: a line
    of ``parameters.jsonl`` now, a metrics row (numbers only) at the start of the next iteration."""
    refuse_link(run.run_dir / RECORD)  # before the change: one that cannot be recorded is not made
    old, new = update_parameter(run.algorithm, name, value)
    line = {"frame": run.frames, "name": f"algorithm.{name}", "old": old, "new": new, "source": source}
    append_line(run.run_dir / RECORD, json.dumps(line))  # on disk before the request is removed
    if isinstance(new, (int, float)):
        run.parameter_rows[f"algorithm.{name}"] = float(new)
    return old, new


def take_requests(driver: Any) -> None:
    """At the start of an iteration: the requests waiting in the run directory applied, oldest first (each
    change one console line; a change the algorithm refuses, one warning), then every change since the last
    iteration logged as one metrics row. A driver without one algorithm (seeds together) has none."""
    if not hasattr(driver, "parameter_rows"):
        return
    for path in waiting(driver.run_dir):
        try:
            requested = json.loads(path.read_text())
            changes, source = dict(requested["changes"]), str(requested["source"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            warnings.warn(RlplugWarning(f"{path}: not a request of rlplug set ({type(error).__name__}); removed"),
                          stacklevel=2)
            changes, source = {}, ""
        for name, value in changes.items():
            try:
                old, new = change(driver, name, value, source)
            except UserError as error:
                warnings.warn(RlplugWarning(f"{path.name}: {error}; not changed"), stacklevel=2)
                continue
            print(f"rlplug: frame {driver.frames}: algorithm.{name} {old!r} -> {new!r} ({source})", flush=True)
        path.unlink(missing_ok=True)
    if driver.parameter_rows:
        for logger in driver.loggers:
            logger.log(dict(driver.parameter_rows), driver.frames)
        driver.parameter_rows.clear()


def waiting(run_dir: Path) -> list[Path]:
    """The requests waiting in ``run_dir``, oldest first; none in a folder that is a link (not the run's own)."""
    folder = run_dir / REQUESTS
    return sorted(folder.glob("[0-9]*.json")) if folder.is_dir() and not folder.is_symlink() else []


class RequestWatch:
    """Asked before each gradient step of one update (:func:`rlplug.core.training.end_updates_when`): whether a
    request waits, looked for every :data:`LOOK_EVERY` seconds; once one does, the update ends there and the run
    takes it before the next, so that an update of many epochs or gradient steps never keeps a change waiting."""

    def __init__(self, run_dir: Path):
        self.run_dir, self.seen = run_dir, False
        self.next_look = time.monotonic() + LOOK_EVERY

    def __call__(self) -> bool:
        if not self.seen and time.monotonic() >= self.next_look:
            self.seen = bool(waiting(self.run_dir))
            self.next_look = time.monotonic() + LOOK_EVERY
        return self.seen


def records(run_dir: Path) -> list[str]:
    """The whole lines of ``parameters.jsonl`` (a last one a kill cut short left out)."""
    path = run_dir / RECORD
    try:
        text = path.read_bytes().decode("utf-8", errors="replace") if not path.is_symlink() else ""
    except FileNotFoundError:
        return []
    return text.split("\n")[:-1]


def recorded(run_dir: Path) -> int:
    """How many changes ``parameters.jsonl`` records: those a checkpoint written now holds (every line of it is
    this run's: made by it, or again at its resume)."""
    return len(records(run_dir))


def made_again(run: Any, held: int | None, frame: int) -> None:
    """On resume: the changes ``parameters.jsonl`` records beyond the ``held`` first (those the checkpoint holds;
    None for a checkpoint from before they were counted: those from its ``frame`` on), made again in order, so
    that whatever the record says was changed is in force; one console line each, a warning for one the
    algorithm refuses now. Not recorded again: the record already lists them."""
    lines = records(run.run_dir)
    if held is None:
        held = 0
        for index, text in enumerate(lines):
            try:
                if int(json.loads(text)["frame"]) < frame:
                    held = index + 1
            except (ValueError, KeyError, TypeError):
                continue
    for number, text in enumerate(lines[held:], start=held + 1):
        try:
            line = json.loads(text)
            name, value = str(line["name"]).removeprefix("algorithm."), line["new"]
        except (ValueError, KeyError, TypeError, AttributeError):
            warnings.warn(RlplugWarning(f"{run.run_dir / RECORD}: line {number} is not a change rlplug recorded; "
                                        f"skipped"), stacklevel=2)
            continue
        try:
            old, new = update_parameter(run.algorithm, name, value)
        except UserError as error:
            warnings.warn(RlplugWarning(f"{run.run_dir / RECORD}: line {number}: {error}; not changed"), stacklevel=2)
            continue
        print(f"rlplug: frame {run.frames}: algorithm.{name} {old!r} -> {new!r} again, as {RECORD} records it after "
              f"the checkpoint", flush=True)
