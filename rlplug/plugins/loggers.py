"""Built-in loggers: the console (progress and a final summary) and a CSV file of metrics."""

from __future__ import annotations

from typing import Annotated

import rlplug
from rlplug.registry.params import Range


def make_console(total_frames: int, every_seconds: Annotated[float, Range(gt=0)] = 10.0, live: bool | None = None):
    """Live progress bar on a terminal, plain periodic lines elsewhere, and a final summary."""
    from rlplug.loggers import ConsoleLogger

    return ConsoleLogger(total_frames, every_seconds=every_seconds, live=live)


def make_csv(run_dir, frames: int = 0, filename: str = "metrics.csv"):
    """Every metric, one row per log call, in the run directory."""
    from rlplug.loggers import CSVLogger

    return CSVLogger(run_dir / filename, start_frames=frames)


@rlplug.hookimpl
def rlplug_register_loggers(register):
    register("console", make_console)
    register("csv", make_csv)
