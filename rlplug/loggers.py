"""Logger implementations behind the built-in logger plugins.

A logger has ``log(metrics, frames)``, called after every update (and after every evaluation), and
``close(summary)``, called once at the end, also when the run fails (``summary["status"]`` says so).
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

#: Metrics the console shows while training, in order, with their labels.
HEADLINE = {"fps": "frames/s", "episode_return": "return", "eval_return_mean": "eval return"}


class ConsoleLogger:
    def __init__(self, total_frames: int, *, every_seconds: float = 10.0, live: bool | None = None):
        self.total_frames = total_frames
        self.every_seconds = every_seconds
        self.console = Console(highlight=False)
        self.live = self.console.is_terminal if live is None else live
        self.latest: dict[str, float] = {}
        self.last_line = 0.0
        self.progress = None
        if self.live:
            self.progress = Progress(
                TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(), TextColumn("frames"),
                TextColumn("{task.fields[status]}"), TextColumn("eta"), TimeRemainingColumn(),
                console=self.console, transient=True,
            )
            self.task = self.progress.add_task("train", total=total_frames, status="")
            self.progress.start()

    def log(self, metrics: dict[str, float], frames: int) -> None:
        self.latest.update(metrics)
        status = "  ".join(f"{label} {self.latest[key]:.4g}" for key, label in HEADLINE.items() if key in self.latest)
        if self.progress is not None:
            self.progress.update(self.task, completed=frames, status=status)
            return
        now = time.monotonic()
        if "eval_return_mean" in metrics:
            spread = f" +- {metrics['eval_return_std']:.3g}" if "eval_return_std" in metrics else ""
            print(f"frames {frames}/{self.total_frames}  eval return {metrics['eval_return_mean']:.4g}{spread}", flush=True)
        elif now - self.last_line >= self.every_seconds or frames >= self.total_frames:
            self.last_line = now
            percent = 100.0 * frames / self.total_frames
            print(f"frames {frames}/{self.total_frames} ({percent:.0f}%)  {status}", flush=True)

    def close(self, summary: dict) -> None:
        if self.progress is not None:
            self.progress.stop()
        table = Table(title=f"run {summary.get('status', 'finished')}", show_header=False)
        for key, value in summary.items():
            if key != "status":
                table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
        self.console.print(table)


class CSVLogger:
    """One row per log call, flushed at once so a crash loses nothing already logged.

    Columns are every metric seen so far; when a new one appears (rare: the first evaluation, say), the file
    is read back and rewritten with the wider header, so nothing is held in memory between calls. A file
    already there (the same run, trained on) is continued, not replaced; rows logged after
    ``start_frames`` (by a run killed after its last checkpoint, now resumed from it) are dropped.
    """

    def __init__(self, path: Path, start_frames: int = 0):
        self.path = Path(path)
        self.columns: list[str] = ["frames"]
        self.file = None
        if self.path.exists():
            with self.path.open(newline="") as existing:
                reader = csv.DictReader(existing)
                rows = list(reader)
                self.columns = list(reader.fieldnames or self.columns)
            kept = [row for row in rows if int(float(row["frames"])) <= start_frames]
            if len(kept) < len(rows):
                with self.path.open("w", newline="") as rewritten:
                    writer = csv.DictWriter(rewritten, fieldnames=self.columns)
                    writer.writeheader()
                    writer.writerows(kept)

    def log(self, metrics: dict[str, float], frames: int) -> None:
        row = {"frames": frames, **metrics}
        new = [key for key in row if key not in self.columns]
        if new or self.file is None:
            self.columns += new
            self._rewrite()
        self.writer.writerow(row)
        self.file.flush()

    def _rewrite(self) -> None:
        rows = []
        if self.file is not None:
            self.file.close()
        if self.path.exists():
            with self.path.open(newline="") as old:
                rows = list(csv.DictReader(old))
        self.file = self.path.open("w", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=self.columns)
        self.writer.writeheader()
        self.writer.writerows(rows)

    def close(self, summary: dict) -> None:
        if self.file is not None:
            self.file.close()
