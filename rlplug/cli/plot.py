"""``python -m rlplug plot RUN_DIR... -o curve.png``: learning curves of runs (:mod:`rlplug.run.curves`), or with
``--aggregate`` rliable's estimates over their seeds (:mod:`rlplug.run.statistics`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlplug.errors import UserError
from rlplug.run.curves import (
    BANDS,
    METRIC_LABELS,
    base_label,
    describe_groups,
    expand_run_dirs,
    group_runs,
    read_runs,
    write_plot,
)
from rlplug.run.directory import writing_output


def add_commands(subparsers) -> None:
    """Adds ``plot``."""
    parser = subparsers.add_parser(
        "plot", help="learning curves (return against frames) of runs; seeds of one recipe are averaged",
        description="Plot learning curves from runs' metrics.csv. Runs with the same recipe apart from run.seed "
                    "are one group: their mean with a shaded band across runs.")
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR",
                        help="run directories (a directory of runs, as run --seeds writes, stands for all of them)")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                        help="the image to write (.png; .svg and .pdf work too)")
    parser.add_argument("--metric", help="the metrics.csv column to plot: episode_return (default for curves; "
                        "training episodes) or eval_return_mean (the periodic evaluations; default with --aggregate, "
                        "and for curves of offline runs, which play no training episodes), or any other column")
    parser.add_argument("--title", help="the figure's title (default: the metric and the env)")
    parser.add_argument("--band", choices=BANDS, default="minmax",
                        help="shaded band of a group: minmax (default: from the lowest to the highest run) or "
                             "std (mean +- one standard deviation across runs)")
    parser.add_argument("--aggregate", action="store_true",
                        help="instead of curves, each recipe's final values over its runs (seeds) with rliable: "
                             "interval estimates of the median, IQM, mean and optimality gap (95%% stratified "
                             "bootstrap) into -o, performance profiles into -o's name with -profile; runs of one env")
    parser.add_argument("--gap-threshold", type=float, metavar="RETURN",
                        help="with --aggregate: the return the optimality gap is measured to (default: the env's "
                             "reward_threshold in gymnasium's registry; none known: no optimality gap)")
    parser.set_defaults(handler=cmd_plot)


def cmd_plot(args: argparse.Namespace) -> int:
    if args.aggregate:
        return cmd_aggregate(args)
    if args.gap_threshold is not None:
        raise UserError("--gap-threshold sets the optimality gap of plot --aggregate; give --aggregate too")
    output, groups = write_plot(args.run_dirs, args.output, args.metric or default_metric(args.run_dirs),
                                title=args.title, band=args.band)
    print(f"wrote {output}: {describe_groups(groups)}")
    return 0


def default_metric(run_dirs: list[Path]) -> str:
    """``episode_return``, or ``eval_return_mean`` where every run is an offline one (its recipe has a
    ``[dataset]``): those play no training episodes."""
    import tomllib

    def offline(run_dir: Path) -> bool:
        try:
            return "dataset" in tomllib.loads((run_dir / "recipe.toml").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return False

    return "eval_return_mean" if run_dirs and all(map(offline, run_dirs)) else "episode_return"


def cmd_aggregate(args: argparse.Namespace) -> int:
    """``plot --aggregate``: rliable's estimates and profiles of each group's final values (rlplug.run.statistics)."""
    from rlplug.run.statistics import plot_aggregates, reward_threshold

    metric, output = args.metric or "eval_return_mean", Path(args.output)
    if output.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UserError(f"-o {output}: cannot write {output.suffix or '(no suffix)'} images; use .png, .svg or .pdf")
    groups = group_runs(read_runs(expand_run_dirs([Path(d) for d in args.run_dirs]), metric))
    envs = sorted({str((g.runs[0].recipe or {}).get("env", {}).get("id") or base_label(g)) for g in groups})
    if len(envs) > 1:
        raise UserError(f"--aggregate: the runs are on several envs ({', '.join(envs)}), whose returns are on "
                        f"different scales; rlplug does not normalise them: aggregate each env's runs apart")
    threshold = args.gap_threshold if args.gap_threshold is not None else reward_threshold(envs[0])
    scores = {group.label: [run.values[-1] for run in group.runs] for group in groups}
    label = f"final {METRIC_LABELS.get(metric, metric)}"
    with writing_output("-o", output, "the plots"):
        intervals, profiles, estimates = plot_aggregates(scores, output, gap_threshold=threshold, xlabel=label)
    print(f"wrote {intervals} (interval estimates) and {profiles} (performance profiles): {describe_groups(groups)}")
    for name, metrics in estimates.items():
        shown = ", ".join(f"{m} {p:.4g} [{lo:.4g}, {hi:.4g}]" for m, (p, lo, hi) in metrics.items())
        print(f"{name}: {shown}")
    if threshold is None:
        print(f"no optimality gap: {envs[0]} has no reward_threshold in gymnasium's registry; give --gap-threshold")
    return 0
