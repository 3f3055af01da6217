"""Checkpoints: what one holds (plain tensors, numbers and strings, read with ``weights_only=True``, sealed
with a digest of all of it), the random states in that form. A run is rebuilt from one by
:meth:`rlplug.run.trainer.Run.from_checkpoint`."""

from __future__ import annotations

import hashlib
import math
import random
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlplug.errors import RlplugWarning, UserError

#: Bumped when a checkpoint's layout changes. Format 2 adds ``digest``; format 1 files (written before it)
#: load only when the user says so (:data:`UNVERIFIED_FLAG`), since nothing can check their data.
CHECKPOINT_FORMAT = 2
READABLE_FORMATS = (1, 2)
#: The top-level entries of a checkpoint and what each must be (``digest`` from format 2 on).
LAYOUT: dict[str, type | tuple[type, ...]] = {
    "format": int, "recipe": dict, "algorithm": dict, "env": dict, "frames": int, "iterations": int,
    "episodes": int, "train_seconds": (int, float), "rng": dict,
}
COUNTERS = ("frames", "iterations", "episodes", "train_seconds")
#: How a user loads a checkpoint without a digest: the commands' option, and ``Agent.load``'s argument.
UNVERIFIED_FLAG = "--allow-unverified (Agent.load: allow_unverified=True)"


def digest(state: dict[str, Any]) -> str:
    """The sha256 of everything ``state`` holds but its ``digest``, in its own order (which saving and
    loading keep): each key, each value's type, each tensor's dtype, shape and bytes. Computed when a
    checkpoint is written and when it is read, never during training."""
    sha = hashlib.sha256()
    pending: list[tuple[Any, Any]] = [(key, value) for key, value in reversed(state.items()) if key != "digest"]
    while pending:
        key, value = pending.pop()
        size = len(value) if isinstance(value, (dict, list, tuple)) else ""
        sha.update(f"\0{key!r}:{type(value).__name__}{size}".encode())
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            sha.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
            flat = tensor.reshape(-1)
            if flat.numel() and flat.stride(-1) != 1:  # a size-1 dim expanded (stride 0) counts as contiguous
                flat = flat.clone(memory_format=torch.contiguous_format)
            sha.update(flat.view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            pending.extend(reversed(value.items()))
        elif isinstance(value, (list, tuple)):
            pending.extend(reversed(list(enumerate(value))))
        else:
            sha.update(repr(value).encode())
    return sha.hexdigest()


def sealed(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as a checkpoint of the current format, with its digest."""
    state = {**state, "format": CHECKPOINT_FORMAT}
    state["digest"] = digest(state)
    return state


def layout_problem(state: dict[str, Any]) -> str | None:
    """What is wrong with a checkpoint's top-level entries (missing, of the wrong type, a negative count), or
    None; the entries inside ``algorithm`` and ``env`` are checked by loading them into the rebuilt run."""
    for key, kind in LAYOUT.items():
        if key not in state:
            return f"it has no '{key}' entry"
        value = state[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"its '{key}' is {type(value).__name__}, not {getattr(kind, '__name__', 'a number')}"
    for key in COUNTERS:
        if not (math.isfinite(state[key]) and state[key] >= 0):
            return f"its '{key}' is {state[key]!r}, not a count"
    return None


def entries(value: Any, prefix: str = ""):
    """``(dotted path, leaf)`` for every tensor and number in ``value`` (nested dicts, lists and tuples)."""
    pending = [(prefix, value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, dict):
            pending.extend((f"{where}.{key}" if where else str(key), v) for key, v in item.items())
        elif isinstance(item, (list, tuple)):
            pending.extend((f"{where}.{i}" if where else str(i), v) for i, v in enumerate(item))
        else:
            yield where, item


def non_finite(value: Any) -> str | None:
    """The path of the first floating-point tensor or float in ``value`` that holds a NaN or an infinity."""
    for where, item in entries(value):
        if isinstance(item, torch.Tensor):
            if item.is_floating_point() and not bool(torch.isfinite(item).all()):
                return where
        elif isinstance(item, float) and not math.isfinite(item):
            return where
    return None


def tensors_finite(value: Any) -> bool:
    """Whether every floating-point tensor and float in ``value`` (nested dicts and lists) is finite."""
    return non_finite(value) is None


#: Words in a statistic's name that make it a variance, a sum of squares or a count: never negative.
NON_NEGATIVE = re.compile(r"(?:^|[^a-z])(var|ssq|count)(?:$|[^a-z])")


def statistics_problem(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    """What makes a checkpoint's env statistics (``saved``) impossible for the env built from its recipe, whose
    own statistics are ``current``: a tensor whose shape differs from the env's, or a negative variance or
    count. None when they fit; the entries themselves are then checked by loading them."""
    shapes = {where: tuple(item.shape) for where, item in entries(current) if isinstance(item, torch.Tensor)}
    for where, item in entries(saved):
        if isinstance(item, torch.Tensor) and where in shapes and tuple(item.shape) != shapes[where]:
            return f"its env statistic {where} has shape {list(item.shape)}, the env's is {list(shapes[where])}"
        negative = bool((item < 0).any()) if isinstance(item, torch.Tensor) and item.dtype != torch.bool \
            else isinstance(item, (int, float)) and not isinstance(item, bool) and item < 0
        if negative and NON_NEGATIVE.search(where.lower()):
            return f"its env statistic {where} is negative, which a variance or a count cannot be"
    return None


def check_statistics(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """:func:`statistics_problem` as a ``UserError``."""
    problem = statistics_problem(saved, current)
    if problem:
        raise UserError(f"not a usable rlplug checkpoint: {problem}")


def rng_state() -> dict[str, Any]:
    """Python's, numpy's and torch's random states as tensors and numbers (for ``weights_only`` loading)."""
    _, python_state, _ = random.getstate()
    state = np.random.get_state(legacy=True)
    if not isinstance(state, tuple):
        raise RuntimeError("numpy gave its random state as a dict where legacy=True asks for a tuple")
    _, keys, position, has_gauss, cached = state
    return {"torch": torch.get_rng_state(), "python": torch.tensor(python_state, dtype=torch.int64),
            "numpy": torch.from_numpy(keys.astype(np.int64)), "numpy_position": int(position),
            "numpy_gauss": (int(has_gauss), float(cached))}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(int(v) for v in state["python"].tolist()), None))
    has_gauss, cached = state["numpy_gauss"]
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), state["numpy_position"], has_gauss,
                         cached))


def load_checkpoint(path: Path, *, allow_unverified: bool = False) -> dict[str, Any]:
    """A checkpoint's contents, read without unpickling code (``weights_only=True``); one without a digest
    (format 1) only with ``allow_unverified``, so that changing the format's one byte cannot turn the check off."""
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickles before refusing them: the refusal says it
            warnings.simplefilter("ignore")
            state = torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise UserError(f"{path}: no such checkpoint") from None
    except Exception as error:  # a truncated, tampered or foreign file: never executed, only refused
        raise UserError(f"{path}: not a readable rlplug checkpoint ({type(error).__name__})") from None
    if not isinstance(state, dict) or state.get("format") not in READABLE_FORMATS:
        raise UserError(f"{path}: not an rlplug checkpoint (format {CHECKPOINT_FORMAT} expected)")
    if state["format"] == 1 and "digest" in state:  # only a file changed after it was written says both
        raise UserError(f"{path}: the checkpoint names format 1, which had no digest, yet carries one: the file was "
                        f"changed after it was written; use an earlier one from checkpoints/")
    if state["format"] == 1:
        if not allow_unverified:
            raise UserError(f"{path}: written before checkpoints carried a digest (format 1), so nothing can check "
                            f"that its data is what was written; if you trust the file, load it with "
                            f"{UNVERIFIED_FLAG}")
        warnings.warn(RlplugWarning(f"{path}: written before checkpoints carried a digest, so its data cannot "
                                    f"be checked for corruption; it is used as it is (--allow-unverified)"),
                      stacklevel=2)
    elif state.get("digest") != digest(state):
        raise UserError(f"{path}: the checkpoint's data does not match its digest: the file was changed or "
                        f"damaged after it was written; use an earlier one from checkpoints/")
    problem = layout_problem(state)
    if problem:
        raise UserError(f"{path}: not a usable rlplug checkpoint: {problem}")
    broken = non_finite({key: state[key] for key in ("algorithm", "env", "train_seconds")})
    if broken:
        raise UserError(f"{path}: its {broken} holds numbers that are not all finite (NaN or infinity), so nothing "
                        f"can be learned or evaluated from it; use an earlier one from checkpoints/")
    return state
