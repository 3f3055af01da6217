"""Parameters changed while a run goes on, as the run sees them: ``rlplug set``'s requests (files in the run
directory, checked against its stored recipe before they are written), taken by the run at the start of its
next iteration, and the record of every change: a line of ``parameters.jsonl`` (frame, name, old, new,
source), a row of the run's metrics, and, for a request, a line on the console. What a change does to the
algorithm is :mod:`rlplug.plugins.algorithms.parameters`'.

A request waits in ``set-requests/`` until a run takes it: the one training in the directory now, or the
next ``resume``. Seeds trained together (``--seeds --batched``) share one update, so their directories
take no requests."""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlplug.errors import RlplugWarning, UserError
from rlplug.plugins.algorithms import parameters
from rlplug.recipe import apply_override, read_toml, validate
from rlplug.run.directory import BATCHED_MARKER, in_use, write_atomically

#: the folder of a run directory where ``rlplug set`` leaves its requests, one JSON file each
REQUESTS = "set-requests"
#: every change made to a run's algorithm, one JSON object a line
RECORD = "parameters.jsonl"


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
    config_class = getattr(algorithm.spec.factory, "config_class", None)
    if config_class is None:
        raise UserError(f"{algorithm.title} is not a built-in algorithm: it has no parameters that change during "
                        f"a run", file=str(recipe_file), path="algorithm")
    try:
        return checked_values(data, algorithm, config_class, assignments, str(recipe_file))
    except UserError as error:
        raise error.located(file=error.file or str(recipe_file)) from None


def checked_values(data: dict[str, Any], algorithm: Any, config_class: type, assignments: Sequence[str],
                   file: str) -> dict[str, Any]:
    requested: dict[str, Any] = {}
    for text in assignments:
        key, sep, _ = text.partition("=")
        name = key.strip().removeprefix("algorithm.")
        if not sep or not key.strip().startswith("algorithm.") or not name:
            raise UserError(f"set {text!r}: expected algorithm.NAME=VALUE (e.g. algorithm.lr=1e-4); other recipe "
                            f"keys change with resume --set")
        parameters.annotation_of(config_class, algorithm.params, name)  # a name that cannot change: refused first
        scratch: dict[str, Any] = {}
        apply_override(scratch, text, file=file)
        value: Any = scratch
        for part in key.strip().split("."):
            value = value[part]
        apply_override(data, text, file=file)
        requested[name] = value
    changed = validate(data, file=file).algorithm  # the values by the recipe's rules, together
    for name, value in requested.items():
        parameters.checked(config_class, changed.params, name, value)
    return requested


def request(run_dir: Path, assignments: Sequence[str]) -> tuple[dict[str, Any], bool]:
    """Write the checked assignments as one request (atomically) for the run in ``run_dir``; returns them and
    whether a run is training there now (else the request waits for ``resume``)."""
    requested = checked_request(run_dir, assignments)
    folder = run_dir / REQUESTS
    folder.mkdir(exist_ok=True)
    data = json.dumps({"changes": requested, "source": "rlplug set"}).encode()
    write_atomically(folder / f"{time.time_ns():020d}-{os.getpid()}.json", data)
    return requested, in_use(run_dir)


def change(run: Any, name: str, value: Any, source: str) -> tuple[Any, Any]:
    """Change ``name`` of ``run``'s algorithm (``run``: a :class:`~rlplug.run.trainer.Run`) and record it: a line
    of ``parameters.jsonl`` now, a metrics row (numbers only) at the start of the next iteration."""
    old, new = parameters.update(run.algorithm, name, value)
    line = {"frame": run.frames, "name": f"algorithm.{name}", "old": old, "new": new, "source": source}
    with open(run.run_dir / RECORD, "a") as record:
        record.write(json.dumps(line) + "\n")
    if isinstance(new, (int, float)):
        run.parameter_rows[f"algorithm.{name}"] = float(new)
    return old, new


def take_requests(driver: Any) -> None:
    """At the start of an iteration: the requests waiting in the run directory applied, oldest first (each
    change one console line; a change the algorithm refuses, one warning), then every change since the last
    iteration logged as one metrics row. A driver without one algorithm (seeds together) has none."""
    if not hasattr(driver, "parameter_rows"):
        return
    folder = driver.run_dir / REQUESTS
    for path in sorted(folder.glob("[0-9]*.json")) if folder.is_dir() else []:
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
