"""Logger implementations behind the built-in logger plugins.

A logger has ``log(metrics, frames)``, called after every update (and after every evaluation), and
``close(summary)``, called once at the end, also when the run fails (``summary["status"]`` says so); it
may have ``log_video(path, frames)``, called with each evaluation video when ``eval.video = true``.
"""

from __future__ import annotations

import csv
import os
import time
import typing
from pathlib import Path
from typing import Literal, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from rlplug.core.files import no_links, refuse_link

#: Metrics the console shows while training, in order, with their labels.
HEADLINE = {"fps": "frames/s", "episode_return": "return", "eval_return_mean": "eval return"}


class ConsoleLogger:
    def __init__(self, total_frames: int, *, every_seconds: float = 10.0, live: bool | None = None,
                 every_row: bool = False):
        self.total_frames = total_frames
        self.every_seconds = every_seconds
        #: a line for every row logged (rows spaced by run.log_every_frames), not every ``every_seconds``
        self.every_row = every_row
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
        if self.progress is not None:
            self.progress.update(self.task, completed=min(frames, self.total_frames), status=self.status())
            return
        now = time.monotonic()
        if "eval_return_mean" in metrics:
            spread = f" +- {metrics['eval_return_std']:.3g}" if "eval_return_std" in metrics else ""
            print(f"{self.where(frames)}  eval return {metrics['eval_return_mean']:.4g}{spread}", flush=True)
        elif self.every_row or now - self.last_line >= self.every_seconds or frames >= self.total_frames:
            self.last_line = now
            print(f"{self.where(frames)}  {self.status()}", flush=True)

    def where(self, frames: int) -> str:
        """``frames 5120/10000 (51%)``; past the total (the last batch is collected whole), ``frames 10240
        (done: 10000 asked, the last batch whole)`` rather than more than 100%."""
        if frames <= self.total_frames:
            return f"frames {frames}/{self.total_frames} ({100.0 * frames / self.total_frames:.0f}%)"
        return f"frames {frames} (done: {self.total_frames} asked, the last batch whole)"

    def status(self) -> str:
        """The headline metrics as last logged (formatted only when shown: off-policy runs log every step)."""
        return "  ".join(f"{label} {self.latest[key]:.4g}" for key, label in HEADLINE.items() if key in self.latest)

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
    ``start_frames`` (by a run killed after its last checkpoint, now resumed from it) are dropped. The file is the
    run's own: a symbolic link in its place is refused, never written through (another run's file, cut).
    """

    def __init__(self, path: Path, start_frames: int = 0):
        self.path = Path(path)
        self.columns: list[str] = ["frames"]
        self.file: TextIO | None = None
        self.writer: csv.DictWriter | None = None
        refuse_link(self.path)
        if self.path.exists():
            rows, self.columns = self.read_rows()
            kept = [row for row in rows if int(float(row["frames"])) <= start_frames]
            if len(kept) < len(rows) or not self.path.read_bytes().endswith(b"\n"):
                with self.open("w") as rewritten:
                    writer = csv.DictWriter(rewritten, fieldnames=self.columns)
                    writer.writeheader()
                    writer.writerows(kept)

    def read_rows(self) -> tuple[list[dict[str, str]], list[str]]:
        """The rows and columns of the file this logger continues; a last line without its newline (cut short by
        a kill or a full disk) is left out. ``UserError`` for a file that is no metrics.csv of rlplug's (NUL bytes
        from two writers at once, garbage): one line naming it, instead of a run that fails half-way."""
        from rlplug.errors import UserError

        text = self.path.read_bytes().decode("utf-8", errors="replace")
        lines = text.splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines.pop()
        try:
            reader = csv.DictReader(lines)
            rows = list(reader)
            columns = list(reader.fieldnames or self.columns)
            if columns[0] != "frames":
                raise ValueError("its first column is not frames")
            for row in rows:
                if None in row or int(float(row["frames"])) < 0:  # more fields than columns, or a negative count
                    raise ValueError(f"line {reader.line_num} is not one of its rows")
        except (csv.Error, ValueError, TypeError) as error:
            raise UserError(f"{self.path}: not a metrics file rlplug can continue ({error}); move it aside, and the "
                            f"run starts a new one") from None
        return rows, columns

    def log(self, metrics: dict[str, float], frames: int) -> None:
        row = {"frames": frames, **metrics}
        new = [key for key in row if key not in self.columns]
        if new or self.file is None or self.writer is None:
            self.columns += new
            self.file, self.writer = self._rewrite()
        self.writer.writerow(row)
        self.file.flush()

    def _rewrite(self) -> tuple[TextIO, csv.DictWriter]:
        """The file written anew with the current columns (and the rows so far), opened for the rows to come."""
        rows = []
        if self.file is not None:
            self.file.close()
        if self.path.exists():
            with self.open("r") as old:
                rows = list(csv.DictReader(old))
        file = self.open("w")
        writer = csv.DictWriter(file, fieldnames=self.columns)
        writer.writeheader()
        writer.writerows(rows)
        return file, writer

    def open(self, mode: str) -> TextIO:
        """The file, never through a symbolic link put in its place since (that fails, ELOOP)."""
        return typing.cast(TextIO, open(self.path, mode, newline="", opener=no_links))

    def close(self, summary: dict) -> None:
        if self.file is not None:
            self.file.close()


#: Where the wandb logger keeps its run's id, so that a resumed run logs to the same W&B run.
WANDB_ID_FILE = "wandb-run-id"


def wandb_logged_in() -> bool:
    """Whether W&B credentials are at hand, read locally (never over the network): ``WANDB_API_KEY`` or
    ``WANDB_IDENTITY_TOKEN_FILE`` set, or a ``.netrc`` entry (what ``wandb login`` writes) for the server."""
    import netrc
    from urllib.parse import urlsplit

    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or _wandb_configured_base_url() or "https://api.wandb.ai").netloc
    candidates = [Path(os.environ["NETRC"]).expanduser()] if os.environ.get("NETRC") else \
        [Path("~/.netrc").expanduser(), Path("~/_netrc").expanduser()]
    for path in candidates:
        try:
            credentials = netrc.netrc(path).authenticators(host)
        except (OSError, netrc.NetrcParseError):
            continue
        if credentials and credentials[2]:
            return True
    return False


def _wandb_configured_base_url() -> str | None:
    """The server ``wandb login --host`` chose, from wandb's settings file, if any."""
    import configparser

    settings = configparser.ConfigParser()
    try:
        settings.read(Path(os.environ.get("WANDB_CONFIG_DIR") or "~/.config/wandb").expanduser() / "settings")
    except (OSError, configparser.Error):
        return None
    return settings.get("default", "base_url", fallback=None)


WandbMode = Literal["online", "offline", "disabled"]


def wandb_mode(mode: WandbMode | None) -> WandbMode | None:
    """The mode a wandb run starts in: the recipe's when it sets one; else, where ``WANDB_MODE`` is set or
    the user is logged in, None (wandb decides: ``WANDB_MODE``, ``wandb offline``/``wandb online``, online);
    else "offline": without credentials an online run could only fail, after waiting for the server."""
    if mode is not None:
        return mode
    if os.environ.get("WANDB_MODE") or wandb_logged_in():
        return None
    return "offline"


class WandbLogger:
    """Every metric to a Weights & Biases run, with the resolved recipe as its config.

    The run's files go to ``run_dir/wandb`` (``offline-run-*`` in offline mode: ``wandb sync`` uploads
    them later). Its id is kept in ``run_dir/wandb-run-id``; a run that goes on (``frames > 0``: resumed,
    or trained on) continues the same W&B run. Steps are frame counts. No credentials are written.

    An online run whose server cannot be reached fails before training, after wandb's ``init_timeout`` (90 s;
    ``WANDB_INIT_TIMEOUT``), saying to log in or choose offline mode.
    """

    def __init__(self, run_dir: Path, *, start_frames: int = 0, project: str = "rlplug", entity: str | None = None,
                 group: str | None = None, tags: tuple[str, ...] | list[str] = (), mode: WandbMode | None = None,
                 name: str | None = None):
        import secrets
        import string
        import tomllib

        import wandb

        from rlplug.errors import UserError

        run_dir = Path(run_dir)
        id_file = run_dir / WANDB_ID_FILE
        previous = id_file.read_text().strip() if start_frames > 0 and id_file.exists() else ""
        run_id = previous or "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
        id_file.write_text(run_id + "\n")
        recipe = run_dir / "recipe.toml"
        chosen = wandb_mode(mode)
        if chosen in ("offline", "disabled"):
            _disable_wandb_analytics()
        try:
            self.run = wandb.init(
                mode=chosen, project=project, entity=entity, group=group, tags=list(tags) or None,
                name=name or run_dir.name, dir=str(run_dir), id=run_id, resume="allow" if previous else None,
                config=tomllib.loads(recipe.read_text()) if recipe.exists() else {},
                reinit="create_new",  # a run of the user's own, already going, is left alone
            )
        except wandb.Error as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UserError(f"wandb logger: could not start a W&B run ({reason}); check the server can be reached "
                            f"and the login (`wandb login`), or log offline: mode = \"offline\" in the logger's "
                            f"table, or WANDB_MODE=offline") from None

    def log(self, metrics: dict[str, float], frames: int) -> None:
        self.run.log(dict(metrics), step=frames)

    def log_video(self, path: Path, frames: int) -> None:
        """An evaluation video (``eval.video = true``), shown in the run's media panel."""
        import wandb

        self.run.log({"eval_video": wandb.Video(str(path), format="mp4")}, step=frames)

    def close(self, summary: dict) -> None:
        self.run.summary.update({key: value for key, value in summary.items() if value is not None})
        self.run.finish(exit_code=0 if summary.get("status") in ("finished", "paused") else 1)


def _disable_wandb_analytics() -> None:
    """Stop wandb's own usage analytics, which (wandb 0.31) read the process-wide settings rather than the
    run's: an offline run would otherwise still post them to ``WANDB_BASE_URL`` at exit."""
    try:
        from wandb.analytics.opentelemetry.opentelemetry_proxy import disable
    except ImportError:  # another wandb version: nothing of the kind there
        return
    disable()


class TensorBoardLogger:
    """Every metric as a TensorBoard scalar at ``global_step = frames``, in ``log_dir``.

    A run that goes on from ``start_frames`` (resumed from a checkpoint) writes a new event file whose
    first event tells TensorBoard to hide what an earlier file logged after that frame (``purge_step``):
    the steps a killed run logged after its last checkpoint, which the resumed run logs again.
    """

    def __init__(self, log_dir: Path, *, start_frames: int = 0, flush_seconds: float = 10.0,
                 networks: dict | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=start_frames + 1 if start_frames > 0 else None,
                                    flush_secs=flush_seconds)
        self.networks = networks or {}

    def log(self, metrics: dict[str, float], frames: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)):
                self.writer.add_scalar(key, value, global_step=frames)
        if self.networks and "eval_return_mean" in metrics:  # at evaluations: often enough to watch, cheap
            for network_name, network in self.networks.items():
                for name, parameter in network.named_parameters():
                    self.writer.add_histogram(f"weights/{network_name}.{name}", parameter.detach(), frames)
                    if parameter.grad is not None:
                        self.writer.add_histogram(f"gradients/{network_name}.{name}", parameter.grad, frames)

    def log_video(self, path: Path, frames: int) -> None:
        """An evaluation video (``eval.video = true``) under the tag ``eval_video``, in TensorBoard's images tab.

        TensorBoard shows videos as animated GIFs inside image summaries (torch's ``add_video`` encodes them
        with moviepy, which rlplug does not need otherwise); Pillow, which matplotlib brings, encodes them here.
        """
        from tensorboard.compat.proto.summary_pb2 import Summary

        gif, width, height = mp4_as_gif(path)
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
        file_writer = self.writer.file_writer
        if file_writer is None:
            raise RuntimeError("the TensorBoard writer was closed before the video was logged")
        file_writer.add_summary(Summary(value=[Summary.Value(tag="eval_video", image=image)]), global_step=frames)

    def close(self, summary: dict) -> None:
        self.writer.flush()
        self.writer.close()


#: TensorBoard keeps every GIF in its event file: evaluation videos are shrunk to this many frames at most
#: (every n-th frame) and to half their size.
GIF_MAX_FRAMES = 150


def mp4_as_gif(path: Path) -> tuple[bytes, int, int]:
    """The video at ``path`` as an animated GIF that plays at the same speed; (bytes, width, height)."""
    import io

    import imageio_ffmpeg
    from PIL import Image

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    frames = [bytes(frame) for frame in reader]
    step = max(1, -(-len(frames) // GIF_MAX_FRAMES))
    size = (max(1, width // 2), max(1, height // 2))
    images = [Image.frombytes("RGB", (width, height), frame).resize(size) for frame in frames[::step]]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], loop=0,
                   duration=round(1000 * step / (meta.get("fps") or 30)))
    return buffer.getvalue(), size[0], size[1]
