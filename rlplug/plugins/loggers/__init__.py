"""Built-in loggers: the console (progress and a final summary), a CSV file of metrics, Weights & Biases
and TensorBoard (the last two need ``pip install rlplug[logging]``; imported only when a run uses them)."""

from __future__ import annotations

from typing import Annotated, Literal

from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Check, Range

#: What a run writes in its own directory (the seeds of a batched run and a tune trial's aggregate included):
#: a logger's file may take none of these names.
RUN_FILES = frozenset({"checkpoint.pt", "checkpoints", "summary.json", "recipe.toml", "batched.json",
                       "aggregate.json", "wandb", "wandb-run-id", "tensorboard", "replay", "videos",
                       "best.pt", "best.json", "parameters.jsonl", "set-requests"})
#: The longest file name most filesystems take, in bytes.
LONGEST_NAME = 255


def make_console(total_frames: int, every_seconds: Annotated[float, Range(gt=0)] = 10.0, live: bool | None = None,
                 log_every_frames: int = 0):
    """Live progress bar on a terminal, plain periodic lines elsewhere (every ``every_seconds``, or at each row
    where ``run.log_every_frames`` spaces them), and a final summary."""
    from rlplug.plugins.loggers.builtin import ConsoleLogger

    return ConsoleLogger(total_frames, every_seconds=every_seconds, live=live, every_row=log_every_frames > 0)


def run_file_problem(name: str) -> str | None:
    """Why ``name`` cannot be a file a logger writes in the run directory, or None: a plain file name, so that
    no recipe (a downloaded run's included) writes outside its directory or over the run's own files."""
    if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
        return f"{name!r} is not a file name; give a plain name such as 'metrics.csv' (it is written inside the " \
               f"run directory; no directories, no absolute paths)"
    if name.startswith("."):
        return f"{name!r} starts with '.', which the run's temporary files do; choose a name such as 'metrics.csv'"
    if name.lower() in RUN_FILES or name.lower().startswith("seed-"):
        return f"{name!r} is a file of the run itself; choose another name, such as 'metrics.csv'"
    if len(name.encode("utf-8", "surrogatepass")) > LONGEST_NAME:
        return f"a name of {len(name.encode('utf-8', 'surrogatepass'))} bytes is longer than a file name can be " \
               f"({LONGEST_NAME}); choose a shorter one"
    return None


def shared_file_problem(loggers: list) -> str | None:
    """Why two of a recipe's loggers would write one file (csv loggers of the same ``filename``, compared as a
    case-insensitive filesystem would), or None: each would rewrite the other's rows."""
    first: dict[str, int] = {}
    for index, logger in enumerate(loggers):
        if getattr(getattr(logger, "spec", None), "factory", None) is not make_csv:
            continue
        name = str(logger.params.get("filename", "metrics.csv"))
        earlier = first.setdefault(name.lower(), index)
        if earlier != index:
            return f"loggers[{earlier}] and loggers[{index}] are csv loggers of one file, {name!r}, each of which " \
                   f"would rewrite the other's rows; give one another filename, or remove one"
    return None


def make_csv(run_dir, frames: int = 0, filename: Annotated[str, Check(run_file_problem)] = "metrics.csv"):
    """Every metric, one row per log call, in the run directory (``filename``: a plain file name there)."""
    from rlplug.plugins.loggers.builtin import CSVLogger

    return CSVLogger(run_dir / filename, start_frames=frames)


def make_wandb(run_dir, frames: int = 0, project: str = "rlplug", entity: str | None = None,
               group: str | None = None,
               tags: list[str] = (),  # type: ignore[assignment]  # the schema reads it as a list
               name: str | None = None,
               mode: Literal["offline", "online", "disabled"] | None = None):
    """Weights & Biases: every metric (step = frames), the resolved recipe as config, the summary at the end.

    Files go to the run directory's ``wandb/``. ``mode`` unset: ``WANDB_MODE`` where it is set, else online
    when logged in (``wandb login`` or ``WANDB_API_KEY``), else offline (``wandb sync`` uploads later).
    ``name`` unset: the run directory's name. A resumed run continues the same W&B run.
    """
    from rlplug.plugins.loggers.builtin import WandbLogger

    _require("wandb", "wandb")
    return WandbLogger(run_dir, start_frames=frames, project=project, entity=entity, group=group, tags=tags,
                       mode=mode, name=name)


def make_tensorboard(
    run_dir,
    frames: int = 0,
    networks=None,
    #: also write histograms of every network weight and its gradient, at each evaluation
    histograms: bool = False,
):
    """TensorBoard: every metric as a scalar at step = frames, in the run directory's ``tensorboard/``."""
    from rlplug.plugins.loggers.builtin import TensorBoardLogger

    _require("tensorboard", "tensorboard")
    return TensorBoardLogger(run_dir / "tensorboard", start_frames=frames,
                             networks=(networks or {}) if histograms else {})


def _require(module: str, package: str) -> None:
    """A clear error, before training, when a logger's package is not installed."""
    import importlib.util

    from rlplug.errors import UserError

    if importlib.util.find_spec(module) is None:
        raise UserError(f"the {package} logger needs the '{package}' package: pip install {package} "
                        f"(or rlplug[logging])")


@hookimpl
def rlplug_register_loggers(register):
    register("console", make_console)
    register("csv", make_csv)
    register("wandb", make_wandb)
    register("tensorboard", make_tensorboard)
