"""When a run does what it does between updates: evaluations and checkpoints every so many frames, and the seed
its envs restart from at a checkpoint (the same for a run left alone and one resumed there)."""

from __future__ import annotations


def next_multiple(frames: int, every: int) -> int | None:
    """The first multiple of ``every`` after ``frames`` (None when ``every`` is 0: never)."""
    return (frames // every + 1) * every if every else None


def episode_seed(seed: int, frames: int) -> int:
    """The seed every env restarts from at a checkpoint taken at ``frames``: a resumed run uses the same."""
    return (seed * 1_000_003 + frames) % 2**31
