"""The built-in callbacks behind :mod:`rlplug.plugins.callbacks`."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from statistics import fmean

from rlplug.plugins.callbacks import BEST_CHECKPOINT
from rlplug.registry.callbacks import CallbackRun


class StopAtReturn:
    def __init__(self, threshold: float):
        self.threshold = threshold

    def on_evaluation(self, run: CallbackRun, returns: list[float]) -> None:
        mean = fmean(returns)
        if mean >= self.threshold:
            run.stop(f"the evaluation return {mean:.6g} reached the threshold {self.threshold:g}")


class KeepBest:
    """best.pt is written at each evaluation better than every earlier one; ``note`` (best.json) says which one,
    so that a resumed run compares with the best of its earlier part."""

    def __init__(self, note: Path):
        self.note = note
        self.best = self.recorded()

    def recorded(self) -> float | None:
        """The best mean return so far, from the note of an earlier part of this run (None: none, or unreadable)."""
        try:
            value = json.loads(self.note.read_text())["eval_return_mean"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None

    def on_evaluation(self, run: CallbackRun, returns: list[float]) -> None:
        mean = fmean(returns)
        if self.best is None or mean > self.best:
            run.save_checkpoint(BEST_CHECKPOINT)
            self.best = mean
            written = self.note.with_name(f".{self.note.name}.tmp")
            written.write_text(json.dumps({"frames": run.frames, "eval_return_mean": mean}) + "\n")
            os.replace(written, self.note)
        run.log("best_eval_return", self.best)
