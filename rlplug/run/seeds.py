"""Several seeds of one recipe: one run each under ``OUT/seed-N``, trained one after another (:class:`SeedRuns`;
together, ``--batched``, is :class:`~rlplug.run.batched.BatchedRun`), then their aggregate (``aggregate.json``)
and one plot (``curve.png``), which ``rlplug run --seeds`` (:mod:`rlplug.run.start`) and ``rlplug tune --seeds``
write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlplug.errors import UserError
from rlplug.recipe import Recipe
from rlplug.run.trainer import Run


class SeedRuns:
    """Several seeds of one recipe trained one after another, each a :class:`Run` of its own recipe in
    ``out/seed-N``, built when first asked for (:meth:`run`): a command training a thousand seeds holds one
    run's envs at a time."""

    def __init__(self, recipe_by_seed: dict[int, Recipe], out: Path, gap_threshold: float | None = None):
        self.recipe_by_seed, self.out, self.gap_threshold = recipe_by_seed, out, gap_threshold
        self.runs: dict[int, Run] = {}

    @property
    def seeds(self) -> list[int]:
        return list(self.recipe_by_seed)

    def run(self, seed: int) -> Run:
        if seed not in self.runs:
            self.runs[seed] = Run.build(self.recipe_by_seed[seed], self.out / f"seed-{seed}")
        return self.runs[seed]

    def train(self, max_frames: int | None = None, max_iters: int | None = None) -> dict[str, Any]:
        """Each seed trained in turn (to ``total_frames`` or the first limit given); ``status`` is the first
        seed's that did not finish, else ``finished``, and ``seeds`` each one's summary. A seed that diverges
        raises, as :meth:`Run.train` does, before the next one trains."""
        summaries = {seed: self.run(seed).train(max_frames=max_frames, max_iters=max_iters) for seed in self.seeds}
        unfinished = [s["status"] for s in summaries.values() if s["status"] != "finished"]
        return {"status": unfinished[0] if unfinished else "finished", "seeds": summaries}

    def close(self) -> None:
        for run in self.runs.values():
            run.close()


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
            # an offline run plays no training episodes: its curve is its evaluations'
            metric = "eval_return_mean" if recipe.dataset is not None else "episode_return"
            seeds = [out / f"seed-{seed}" for seed in returns]
            curves = f"; curves in {plot_runs(seeds, out / 'curve.png', metric)}"
        except UserError as error:  # runs too short to have finished an episode: the numbers still stand
            curves = f" (no plot: {error})"
        print(f"eval return over {len(returns)} seeds: {describe_aggregate(aggregate)}; std {aggregate['std']:.4g}; "
              f"per seed in {out / 'aggregate.json'}{curves}")
    return aggregate


def env_id(recipe: Recipe) -> str | None:
    """The gymnasium id a recipe's env names, if it names one."""
    value = recipe.env.params.get("id")
    return value if isinstance(value, str) else None
