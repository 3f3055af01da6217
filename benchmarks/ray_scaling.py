"""The ray runner against the local one: frames/s with 1, 2, 4, 8... workers (and 1, 2... learners), side by side.

    python benchmarks/ray_scaling.py                                   # cartpole recipes, 1 and 2 workers, 3 rounds
    python benchmarks/ray_scaling.py --workers 1 2 4 8 --rounds 2      # on a machine with the cores for it
    python benchmarks/ray_scaling.py --recipes cartpole-impala-ray --frames 50000
    python benchmarks/ray_scaling.py --recipes minatar-breakout-ppo --workers 1 2 4 8 --learners 1 2

Every run is a whole ``python -m rlplug run`` process that starts (and stops) its own local Ray instance; the
configurations alternate within each round so that drift on a shared machine hits them alike. frames/s is
frames over the training time the run reports (``summary.json``'s ``wall_time_s``: collection, updates,
evaluations; not start-up), compared with the local runner's as a ratio.

``minatar-breakout-ppo`` is the env-bound workload: 8 envs, each stepped in a process of its own
(``vectorization = "async"``), 1024 frames an update, so that stepping and its inter-process traffic, not the
update, take most of the time; the ray runner splits the 8 envs between its workers. ``--learners N`` runs every
ray configuration with ``runner.learners = N`` (data-parallel learners); where the installed rlplug refuses the
key, those configurations are skipped with its one-line reason.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from versus_sb3 import REPO_ROOT, log, machine_lines, markdown_table, run_child, spread

#: each recipe's overrides for every configuration, and its training frames when --frames is not given
#: (None: the recipe's own)
RECIPES: dict[str, tuple[list[str], int | None]] = {
    "cartpole-ppo": ([], None),
    "cartpole-impala-ray": ([], None),
    "minatar-breakout-ppo": (['env.vectorization="async"', "env.num_envs=8", "algorithm.frames_per_batch=1024",
                              "eval.episodes=2", "eval.every_frames=0", "run.checkpoint_every_frames=0"], 32_768),
}
DEFAULT_RECIPES = ("cartpole-ppo", "cartpole-impala-ray")


def configurations(workers: list[int], learners: list[int] | None) -> list[tuple[str, str]]:
    """(label, runner table override) for the local runner, then the ray runner with each worker count (and each
    learner count, where some are asked for)."""
    rows = [("local", 'runner={use="local"}')]
    for n in workers:
        label = f"ray, {n} worker{'s' * (n > 1)}"
        table = f'use="ray", workers={n}, mode="experience"'
        if learners is None:
            rows.append((label, f"runner={{{table}}}"))
        else:
            rows += [(f"{label}, {k} learner{'s' * (k > 1)}", f"runner={{{table}, learners={k}}}") for k in learners]
    return rows


def one_learner_label(label: str) -> str:
    """The label of the same configuration with one learner (``ray, 2 workers, 2 learners`` -> ``..., 1 learner``)."""
    return label.rsplit(", ", 1)[0] + ", 1 learner"


def refusal(recipe: str, overrides: list[str]) -> str | None:
    """Why the installed rlplug refuses the recipe with ``overrides`` (its one line), or None: validated as ``rlplug
    run`` validates, in this process and torch-free, before any run is started."""
    from rlplug.errors import UserError
    from rlplug.recipe import load

    try:
        load(REPO_ROOT / "recipes" / f"{recipe}.toml", overrides)
    except UserError as error:
        return str(error)
    return None


def run_once(recipe: str, overrides: list[str], frames: int | None, out: Path, timeout: float) -> dict | None:
    command = [sys.executable, "-m", "rlplug", "run", f"recipes/{recipe}.toml", "--out", str(out)]
    for override in overrides + ([f"run.total_frames={frames}"] if frames else []):
        command += ["--set", override]
    code, process_s, _, _ = run_child(command, out.with_suffix(".log"), timeout)
    if code:
        log(f"  FAILED ({code}): {' '.join(command)}; see {out.with_suffix('.log.stderr')}")
        return None
    summary = json.loads((out / "summary.json").read_text())
    return {"fps": summary["frames"] / summary["wall_time_s"], "train_s": summary["wall_time_s"],
            "process_s": process_s, "return": summary["eval_return_mean"]}


def ratio(fps: float, baseline: list[dict] | None) -> str:
    return f"{fps / statistics.median(r['fps'] for r in baseline):.2f}x" if baseline else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(DEFAULT_RECIPES))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--learners", type=int, nargs="+", default=None,
                        help="runner.learners of every ray configuration (default: the key left out)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frames", type=int, default=None, help="training frames (default: each recipe's)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds before a run is killed")
    args = parser.parse_args()
    rows, failed, skipped = [], 0, []
    with tempfile.TemporaryDirectory(prefix="rlplug-ray-") as scratch:
        for recipe in args.recipes:
            workload, recipe_frames = RECIPES[recipe]
            frames = args.frames or recipe_frames
            runs = []
            for label, runner in configurations(args.workers, args.learners):
                reason = refusal(recipe, [*workload, runner])
                if reason:
                    log(f"skipped {recipe}, {label}: the installed rlplug refuses it: {reason}")
                    skipped.append(f"{recipe}, {label}: {reason}")
                else:
                    runs.append((label, [*workload, runner]))
            results: dict[str, list[dict]] = {}
            for round_ in range(args.rounds):
                for label, overrides in runs:
                    log(f"{recipe}, {label}, round {round_ + 1}/{args.rounds} ...")
                    out = Path(scratch) / f"{recipe}-{label.replace(', ', '-').replace(' ', '')}-{round_}"
                    result = run_once(recipe, overrides, frames, out, args.timeout)
                    failed += result is None
                    if result:
                        results.setdefault(label, []).append(result)
            local_fps = statistics.median(r["fps"] for r in results["local"]) if "local" in results else None
            for label, done in results.items():
                fps = statistics.median(r["fps"] for r in done)
                rows.append({
                    "recipe": recipe, "runner": label, "frames/s": spread([r["fps"] for r in done], ",.0f"),
                    "vs local": f"{fps / local_fps:.2f}x" if local_fps else "-",
                    **({"vs 1 learner": "-" if label == "local" else ratio(fps, results.get(one_learner_label(label)))}
                       if args.learners else {}),
                    "train s": spread([r["train_s"] for r in done], ".1f"),
                    "process s": spread([r["process_s"] for r in done], ".1f"),
                    "eval return by round": ", ".join(f"{r['return']:.1f}" for r in done),
                })
    print(f"```\npython benchmarks/ray_scaling.py {' '.join(sys.argv[1:])}\n```\n")
    print("\n".join(machine_lines()) + "\n")
    print(markdown_table(rows) if rows else "no run finished")
    if skipped:
        print("\nSkipped (refused by the installed rlplug):\n" + "\n".join(f"- {line}" for line in skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
