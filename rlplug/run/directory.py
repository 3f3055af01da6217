"""The run directory: where a run's files go, claimed before anything is written, and written atomically."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from rlplug.errors import UserError


def default_run_dir(recipe_path: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{recipe_path.stem}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def check_run_dir(run_dir: Path) -> None:
    """A run never writes over another run's files."""
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise UserError(f"--out {run_dir}: the directory exists and is not empty; choose a new one")


def write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file, flush it to disk, then rename over ``path``: a kill at any instant leaves
    either the old file or the new one, never half of one."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def ensure_writable(run_dir: Path) -> None:
    """A clear error before training when the run directory cannot be written."""
    existing = next(p for p in [run_dir, *run_dir.parents] if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out {run_dir}: cannot write to {existing}; choose a directory you can write to")
