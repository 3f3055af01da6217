"""The callback kind's contract, both of its sides: what a callback is (:class:`Callback`, one of the kinds in
:data:`rlplug.registry.protocols.PROTOCOLS`) and what it is handed when called (:class:`CallbackRun`, the run
under way). Typed like the other protocols, and written into the plugin guide from here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from rlplug.registry.conformance import optional

if TYPE_CHECKING:
    from pathlib import Path


class CallbackRun(Protocol):
    """What a callback is handed with each call: the run under way."""

    #: frames collected so far, over all envs
    frames: int
    #: the run directory; a callback's own files go there
    run_dir: Path

    def log(self, name: str, value: float) -> None:
        """A value of the callback's own (a plain number) to every logger of the run at the current frame: a
        column of ``metrics.csv``, a scalar in TensorBoard and W&B. ``frames`` is the loggers' own name."""

    def stop(self, reason: str = "") -> None:
        """End the run cleanly once this call returns: a checkpoint is written, ``summary.json`` says ``stopped``
        with ``stopped_by`` ("callback NAME (reason)"), and ``rlplug resume`` goes on from there."""

    def save_checkpoint(self, name: str) -> Path:
        """The run as it is now, written atomically as the checkpoint file ``name`` (a plain file name ending in
        ``.pt``, not ``checkpoint.pt``) in the run directory: loadable as any checkpoint of the run."""


class Callback(Protocol):
    """A callback: told of a run's updates, evaluations and checkpoints, each time with the run
    (:class:`~rlplug.registry.callbacks.CallbackRun`) to log values of its own or to stop it. Every member is
    optional, but a callback has at least one; each returns None (a callback stops a run with ``run.stop()``, not
    by what it returns)."""

    @optional
    def on_update(self, run: CallbackRun, metrics: dict[str, float]) -> None:
        """After each update, with its metrics (what the loggers were given)."""

    @optional
    def on_evaluation(self, run: CallbackRun, returns: list[float]) -> None:
        """After each evaluation (deterministic policy, the run's evaluation env), with each episode's return."""

    @optional
    def on_checkpoint(self, run: CallbackRun, path: Path) -> None:
        """After each checkpoint, with the file written (the run's ``checkpoint.pt``)."""
