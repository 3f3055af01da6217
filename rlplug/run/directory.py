"""The run directory: where a run's files go, claimed before anything is written, and written atomically."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from datetime import datetime
from pathlib import Path

from rlplug.core.files import no_links, refuse_link
from rlplug.errors import UserError

#: The file that marks a directory of seeds trained together (``run --seeds --batched``), for ``rlplug resume``.
BATCHED_MARKER = "batched.json"
#: What a run (or ``rlplug set``) writes into, appends to or prunes where it is, rather than replacing it whole by a
#: rename: as a symbolic link, each would take the writes elsewhere (another run's files), so a run refuses it.
WRITTEN_IN_PLACE = ("checkpoints", "parameters.jsonl", "set-requests", "videos", "wandb", "wandb-run-id",
                    "tensorboard")


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


class Claim:
    """This process's hold on a run directory: an exclusive lock on the directory itself (``flock``), which the
    system releases when the process ends however it ends, and which :meth:`release` (or dropping the claim)
    gives up. No lock file is written: the directory holds the run's files only."""

    def __init__(self, run_dir: Path, *, new: bool):
        self.run_dir, self.new, self.fd = run_dir, new, -1
        if new:
            check_run_dir(run_dir)
        #: the outermost directory this claim made, removed again if the run is abandoned before it trains
        self.made = next((p for p in reversed([run_dir, *run_dir.parents]) if not p.exists()), None)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as error:
            raise UserError(f"--out {run_dir}: cannot write there ({error.strerror or error})") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.release()
            raise UserError(f"{run_dir}: another run is training in this directory (an rlplug process, or an "
                            f"Agent in this one); wait for it to end, or choose another directory") from None
        try:
            if new:  # again, now that no other run can write here
                check_run_dir(run_dir)
            for name in WRITTEN_IN_PLACE:
                refuse_link(run_dir / name)
            for leftover in [*run_dir.glob(".*.tmp"), *run_dir.glob("checkpoints/.*.tmp")]:
                leftover.unlink()  # what a writer killed mid-write left: never a complete file
        except BaseException:
            self.release()
            raise

    def release(self, *, abandon: bool = False) -> None:
        """Give the directory up; ``abandon`` (a new run that failed before training): remove what it made, so
        that a mistake found while building leaves no run directory behind."""
        if abandon and self.new and self.fd >= 0:
            if self.made is not None:
                shutil.rmtree(self.made, ignore_errors=True)
            else:  # it was empty when claimed: everything in it is this run's
                for child in self.run_dir.iterdir():
                    if child.is_dir():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)  # for every copy of the descriptor (an env worker forked with it)
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.release()


def write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file, flush it to disk, then rename over ``path``: a kill at any instant leaves
    either the old file or the new one, never half of one. A failed write (a full disk) removes its
    temporary file and names ``path`` in its error."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        if temporary.is_symlink():  # a link left in its place: the data goes into a file of our own
            temporary.unlink()
        with open(temporary, "wb", opener=no_links) as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        if error.filename is None:  # write() and fsync() name no file
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def own_folder(path: Path) -> Path:
    """``path``, a folder of the run's inside its directory, made where missing; refused where it is a link."""
    refuse_link(path)
    path.mkdir(exist_ok=True)
    return path


def append_line(path: Path, line: str) -> None:
    """``line`` appended to ``path`` (a file of the run's, never through a link) and flushed to disk before this
    returns; a line a kill cut short before it is closed first, so that this one stands on its own."""
    refuse_link(path)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        size = os.fstat(fd).st_size
        cut = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
        os.write(fd, (("\n" if cut else "") + line + "\n").encode())
        os.fsync(fd)
    except OSError as error:
        if error.filename is None:
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise
    finally:
        os.close(fd)


def ensure_writable(run_dir: Path) -> None:
    """A clear error before training when the run directory cannot be written."""
    existing = next(p for p in [run_dir, *run_dir.parents] if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out {run_dir}: cannot write to {existing}; choose a directory you can write to")


#: The causes of a failed write that more space would cure.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def remedy(error: OSError) -> str:
    """What to do about a failed write, by its cause: the advice a one-line message gives."""
    if error.errno in NO_SPACE:
        return "free some space"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "make it writable"
    return "fix that"


@contextlib.contextmanager
def writing_output(option: str, path: Path, what: str):
    """A failed write of the file a command was asked for (``-o FILE``) as one line naming that file (never its
    temporary one) and what to do; nothing else of the user's is touched by such a command."""
    try:
        yield
    except OSError as error:
        raise UserError(f"{option} {path}: cannot write {what} there ({error.strerror or error}); "
                        f"{remedy(error)}, or give another {option}") from None


def in_use(run_dir: Path) -> bool:
    """Whether a run holds ``run_dir`` now (its :class:`Claim`): tried without waiting, and let go at once."""
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing the descriptor lets the lock go
    return False
