"""Several seeds of one recipe: one run each under ``OUT/seed-N``, one after another or trained together
(``--batched``: :class:`~rlplug.run.batched.BatchedRun`), then their aggregate (``aggregate.json``) and one plot
(``curve.png``). ``rlplug run --seeds`` and ``rlplug tune --seeds`` call these; how a run is trained (the CLI's
signal handling) is the caller's ``train``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlplug.errors import UserError
from rlplug.recipe import Recipe

#: how a caller trains one run (or seeds together) to its end: the exit status, 0 when it finished
Train = Callable[[Any], int]


def train_seeds(recipe_by_seed: dict[int, Recipe], out: Path, *, batched: bool, gap_threshold: float | None,
                train: Train, file: str | None = None) -> int:
    """Each seed's recipe trained into ``out/seed-N`` (in turn, or together when ``batched``), then the aggregate
    over the seeds that finished; the first non-zero status of ``train`` stops there and is returned."""
    from rlplug.run.directory import check_run_dir

    check_run_dir(out)
    seeds = list(recipe_by_seed)
    if batched:
        from rlplug.run.batched import BatchedRun

        try:
            together = BatchedRun.build(list(recipe_by_seed.values()), out, {"gap_threshold": gap_threshold})
        except UserError as error:
            raise error.located(file=file) from None
        return train_batched(together, gap_threshold, train)
    from rlplug.run.trainer import Run

    for index, (seed, recipe) in enumerate(recipe_by_seed.items()):
        print(f"seed {seed} ({index + 1} of {len(seeds)})", flush=True)
        status = train(Run.build(recipe, out / f"seed-{seed}"))
        if status:
            return status
    write_aggregate(out, {seed: final_return(out / f"seed-{seed}") for seed in seeds}, recipe_by_seed[seeds[0]],
                    gap_threshold)
    return 0


def train_batched(batched: Any, gap_threshold: float | None, train: Train) -> int:
    """Seeds trained together until done or stopped; the aggregate over the seeds that did not diverge, and one
    line naming those that did."""
    status = train(batched)
    if status:
        return status
    finished = [seed for seed in batched.seeds if seed not in batched.diverged]
    if finished:
        write_aggregate(batched.out, {seed: final_return(batched.out / f"seed-{seed}") for seed in finished},
                        batched.runs[0].recipe, gap_threshold)
    if batched.diverged:
        raise UserError(f"{batched.out}: seed{'s' if len(batched.diverged) > 1 else ''} "
                        f"{', '.join(map(str, batched.diverged))} diverged (stopped alone, the last good checkpoint "
                        f"kept in seed-N/; each one's line is above); "
                        + (f"the aggregate is over the {len(finished)} others" if finished else "no aggregate"))
    return 0


def final_return(run_dir: Path) -> float:
    """A finished run's final mean evaluation return, from its ``summary.json``."""
    return json.loads((run_dir / "summary.json").read_text())["eval_return_mean"]


def write_aggregate(out: Path, returns: dict[int, float], recipe: Recipe, gap_threshold: float | None, *,
                    plot: bool = True) -> dict[str, Any]:
    """``aggregate.json`` over the final eval returns by seed (rliable's estimates: :mod:`rlplug.run.statistics`),
    the optimality gap measured to ``gap_threshold`` or else the env's ``reward_threshold``; with ``plot``, the
    seeds' curves in ``curve.png`` and one line saying both."""
    from rlplug.run.statistics import aggregate_returns, describe_aggregate, reward_threshold

    threshold = gap_threshold if gap_threshold is not None else reward_threshold(env_id(recipe))
    aggregate = aggregate_returns(returns, gap_threshold=threshold)
    (out / "aggregate.json").write_text(json.dumps(aggregate, indent=2) + "\n")
    if plot:
        from rlplug.run.curves import plot_runs

        try:
            curves = f"; curves in {plot_runs([out / f'seed-{seed}' for seed in returns], out / 'curve.png')}"
        except UserError as error:  # runs too short to have finished an episode: the numbers still stand
            curves = f" (no plot: {error})"
        print(f"eval return over {len(returns)} seeds: {describe_aggregate(aggregate)}; std {aggregate['std']:.4g}; "
              f"per seed in {out / 'aggregate.json'}{curves}")
    return aggregate


def env_id(recipe: Recipe) -> str | None:
    """The gymnasium id a recipe's env names, if it names one."""
    value = recipe.env.params.get("id")
    return value if isinstance(value, str) else None
