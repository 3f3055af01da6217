"""``python -m rlplug set RUN_DIR algorithm.NAME=VALUE ...``: change parameters of a run going on in another
process (pytorchrl's ``update_algorithm_parameter`` from outside).

The assignments are checked against the run's stored recipe (the names that can change, the values by the
recipe's own rules) and written into the run directory as one request, which the run takes at the start of
its next iteration (:mod:`rlplug.run.changes`); where no run is training there, it waits for ``resume``.
Torch-free: nothing of the run is built.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_commands(subparsers) -> None:
    """Adds ``set``."""
    parser = subparsers.add_parser(
        "set", help="change algorithm parameters (lr, clip_epsilon...) of a run going on in another process",
        description="Change algorithm parameters of a run while it trains: the run takes them at its next "
                    "iteration (one console line, a metrics row, a line of parameters.jsonl), and its checkpoints "
                    "keep them. Where no run is training in RUN_DIR, the change waits for rlplug resume.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    parser.add_argument("assignments", nargs="+", metavar="algorithm.NAME=VALUE",
                        help="a parameter and its new value (TOML), e.g. algorithm.lr=1e-4")
    parser.set_defaults(handler=cmd_set)


def cmd_set(args: argparse.Namespace) -> int:
    from rlplug.run.changes import request

    requested, training = request(args.run_dir, args.assignments)
    listed = ", ".join(f"algorithm.{name} = {value!r}" for name, value in requested.items())
    if training:
        print(f"rlplug: {listed}: requested; the run training in {args.run_dir} applies it at its next iteration")
    else:
        print(f"rlplug: {listed}: requested; no run is training in {args.run_dir} now, so it waits for "
              f"python -m rlplug resume {args.run_dir}")
    return 0
