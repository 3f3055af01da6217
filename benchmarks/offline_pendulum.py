"""Issue 40's offline measurement: each offline recipe learns from a recorded dataset alone, over seeds.

From scratch: train ``recipes/pendulum-sac.toml`` (its 20k frames), ``rlplug record`` 50 episodes of its policy (the
expert dataset), 50 with ``--noise 0.5`` (the noisy one) and 50 with ``--epsilon 0.5`` (half the actions uniformly
random: the epsilon one, offered with ``--datasets``), then train each of ``pendulum-offline-{bc,td3bc,iql,
cql}.toml`` on each dataset for each seed; the discrete case likewise: ``recipes/cartpole-dqn.toml``, 50 episodes
recorded with ``--epsilon 0.2``, ``cartpole-offline-discrete-{cql,iql}.toml``. The table gives each dataset's own
mean return (what its behaviour policy scored), then per recipe and dataset the final evaluation return of each
seed (``summary.json``'s ``eval_return_mean``), their mean and standard deviation, and the mean wall time of a run.

    python benchmarks/offline_pendulum.py --out runs/offline                      # everything, seeds 0 1 2
    python benchmarks/offline_pendulum.py --out runs/offline --steps 5000         # 5k gradient steps a run
    python benchmarks/offline_pendulum.py --out runs/offline --only iql,cql --datasets noisy --markdown
    python benchmarks/offline_pendulum.py --out runs/offline --sac-run runs/pendulum-sac   # an SAC run already made

Every run is a whole ``python -m rlplug`` process. The same command again reuses what ``--out`` already holds (a
finished run, a recorded dataset) and trains only what is missing, so a measurement stopped half way goes on.
``--steps`` sets ``run.total_frames`` to that many gradient steps of the recipe's 256 samples (the recipes' own
budget otherwise); ``--cql-steps`` a separate one for CQL, whose step costs several of the others'.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH = 256  # every offline recipe's batch_size: run.total_frames = gradient steps x BATCH

#: the datasets: name -> (the online recipe whose policy is recorded, its frames, record's behaviour options)
DATASETS = {
    "expert": ("pendulum-sac", ["--episodes", "50"]),
    "noisy": ("pendulum-sac", ["--episodes", "50", "--noise", "0.5"]),
    "epsilon": ("pendulum-sac", ["--episodes", "50", "--epsilon", "0.5"]),
    "cartpole": ("cartpole-dqn", ["--episodes", "50", "--epsilon", "0.2"]),
}
#: the offline recipes of each dataset's env
OFFLINE = {
    "pendulum-sac": ["bc", "td3bc", "iql", "cql"],
    "cartpole-dqn": ["discrete-cql", "discrete-iql"],
}
RECIPE_FILES = {"bc": "pendulum-offline-bc", "td3bc": "pendulum-offline-td3bc", "iql": "pendulum-offline-iql",
                "cql": "pendulum-offline-cql", "discrete-cql": "cartpole-offline-discrete-cql",
                "discrete-iql": "cartpole-offline-discrete-iql"}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rlplug(*args: str, log_file: Path) -> tuple[int, float]:
    """One ``python -m rlplug`` child, its output in ``log_file``: (exit code, wall seconds)."""
    start = time.perf_counter()
    with open(log_file, "wb") as out:
        code = subprocess.call([sys.executable, "-m", "rlplug", *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    return code, time.perf_counter() - start


def summary(run_dir: Path) -> dict | None:
    try:
        data = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("status") == "finished" else None


def online_run(out: Path, recipe: str, given: Path | None) -> Path:
    """The trained run whose policy is recorded: ``given``, or ``recipes/RECIPE.toml`` trained into ``out``."""
    if given is not None:
        return given
    run_dir = out / recipe
    if summary(run_dir) is None:
        log(f"training {recipe} (its recipe's frames)")
        code, wall = rlplug("run", f"recipes/{recipe}.toml", "--out", str(run_dir), log_file=out / f"{recipe}.log")
        if code != 0:
            sys.exit(f"{recipe} failed (exit {code}): see {out / f'{recipe}.log'}")
        log(f"  {wall:.0f}s, evaluation {summary(run_dir)['eval_return_mean']:.1f}")
    return run_dir


def dataset_return(folder: Path) -> float:
    """The mean episode return of a recorded dataset (``rlplug show``'s), read with minari."""
    from minari.dataset.minari_storage import MinariStorage

    storage = MinariStorage.read(folder / "data")
    return statistics.mean(float(sum(episode["rewards"])) for episode in
                           storage.get_episodes(range(storage.total_episodes)))


def recorded(out: Path, name: str, run_dir: Path) -> Path:
    folder = out / f"{name}-v0"
    if not (folder / "data").is_dir():
        log(f"recording {name}")
        code, _ = rlplug("record", str(run_dir), *DATASETS[name][1], "--out", str(folder),
                         log_file=out / f"record-{name}.log")
        if code != 0:
            sys.exit(f"recording {name} failed (exit {code}): see {out / f'record-{name}.log'}")
    return folder


def offline_run(out: Path, name: str, dataset: Path, algorithm: str, seed: int, steps: int | None) -> dict:
    run_dir = out / "runs" / f"{name}-{algorithm}" / f"seed-{seed}"
    done = summary(run_dir)
    if done is None:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        overrides = [f"dataset.path={dataset}", f"run.seed={seed}", "eval.every_frames=0",
                     "run.checkpoint_every_frames=0"]
        overrides += [f"run.total_frames={steps * BATCH}"] if steps else []
        log(f"{name} {algorithm} seed {seed}" + (f" ({steps} steps)" if steps else ""))
        code, wall = rlplug("run", f"recipes/{RECIPE_FILES[algorithm]}.toml", "--out", str(run_dir),
                            *[arg for override in overrides for arg in ("--set", override)],
                            log_file=run_dir.with_suffix(".log"))
        done = summary(run_dir)
        if code != 0 or done is None:
            log(f"  failed (exit {code}): see {run_dir.with_suffix('.log')}")
            return {"return": None, "wall_s": wall}
        log(f"  {done['eval_return_mean']:.1f} in {wall:.0f}s")
        (run_dir / "wall_s.json").write_text(json.dumps({"wall_s": wall}))
    wall_file = run_dir / "wall_s.json"
    wall = json.loads(wall_file.read_text())["wall_s"] if wall_file.exists() else done.get("wall_time_s")
    return {"return": done["eval_return_mean"], "wall_s": wall, "frames": done.get("frames")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where runs and datasets go (reused if there)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--datasets", default="expert,noisy,cartpole",
                        help="comma-separated: expert, noisy, epsilon, cartpole")
    parser.add_argument("--only", default=None, help="comma-separated algorithms (bc, td3bc, iql, cql, discrete-cql, "
                                                     "discrete-iql)")
    parser.add_argument("--steps", type=int, default=None, help="gradient steps a run (default: each recipe's own)")
    parser.add_argument("--cql-steps", type=int, default=None, help="gradient steps of a cql run (default: --steps)")
    parser.add_argument("--sac-run", type=Path, default=None, help="a trained pendulum-sac run to record")
    parser.add_argument("--dqn-run", type=Path, default=None, help="a trained cartpole-dqn run to record")
    parser.add_argument("--markdown", action="store_true", help="the table as markdown")
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    given = {"pendulum-sac": args.sac_run, "cartpole-dqn": args.dqn_run}

    rows = []
    for name in args.datasets.split(","):
        online, _ = DATASETS[name]
        folder = recorded(args.out, name, online_run(args.out, online, given[online]))
        behaviour = dataset_return(folder)
        for algorithm in OFFLINE[online]:
            if only is not None and algorithm not in only:
                continue
            steps = args.cql_steps if algorithm == "cql" and args.cql_steps else args.steps
            runs = [offline_run(args.out, name, folder, algorithm, seed, steps) for seed in args.seeds]
            returns = [run["return"] for run in runs if run["return"] is not None]
            rows.append({"dataset": name, "dataset_return": behaviour, "algorithm": algorithm,
                         "steps": (runs[0].get("frames") or 0) // BATCH, "returns": returns,
                         "mean": statistics.mean(returns) if returns else None,
                         "std": statistics.pstdev(returns) if len(returns) > 1 else 0.0,
                         "wall_s": statistics.mean(run["wall_s"] for run in runs)})

    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    print(f"{stamp}, commit {commit}, {platform.node()} ({platform.machine()}), seeds {args.seeds}")
    header = ["dataset (its return)", "recipe", "steps", "return mean +- std", "per seed", "wall s/run"]
    lines = [[f"{row['dataset']} ({row['dataset_return']:.1f})", row["algorithm"], str(row["steps"]),
              "failed" if row["mean"] is None else f"{row['mean']:.1f} +- {row['std']:.1f}",
              " ".join(f"{value:.0f}" for value in row["returns"]), f"{row['wall_s']:.0f}"] for row in rows]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(cell) for cell in column) for column in zip(header, *lines)]
        for line in [header, *lines]:
            print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)))


if __name__ == "__main__":
    main()
