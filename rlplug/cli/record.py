"""``python -m rlplug record RUN_DIR --episodes N --out DIR``: a run's policy on its env, written as a Minari
dataset for offline runs (:mod:`rlplug.run.record`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlplug.errors import UserError


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {value}")
    return value


def scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 10.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 10 (a fraction of the action half-range), "
                                         f"got {value}")
    return value


def add_commands(subparsers) -> None:
    """Adds ``record``."""
    from rlplug.cli.eval import add_best_option, add_unverified_option, positive_int, seed_value

    parser = subparsers.add_parser(
        "record", help="record a run's policy acting on its env as a Minari dataset, for offline runs",
        description="Play whole episodes of a run's policy (its checkpoint) on one copy of its env and write them "
                    "as a Minari dataset (observations, actions, rewards, terminations, truncations, infos; the "
                    "env spec and the recipe as metadata) that minari.load_dataset and a recipe's [dataset] read. "
                    "The dataset appears at --out only when it is whole.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="the new dataset's directory (its name, as name-vN, is its Minari id: under "
                             "MINARI_DATASETS_PATH, minari.load_dataset finds it by that id)")
    parser.add_argument("--episodes", type=positive_int, metavar="N", help="whole episodes to record")
    parser.add_argument("--frames", type=positive_int, metavar="N",
                        help="record whole episodes until at least N steps (with --episodes: whichever comes first)")
    parser.add_argument("--stochastic", action="store_true",
                        help="sample the policy (and its exploration noise) instead of taking its mode")
    parser.add_argument("--epsilon", type=fraction, default=0.0, metavar="P",
                        help="a uniformly random action with probability P at each step (default: 0)")
    parser.add_argument("--noise", type=scale, default=0.0, metavar="S",
                        help="continuous actions: Gaussian noise of standard deviation S times the action "
                             "half-range, clipped to the bounds (default: 0)")
    parser.add_argument("--seed", type=seed_value, metavar="S",
                        help="seed of the env and the behaviour's noise (default: the run's seed)")
    parser.add_argument("--checkpoint", type=Path, metavar="FILE",
                        help="checkpoint to record (default: RUN_DIR/checkpoint.pt)")
    add_best_option(parser)
    add_unverified_option(parser)
    parser.set_defaults(handler=cmd_record)


def cmd_record(args: argparse.Namespace) -> int:
    from rlplug.cli.eval import find_checkpoint

    if args.episodes is None and args.frames is None:
        raise UserError("say how much to record: --episodes N, --frames N, or both")
    checkpoint = find_checkpoint(args.run_dir, args.checkpoint, command="record", best=args.best)
    try:
        import minari  # noqa: F401  # one line now, before the run is rebuilt
    except ImportError:
        raise UserError("record writes Minari datasets and minari is not installed: pip install "
                        "\"rlplug[offline]\"") from None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from rlplug.run.record import Behaviour, record

    total = args.episodes if args.episodes is not None else args.frames
    unit = "episodes" if args.episodes is not None else "steps"
    console = Console(stderr=True)
    with Progress(TextColumn("recording"), BarColumn(), MofNCompleteColumn(), TextColumn(unit), console=console,
                  transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("record", total=total)

        def told(episodes: int, steps: int) -> None:
            bar.update(task, completed=min(total, episodes if unit == "episodes" else steps))

        behaviour = Behaviour(stochastic=args.stochastic, epsilon=args.epsilon, noise=args.noise)
        result = record(checkpoint, args.out, episodes=args.episodes, frames=args.frames, behaviour=behaviour,
                        seed=args.seed, progress=told, allow_unverified=args.allow_unverified)
    returns = result["returns"]
    print(f"dataset: {args.out} (id {result['dataset_id']}), from {checkpoint} (frame {result['frame']})")
    print(f"episodes: {result['episodes']}, steps: {result['steps']}; return: mean {sum(returns) / len(returns):.6g}, "
          f"min {min(returns):.6g}, max {max(returns):.6g}")
    return 0
