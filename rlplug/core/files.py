"""The run's own files are written only in place: never through a symbolic link put where one of them belongs
(another run's file, a folder outside the run). Torch-free; the run directory (:mod:`rlplug.run.directory`) and
the loggers that write files into it (the csv logger) share it."""

from __future__ import annotations

import os
from pathlib import Path

from rlplug.errors import UserError


def no_links(path: str, flags: int) -> int:
    """``open``'s opener for the run's own files: a symbolic link in the file's place fails (ELOOP), never followed."""
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


def refuse_link(path: Path) -> None:
    """``UserError`` where ``path``, a file or folder the run writes in place, is a symbolic link."""
    if path.is_symlink():
        raise UserError(f"{path}: a symbolic link (to {os.readlink(path)}), where the run keeps a file of its own; a "
                        f"run writes only inside its directory: replace the link with a copy of what it points to, "
                        f"or remove it")
