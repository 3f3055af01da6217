"""Checkpoints: what one holds (plain tensors, numbers and strings, read with ``weights_only=True``), the
random states in that form. A run is rebuilt from one by :meth:`rlplug.run.trainer.Run.from_checkpoint`."""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlplug.errors import UserError

#: Bumped when a checkpoint's layout changes.
CHECKPOINT_FORMAT = 1


def rng_state() -> dict[str, Any]:
    """Python's, numpy's and torch's random states as tensors and numbers (for ``weights_only`` loading)."""
    _, python_state, _ = random.getstate()
    _, keys, position, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": torch.tensor(python_state, dtype=torch.int64),
            "numpy": torch.from_numpy(keys.astype(np.int64)), "numpy_position": int(position),
            "numpy_gauss": (int(has_gauss), float(cached))}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(int(v) for v in state["python"].tolist()), None))
    has_gauss, cached = state["numpy_gauss"]
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), state["numpy_position"], has_gauss,
                         cached))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's contents, read without unpickling code (``weights_only=True``)."""
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickles before refusing them: the refusal says it
            warnings.simplefilter("ignore")
            state = torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise UserError(f"{path}: no such checkpoint") from None
    except Exception as error:  # a truncated, tampered or foreign file: never executed, only refused
        raise UserError(f"{path}: not a readable rlplug checkpoint ({type(error).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path}: not an rlplug checkpoint (format {CHECKPOINT_FORMAT} expected)")
    return state
