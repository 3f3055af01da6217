"""``python -m rlplug set RUN_DIR algorithm.NAME=VALUE ...``: change parameters of a run going on in another
process (pytorchrl's ``update_algorithm_parameter`` from outside).

The assignments are checked against the run's stored recipe (the names that can change, the values by the
recipe's own rules) and written into the run directory as one request, which the run takes before its next
update, the one under way ending after its current gradient step (:mod:`rlplug.run.changes`); where no run is
training there, it waits for ``resume``; a run that has finished takes none, so it is refused. Torch-free:
nothing of the run is built.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_commands(subparsers) -> None:
    """Adds ``set``."""
    parser = subparsers.add_parser(
        "set", help="change algorithm parameters (lr, clip_epsilon...) of a run going on in another process",
        description="Change algorithm parameters of a run while it trains: the run takes them before its next "
                    "update, ending the one under way after its current gradient step (one console line, a "
                    "metrics row, a line of parameters.jsonl); its checkpoints and every resume keep them. Where "
                    "no run is training in RUN_DIR, the change waits for rlplug resume; a finished run takes none.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    parser.add_argument("assignments", nargs="+", metavar="algorithm.NAME=VALUE",
                        help="a parameter and its new value (TOML), e.g. algorithm.lr=1e-4")
    parser.set_defaults(handler=cmd_set)


def cmd_set(args: argparse.Namespace) -> int:
    from rlplug.run.changes import request

    requested, training = request(args.run_dir, args.assignments)
    listed = ", ".join(f"algorithm.{name} = {value!r}" for name, value in requested.items())
    if training:
        print(f"rlplug: {listed}: requested; the run training in {args.run_dir} applies it before its next update "
              f"(the one under way ends after its current gradient step)")
    else:
        print(f"rlplug: {listed}: requested; no run is training in {args.run_dir} now, so it waits for "
              f"python -m rlplug resume {args.run_dir}")
    return 0
