"""Aggregates of final returns over seeds, with confidence intervals, by rliable (Agarwal et al. 2021).

The scores of one recipe are its runs' final evaluation returns, as rliable's score matrix ``[runs, tasks]``
with one task (the recipe's env): every number below is rliable's own metric on that matrix, and every
interval its stratified bootstrap (``rliable.library.get_interval_estimates``, percentile method).

- ``iqm``: the interquartile mean (the middle half of the runs);
- ``mean``;
- ``median``: rliable's, the median over tasks of each task's mean; with one task it equals the mean;
- ``optimality_gap``: how far the runs fall short of ``gap_threshold`` on average (returns above it count as
  it), ``rliable.metrics.aggregate_optimality_gap(scores, gamma=gap_threshold)``. The threshold is in the
  env's return units: ``--gap-threshold``, or by default the env's ``reward_threshold`` in gymnasium's
  registry (CartPole-v1: 475); an env without one has no optimality gap unless a threshold is given.

Returns are taken as they are: nothing is normalised, so recipes on different envs are not aggregated or
plotted together (normalising each env's returns is a choice rlplug leaves to its user).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from rlplug.errors import UserError

#: Bootstrap replications for each interval (rliable's own default for performance profiles).
BOOTSTRAP_REPS = 2000
CONFIDENCE = 0.95
#: The bootstrap's random seed: the same returns give the same intervals.
BOOTSTRAP_SEED = 0
#: rliable's metrics by the names aggregate.json uses, in the order plots show them.
METRICS = ("median", "iqm", "mean", "optimality_gap")
TITLES = {"median": "Median", "iqm": "IQM", "mean": "Mean", "optimality_gap": "Optimality gap"}


def rliable():
    """``(library, metrics)`` of rliable, imported on first use (slow to import: arch, scipy, statsmodels)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from rliable import library, metrics
    except ImportError as error:
        raise UserError(f"the aggregates need rliable ({error}): pip install rliable") from None
    return library, metrics


def reward_threshold(env_id: str | None) -> float | None:
    """gymnasium's ``reward_threshold`` of ``env_id`` (the return that counts as solving it), or None."""
    if not env_id:
        return None
    try:
        import gymnasium

        threshold = gymnasium.spec(env_id).reward_threshold
    except Exception:  # not a registered id (a plugin's env): no threshold known
        return None
    return None if threshold is None else float(threshold)


def metric_function(gap_threshold: float | None):
    """``scores [runs, tasks] -> [median, iqm, mean, optimality gap]`` (the gap left out without a threshold)."""
    _, metrics = rliable()
    functions = [metrics.aggregate_median, metrics.aggregate_iqm, metrics.aggregate_mean]
    if gap_threshold is not None:
        functions.append(lambda scores: metrics.aggregate_optimality_gap(scores, gamma=gap_threshold))
    return lambda scores: np.array([function(scores) for function in functions])


def interval_estimates(scores: Mapping[str, np.ndarray], gap_threshold: float | None, *,
                       reps: int = BOOTSTRAP_REPS) -> dict[str, dict[str, tuple[float, float, float]]]:
    """``{name: {metric: (point, low, high)}}`` for each score matrix ``[runs, tasks]`` in ``scores``."""
    library, _ = rliable()
    names = [m for m in METRICS if m != "optimality_gap" or gap_threshold is not None]
    estimates: dict[str, dict[str, tuple[float, float, float]]] = {}
    for name, matrix in scores.items():  # one at a time: a group's interval never depends on the others
        with warnings.catch_warnings(), numpy_seeded(BOOTSTRAP_SEED):
            warnings.simplefilter("ignore", FutureWarning)  # arch's notice that its RandomState argument will change
            points, intervals = library.get_interval_estimates(
                {name: matrix}, metric_function(gap_threshold), reps=reps, confidence_interval_size=CONFIDENCE,
                random_state=np.random.RandomState(BOOTSTRAP_SEED))
        estimates[name] = {metric: (float(points[name][i]), float(intervals[name][0, i]),
                                    float(intervals[name][1, i])) for i, metric in enumerate(names)}
    return estimates


@contextmanager
def numpy_seeded(seed: int) -> Iterator[None]:
    """numpy's global generator seeded with ``seed`` inside, as it was after: rliable 1.2.0's
    ``StratifiedBootstrap`` draws its resampled indices from it and ignores its ``random_state``, so without
    this the same returns got other intervals after anything else had drawn from numpy (a training run)."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def aggregate_returns(returns: Mapping[int, float], *, gap_threshold: float | None = None,
                      reps: int = BOOTSTRAP_REPS) -> dict[str, Any]:
    """What ``aggregate.json`` holds for final returns by seed: ``seeds``, ``mean``, ``std``, ``iqm``,
    ``median``, ``optimality_gap`` (None without a threshold) and ``gap_threshold``, the 95% intervals of
    the four rliable metrics under ``ci95`` (``[low, high]``), and how they were computed (``bootstrap``)."""
    values = np.array([float(v) for v in returns.values()], dtype=float)
    if values.size == 0:
        raise ValueError("no returns to aggregate")
    estimates = interval_estimates({"recipe": values.reshape(-1, 1)}, gap_threshold, reps=reps)["recipe"]
    result: dict[str, Any] = {"seeds": {str(k): float(v) for k, v in returns.items()},
                              "mean": estimates["mean"][0], "std": float(values.std()), "iqm": estimates["iqm"][0],
                              "median": estimates["median"][0]}
    gap = estimates.get("optimality_gap")
    result["optimality_gap"] = gap[0] if gap else None
    result["gap_threshold"] = gap_threshold
    result["ci95"] = {metric: [estimates[metric][1], estimates[metric][2]] if metric in estimates else None
                      for metric in METRICS}
    result["bootstrap"] = {"library": "rliable", "method": "stratified bootstrap, percentile intervals",
                           "reps": reps, "confidence": CONFIDENCE, "seed": BOOTSTRAP_SEED}
    return result


def describe_aggregate(aggregate: Mapping[str, Any]) -> str:
    """One line: each metric with its interval."""
    parts = []
    for metric in ("iqm", "mean", "median", "optimality_gap"):
        value, interval = aggregate.get(metric), (aggregate.get("ci95") or {}).get(metric)
        if value is None:
            continue
        if interval is None:
            raise ValueError(f"the aggregate has a {metric} but no 95% interval for it (ci95)")
        name = {"iqm": "interquartile mean"}.get(metric, metric)
        if metric == "optimality_gap":  # present only with a threshold
            name = f"optimality gap (to {aggregate['gap_threshold']:g})"
        parts.append(f"{name} {value:.4g} [{interval[0]:.4g}, {interval[1]:.4g}]")
    return ", ".join(parts) + f" (95% intervals, {aggregate['bootstrap']['reps']} bootstrap samples)"


# -- plots over several recipes ------------------------------------------------------------------------------


def plot_aggregates(scores: Mapping[str, Sequence[float]], output: Path, *, gap_threshold: float | None,
                    xlabel: str, reps: int = BOOTSTRAP_REPS) -> tuple[Path, Path, dict]:
    """rliable's interval estimates (median, IQM, mean, optimality gap) of each group's final returns into
    ``output``, and its performance profiles (the fraction of runs above each return, with 95% bands) into
    ``output``'s name with ``-profile``. Returns both paths and the estimates."""
    library, _ = rliable()
    import matplotlib

    matplotlib.use("Agg")  # no display: rliable draws through pyplot
    from matplotlib import pyplot
    from rliable import plot_utils

    matrices = {name: np.asarray(values, dtype=float).reshape(-1, 1) for name, values in scores.items()}
    estimates = interval_estimates(matrices, gap_threshold, reps=reps)
    names = list(matrices)
    metrics = list(next(iter(estimates.values())))
    points = {name: np.array([estimates[name][m][0] for m in metrics]) for name in names}
    intervals = {name: np.array([[estimates[name][m][1] for m in metrics], [estimates[name][m][2] for m in metrics]])
                 for name in names}
    profile_path = output.with_name(f"{output.stem}-profile{output.suffix}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row_height = 0.8  # inches per recipe; the axis label goes about half an inch under the axes
        figure, _ = plot_utils.plot_interval_estimates(
            points, intervals, [TITLES[m] for m in metrics], names, xlabel=xlabel, subfigure_width=3.6,
            row_height=row_height, xlabel_y_coordinate=-0.55 / (row_height * len(names)))
        save(figure, output)
        pyplot.close(figure)
        everything = np.concatenate([m.reshape(-1) for m in matrices.values()])
        low, high = float(everything.min()), float(everything.max())
        taus = np.linspace(low - 0.05 * (high - low or 1), high + 0.05 * (high - low or 1), 101)
        with numpy_seeded(BOOTSTRAP_SEED):  # its bands are the same bootstrap's
            profiles, bands = library.create_performance_profile(matrices, taus, reps=reps)
        figure, axes = pyplot.subplots(figsize=(8, 5), layout="constrained")
        plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=bands, ax=axes,
                                             xlabel=f"{xlabel} (tau)", ylabel="fraction of runs with return > tau",
                                             legend=True, legendsize="medium", labelsize="large",
                                             ticklabelsize="medium")
        save(figure, profile_path)
        pyplot.close(figure)
    return output, profile_path, estimates


def save(figure, path: Path) -> None:
    """``figure`` into ``path`` by way of a temporary file: a kill never leaves half an image."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.partial{path.suffix}")
    try:
        figure.savefig(temporary, format=path.suffix.lstrip(".").lower(), bbox_inches="tight")
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)
