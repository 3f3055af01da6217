"""The files of ``rlplug tune``: the search space it reads, and what it writes beside the study's database
(``trials.csv``, ``best.toml``, the plots). Errors in the space name the space file and the key."""

from __future__ import annotations

import copy
import csv
import io
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlplug import recipe as recipes
from rlplug.errors import UserError, did_you_mean
from rlplug.run.directory import write_atomically
from rlplug.run.tune import Dimension, Study, optuna

KINDS = {"float": ("low", "high", "log", "step"), "int": ("low", "high", "log", "step"), "categorical": ("choices",)}
EXAMPLE = '"algorithm.lr" = {type = "float", low = 1e-4, high = 3e-3, log = true}'
TOO_DEEP = (f"nested too deeply: a space file's tables, arrays and keys nest at most {recipes.MAX_NESTING} levels, "
            f"as a recipe's do")


def read_space(path: Path) -> list[Dimension]:
    """The dimensions of a space file: dotted recipe keys (quoted, or as nested tables) mapped to tables
    with ``type`` float, int or categorical."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"--space {path}: no such file; write one with lines like {EXAMPLE}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"--space {path}: cannot read it: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"invalid TOML: {error}", file=str(path)) from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise UserError(TOO_DEEP, file=str(path)) from None
    too_deep = recipes.nesting_beyond_limit(data)
    if too_deep is not None:  # before flatten(), which recurses as deep
        raise UserError(TOO_DEEP, file=str(path), path=too_deep)
    entries: dict[str, Any] = {}
    flatten(data, "", entries)
    if not entries:
        raise UserError(f"no keys to search; write lines like {EXAMPLE}", file=str(path))
    return [dimension(key, table, path) for key, table in entries.items()]


def flatten(data: dict[str, Any], prefix: str, entries: dict[str, Any]) -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and "type" not in value and value:
            flatten(value, dotted + ".", entries)
        else:
            entries[dotted] = value


def dimension(key: str, table: Any, path: Path) -> Dimension:
    def fail(message: str) -> UserError:
        return UserError(message, file=str(path), path=key)

    if not isinstance(table, dict):
        raise fail(f"expected a table like {{type = \"float\", low = 1e-4, high = 3e-3}}, got {table!r}")
    kind = table.get("type")
    if kind not in KINDS:
        hint = did_you_mean(str(kind), KINDS) if isinstance(kind, str) else ""
        raise fail(f"type {kind!r}{hint}: expected type = \"float\", \"int\" or \"categorical\"")
    for field in table:
        if field != "type" and field not in KINDS[kind]:
            raise fail(f"unknown field '{field}' for type {kind}{did_you_mean(field, KINDS[kind])}; "
                       f"fields: {', '.join(KINDS[kind])}")
    if kind == "categorical":
        choices = table.get("choices")
        if not isinstance(choices, list) or not choices:
            raise fail("categorical needs choices = [...], a list of at least one value")
        return Dimension(key, kind, choices=tuple(choices))
    number = int if kind == "int" else (int, float)
    for field in ("low", "high"):
        if field not in table:
            raise fail(f"{kind} needs low and high")
    for field in ("low", "high", "step"):
        value = table.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, number)):
            raise fail(f"{field} = {value!r}: expected {'a whole number' if kind == 'int' else 'a number'}")
    low, high, step, log = table["low"], table["high"], table.get("step"), table.get("log", False)
    if not isinstance(log, bool):
        raise fail(f"log = {log!r}: expected true or false")
    if low > high:
        raise fail(f"low = {low} is above high = {high}")
    if log and low <= 0:
        raise fail(f"log = true needs low > 0, got {low}")
    if step is not None and (step <= 0 or log):
        raise fail("step must be above 0, and cannot go with log = true")
    cast = int if kind == "int" else float
    return Dimension(key, kind, low=cast(low), high=cast(high), log=log,
                     step=None if step is None else cast(step))


def check_space(space: list[Dimension], study: Study, space_file: Path, seeds: list[int] | None,
                build: Callable[[Any, str], object] | None = None) -> None:
    """Every key with each bound of its distribution (each choice) set into the recipe, validated as ``--set``
    is and, with ``build`` (which raises a UserError where the recipe's env and algorithm cannot be built),
    built: an unknown key or a value no trial could run with is an error before the first trial."""
    for dimension in space:
        if seeds is not None and dimension.key == "run.seed":
            raise UserError("--seeds chooses the seeds; leave run.seed out of the space", file=str(space_file),
                            path=dimension.key)
        for label, value in dimension.samples().items():
            try:
                data = copy.deepcopy(study.base)
                recipes.set_value(data, dimension.key, value, file=str(space_file))
                recipe = recipes.validate(data, file=str(study.recipe_file))
            except UserError as error:
                if error.path == dimension.key and error.message.startswith("unknown key"):
                    raise UserError(error.message, file=str(space_file), path=dimension.key) from None
                if error.path == dimension.key or not error.path:
                    raise UserError(f"{label} = {value!r}: {error.message}", file=str(space_file),
                                    path=dimension.key) from None
                raise UserError(f"{label} = {value!r} makes the recipe invalid: {error}", file=str(space_file),
                                path=dimension.key) from None
            if build is not None:
                try:
                    build(recipe, f"{label} = {value!r} cannot run")
                except UserError as error:
                    raise UserError(str(error), file=str(space_file), path=dimension.key) from None


# -- what a study writes --------------------------------------------------------------------------------------


def write_trials_csv(study, path: Path) -> Path:
    """One row per trial: number, state, value, each parameter, the frame it got to, its run directory and
    why it failed if it did."""
    trials = study.get_trials(deepcopy=False)
    keys = sorted({key for trial in trials for key in trial.user_attrs.get("values", {})})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["number", "state", "value", *keys, "last_frame", "run_dir", "error"])
    for trial in trials:
        values = trial.user_attrs.get("values", {})
        last = max(trial.intermediate_values, default="")
        error = trial.user_attrs.get("error") or ("interrupted" if trial.system_attrs.get("rlplug_interrupted") else "")
        writer.writerow([trial.number, trial.state.name, "" if trial.value is None else trial.value,
                         *(format_value(values.get(key, "")) for key in keys), last,
                         trial.user_attrs.get("run_dir", ""), error])
    write_atomically(path, buffer.getvalue().encode())
    return path


def format_value(value: Any) -> str:
    import json

    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def write_best(study, tuned: Study, path: Path) -> tuple[Path, Any] | None:
    """The best trial's recipe, complete (every default filled in), as a file ``rlplug run`` takes as it
    is; None while no trial has finished."""
    import tomli_w

    if not study.get_trials(deepcopy=False, states=(optuna().trial.TrialState.COMPLETE,)):
        return None
    best = study.best_trial
    values = best.user_attrs.get("values", {})
    recipe = recipes.validate(tuned.recipe_data(values), file=str(tuned.recipe_file))
    objective = "the IQM of the final mean eval returns over seeds " + ",".join(map(str, tuned.seeds)) \
        if tuned.seeds else "the final mean eval return"
    header = (f"# rlplug tune: the best of {len(study.trials)} trials in {tuned.out} by {objective}: "
              f"trial {best.number}, {best.value:.6g}\n"
              f"# {tuned.recipe_file} with: {', '.join(f'{k} = {format_value(v)}' for k, v in values.items())}\n")
    write_atomically(path, (header + tomli_w.dumps(recipe.resolved())).encode())
    return path, best


def write_plots(study, out: Path) -> tuple[list[Path], list[str]]:
    """Optuna's optimisation history and parameter importances as PNG; the ones it cannot draw yet (too
    few finished trials) are named with why."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from optuna.visualization import matplotlib as plots

    from rlplug.run.statistics import save

    written, skipped = [], []
    for name, draw in (("optimization_history", plots.plot_optimization_history),
                       ("param_importances", plots.plot_param_importances)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                axes: Any = draw(study)  # an Axes, or an array of them (one per objective)
                figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
                figure.set_size_inches(8, 5)
                save(figure, out / f"{name}.png")
                pyplot.close(figure)
            written.append(out / f"{name}.png")
        except (ValueError, RuntimeError, ZeroDivisionError) as error:
            pyplot.close("all")
            skipped.append(f"{name} ({error})")
    return written, skipped
