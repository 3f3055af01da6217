"""Learning curves, return against frames, of run directories (``rlplug plot`` and ``run --seeds`` draw them).

Each run is read from its ``metrics.csv`` (the ``csv`` logger's) and its ``recipe.toml``. Runs whose
resolved recipes are the same apart from ``run.seed`` (and the ``[provenance]`` table, which records plugin
versions rather than choices) form a group, drawn as the mean across its runs with a shaded band (min to max,
or mean +- one standard deviation) over the faint individual curves; a group of one run is its plain curve.
Groups are named by algorithm and env, plus the recipe keys that tell apart groups that share those.

:func:`plot_runs` draws them (``rlplug run --seeds`` calls it for its aggregate plot).
A directory without ``metrics.csv`` whose subdirectories are runs (what ``run --seeds`` writes) stands for
those runs.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlplug.errors import UserError
from rlplug.run.directory import writing_output

#: Axis labels of the metrics people plot most.
METRIC_LABELS = {
    "episode_return": "training return (mean of the last 20 episodes)",
    "eval_return_mean": "evaluation return (deterministic policy, mean over episodes)",
}
BANDS = ("minmax", "std")
#: Recipe keys that never tell groups apart.
IGNORED_KEYS = ("run.seed",)


@dataclass
class RunCurve:
    """One run's curve of ``metric`` against frames."""

    run_dir: Path
    frames: list[float]
    values: list[float]
    recipe: dict[str, Any] | None

    @property
    def seed(self) -> Any:
        return (self.recipe or {}).get("run", {}).get("seed")


@dataclass
class Group:
    """Runs of one recipe (seeds apart)."""

    runs: list[RunCurve]
    label: str = ""


def plot_runs(run_dirs: Sequence[Path], output: Path, metric: str = "episode_return", *, title: str | None = None,
              band: str = "minmax") -> Path:
    """Plot ``metric`` against frames for ``run_dirs`` into ``output`` (format from its suffix); returns
    ``output``. Runs sharing a recipe apart from the seed become one mean curve with a band (``band``:
    "minmax" or "std"). Bad input (no such directory, no metrics.csv, no values of ``metric``) is a
    :class:`UserError` raised before anything is written."""
    return write_plot(run_dirs, output, metric, title=title, band=band)[0]


def frames_label(runs: Sequence[RunCurve]) -> str:
    """The x axis's words: an offline run's ``frames`` count the samples it learned from (``run.total_frames``
    of a run with a ``[dataset]``), not env steps."""
    offline = [run.recipe is not None and "dataset" in run.recipe for run in runs]
    if offline and all(offline):
        return "frames (samples learned from: gradient steps x batch_size)"
    if any(offline):
        return "frames (environment steps; for offline runs, samples learned from)"
    return "frames (environment steps)"


def write_plot(run_dirs: Sequence[Path], output: Path, metric: str, *, title: str | None,
               band: str) -> tuple[Path, list[Group]]:
    """:func:`plot_runs`, also returning the groups drawn."""
    if band not in BANDS:
        raise UserError(f"band must be one of {', '.join(BANDS)}, got {band!r}")
    output = Path(output)
    runs = read_runs(expand_run_dirs([Path(d) for d in run_dirs]), metric)
    groups = group_runs(runs)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError("plot needs matplotlib: pip install matplotlib") from None

    figure = Figure(figsize=(9, 5.5), dpi=110, layout="constrained")
    canvas = FigureCanvasAgg(figure)  # no pyplot: nothing global changes, no display is needed
    fmt = output.suffix.lower().lstrip(".")
    if fmt not in canvas.get_supported_filetypes():
        raise UserError(f"-o {output}: cannot write .{fmt or '(no suffix)'} images; use .png, .svg or .pdf")
    axes = figure.subplots()
    draw(axes, groups, band)
    axes.set_xlabel(frames_label(runs))
    axes.set_ylabel(METRIC_LABELS.get(metric, metric))
    axes.set_title(title if title is not None else default_title(metric, runs), fontsize=12)
    axes.xaxis.set_major_formatter(frames_formatter())
    axes.grid(True, alpha=0.3)
    axes.set_xlim(left=0)
    place_legend(figure, axes)

    temporary = output.with_name(f".{output.stem}.partial{output.suffix}")
    with writing_output("-o", output, "the plot"):
        output.parent.mkdir(parents=True, exist_ok=True)
        try:
            figure.savefig(temporary, format=fmt)
            temporary.replace(output)
        finally:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
    return output, groups


# -- reading ------------------------------------------------------------------------------------------------


def expand_run_dirs(run_dirs: Sequence[Path]) -> list[Path]:
    """The run directories: each given one, or the runs inside a directory of runs; errors for the rest."""
    found: list[Path] = []
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            what = "no such directory" if not run_dir.exists() else "not a directory"
            raise UserError(f"{run_dir}: {what}; plot takes run directories (the --out of rlplug run)")
        if (run_dir / "metrics.csv").is_file():
            found.append(run_dir)
            continue
        inner = sorted((d for d in run_dir.iterdir() if d.is_dir() and (d / "metrics.csv").is_file()),
                       key=natural_key)
        if not inner:
            raise UserError(f"{run_dir}: no metrics.csv in it (the csv logger writes one); is it a run directory?")
        found.extend(inner)
    unique: dict[Path, Path] = {}
    for run_dir in found:  # a run named twice is drawn once
        unique.setdefault(run_dir.resolve(), run_dir)
    return list(unique.values())


def natural_key(path: Path) -> list:
    """``seed-2`` before ``seed-10``."""
    import re

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def read_runs(run_dirs: Sequence[Path], metric: str) -> list[RunCurve]:
    runs, columns = [], set()
    for run_dir in run_dirs:
        frames, values, header = read_metric(run_dir / "metrics.csv", metric)
        columns.update(header)
        if metric not in header:
            continue
        if not values:
            raise UserError(f"{run_dir / 'metrics.csv'}: no values of {metric} yet (the run logs it "
                            f"{'at its evaluations' if metric.startswith('eval_') else 'once episodes end'})")
        runs.append(RunCurve(run_dir, frames, values, read_recipe(run_dir)))
    if len(runs) < len(run_dirs):
        from rlplug.errors import did_you_mean

        missing = next(d for d in run_dirs if d not in {r.run_dir for r in runs})
        known = sorted(columns - {"frames"})
        raise UserError(f"{missing / 'metrics.csv'}: no column {metric}{did_you_mean(metric, known)}; "
                        f"--metric takes one of: {', '.join(known)}")
    return runs


def read_metric(path: Path, metric: str) -> tuple[list[float], list[float], list[str]]:
    """``(frames, values, header)``: the rows of ``path`` with a finite ``metric``, by frames (the last row
    of a frame count wins)."""
    try:
        with path.open(newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            header = list(reader.fieldnames or [])
            by_frames: dict[float, float] = {}
            if metric in header and "frames" in header:
                for row in reader:
                    try:
                        frames, value = float(row["frames"]), float(row[metric])
                    except (TypeError, ValueError):  # an empty cell: the metric was not logged in that row
                        continue
                    if math.isfinite(frames) and math.isfinite(value):
                        by_frames[frames] = value
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise UserError(f"{path}: cannot read it ({error})") from None
    if header and "frames" not in header:
        raise UserError(f"{path}: not an rlplug metrics file (no frames column)")
    ordered = sorted(by_frames.items())
    return [f for f, _ in ordered], [v for _, v in ordered], header


def read_recipe(run_dir: Path) -> dict[str, Any] | None:
    """The run's resolved recipe, or None where it has none (or none readable): such a run is its own group."""
    try:
        return tomllib.loads((run_dir / "recipe.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None


# -- grouping -----------------------------------------------------------------------------------------------


def recipe_key(recipe: dict[str, Any] | None, run_dir: Path) -> str:
    """What runs of one group share: the recipe without its seed and provenance."""
    if recipe is None:
        return f"no recipe: {run_dir.resolve()}"
    return json.dumps(flatten(recipe_without_seed(recipe)), sort_keys=True, default=str)


def recipe_without_seed(recipe: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in recipe.items() if k != "provenance"}
    if isinstance(kept.get("run"), dict):
        kept["run"] = {k: v for k, v in kept["run"].items() if k != "seed"}
    return kept


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [{"d": 2}]}`` -> ``{"a.b": 1, "c.0.d": 2}``."""
    items: Iterable[tuple[str, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, inner in items:
        flat.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    if not flat and prefix:
        flat[prefix] = value  # an empty table or list still says something
    return flat


def group_runs(runs: Sequence[RunCurve]) -> list[Group]:
    """Runs grouped by recipe (seeds apart), in the order they were given, each group labelled."""
    groups: dict[str, Group] = {}
    for run in runs:
        groups.setdefault(recipe_key(run.recipe, run.run_dir), Group([])).runs.append(run)
    label_groups(list(groups.values()))
    return list(groups.values())


def short_name(name: Any) -> str:
    """``rlplug:ppo`` -> ``ppo``."""
    return str(name).rpartition(":")[2]


def base_label(group: Group) -> str:
    recipe = group.runs[0].recipe
    if recipe is None:
        return group.runs[0].run_dir.name
    algorithm = short_name((recipe.get("algorithm") or {}).get("use", "?"))
    env = recipe.get("env") or {}
    return f"{algorithm} on {env.get('id') or short_name(env.get('use', '?'))}"


#: Recipe keys that change what is learnt, named first when telling groups apart; the rest (evaluation,
#: loggers, threads) only when nothing else differs.
LEARNING_PREFIXES = ("algorithm.", "env.", "run.total_frames")


def label_groups(groups: list[Group]) -> None:
    """Each group's legend label: algorithm and env, and where groups share those, the keys that differ."""
    bases = [base_label(g) for g in groups]
    flats = [flatten(recipe_without_seed(g.runs[0].recipe)) if g.runs[0].recipe is not None else {} for g in groups]
    for index, group in enumerate(groups):
        label = bases[index]
        rivals = [i for i, base in enumerate(bases) if base == label and i != index]
        if rivals and group.runs[0].recipe is not None:
            mine = flats[index]
            differing = sorted(key for key in set(mine).union(*(flats[i] for i in rivals))
                               if any(flats[i].get(key) != mine.get(key) for i in rivals))
            learning = [key for key in differing if key.startswith(LEARNING_PREFIXES)]
            differing = learning or [key for key in differing if not key.startswith("loggers")] or differing
            shown = [f"{key}={format_value(mine.get(key))}" for key in differing[:3]]
            if len(differing) > 3:
                shown.append(f"+{len(differing) - 3} more")
            if shown:
                label += f", {', '.join(shown)}"
        seeds = [run.seed for run in group.runs if run.seed is not None]
        if len(group.runs) > 1:
            label += f" ({len(group.runs)} runs" + (f", seeds {', '.join(map(str, seeds))}" if seeds else "") + ")"
        elif seeds:
            label += f" (seed {seeds[0]})"
        group.label = label


def format_value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def describe_groups(groups: Sequence[Group]) -> str:
    runs = sum(len(g.runs) for g in groups)
    return (f"{runs} run{'s' * (runs != 1)} in {len(groups)} group{'s' * (len(groups) != 1)}: "
            + "; ".join(g.label for g in groups))


# -- drawing ------------------------------------------------------------------------------------------------


def aggregate(group: Group, band: str):
    """``(frames, mean, low, high)`` of a group's runs on the frames where all of them have values (each
    run's curve linearly interpolated there), or None where they share no span."""
    import numpy as np

    start = max(run.frames[0] for run in group.runs)
    end = min(run.frames[-1] for run in group.runs)
    if start > end:
        return None
    grid = np.unique(np.concatenate([np.asarray(run.frames) for run in group.runs]))
    grid = grid[(grid >= start) & (grid <= end)]
    curves = np.stack([np.interp(grid, run.frames, run.values) for run in group.runs])
    mean = curves.mean(axis=0)
    if band == "std":
        spread = curves.std(axis=0)
        return grid, mean, mean - spread, mean + spread
    return grid, mean, curves.min(axis=0), curves.max(axis=0)


def draw(axes, groups: Sequence[Group], band: str) -> None:
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors  # type: ignore[attr-defined]  # a ListedColormap
    band_name = "min to max" if band == "minmax" else "mean +- std"
    for index, group in enumerate(groups):
        color = palette[index % len(palette)]
        if len(group.runs) == 1:
            run = group.runs[0]
            axes.plot(run.frames, run.values, color=color, linewidth=1.8, label=group.label,
                      marker="o" if len(run.frames) <= 12 else None, markersize=4)
            continue
        for run in group.runs:
            axes.plot(run.frames, run.values, color=color, linewidth=0.8, alpha=0.35)
        summary = aggregate(group, band)
        if summary is None:  # the runs cover disjoint spans: their curves alone
            axes.plot([], [], color=color, linewidth=0.8, label=f"{group.label} (no common frames to average)")
            continue
        grid, mean, low, high = summary
        few = len(grid) <= 12
        axes.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)
        axes.plot(grid, mean, color=color, linewidth=2.2, marker="o" if few else None, markersize=4,
                  label=f"{group.label}: mean, band {band_name}")


#: Legend labels are wrapped at this many characters.
LABEL_WIDTH = 90


def place_legend(figure, axes) -> None:
    """Inside the axes when the labels are few and short; otherwise under them, where no curve is hidden."""
    import textwrap

    handles, labels = axes.get_legend_handles_labels()
    labels = [textwrap.fill(label, LABEL_WIDTH, subsequent_indent="  ") for label in labels]
    if len(labels) <= 3 and all(len(label) <= 60 and "\n" not in label for label in labels):
        axes.legend(handles, labels, loc="best", fontsize=9, framealpha=0.9)
    else:
        figure.legend(handles, labels, loc="outside lower center", fontsize=9, frameon=False,
                      ncols=2 if len(labels) > 4 else 1)


def frames_formatter():
    from matplotlib.ticker import FuncFormatter

    def format_frames(value: float, _position) -> str:
        magnitude = abs(value)
        if magnitude >= 1e6:
            return f"{value / 1e6:g}M"
        if magnitude >= 1e3:
            return f"{value / 1e3:g}k"
        return f"{value:g}"

    return FuncFormatter(format_frames)


def default_title(metric: str, runs: Sequence[RunCurve]) -> str:
    what = {"episode_return": "Training return", "eval_return_mean": "Evaluation return"}.get(metric, metric)
    envs = {str((run.recipe or {}).get("env", {}).get("id") or "") for run in runs}
    envs.discard("")
    return f"{what} on {envs.pop()}" if len(envs) == 1 else what
