"""A run's callbacks (the recipe's ``[[callbacks]]`` and ``Agent.train(callbacks=[...])``'s), told by the schedule
(:func:`rlplug.run.schedule.train`) of each update, evaluation and checkpoint, each handed the run
(:class:`Handle`, a :class:`~rlplug.registry.callbacks.CallbackRun`) to log its own values or stop it.

A callback that raises, returns something, or logs what is no number is reported in one line as its plugin's
mistake; values logged by callbacks (and by ``Agent.log``) in one round reach every logger as one row."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlplug.errors import RlplugWarning, UserError, one_line
from rlplug.registry import protocols
from rlplug.registry.conformance import ContractError, has_member

if TYPE_CHECKING:
    from rlplug.recipe import Recipe
    from rlplug.run.trainer import Run

#: each member a callback may have
MEMBERS = (protocols.Callback.on_update, protocols.Callback.on_evaluation, protocols.Callback.on_checkpoint)


class CallbackFailed(UserError):
    """A callback raised: the plugin's bug, named in one line."""


@dataclass
class Entry:
    """One callback and how messages name it: its name (``stop-at-return``) and title (with its plugin)."""

    name: str
    title: str
    callback: Any

    @classmethod
    def given(cls, callback: Any) -> Entry:
        """A callback built by the caller (``Agent.train(callbacks=[...])``), named by its class."""
        name = type(callback).__name__
        return cls(name, f"callback {name}", callback)

    def check(self) -> Entry:
        if not any(has_member(self.callback, member) for member in MEMBERS):
            raise ContractError(f"{self.title} has none of on_update, on_evaluation, on_checkpoint "
                                f"(rlplug.registry.protocols.Callback); this is the plugin's mistake: tell its author")
        return self


@dataclass
class Callbacks:
    """The callbacks of one run, and what they logged that no logger has taken yet."""

    #: the recipe's, built with the run; every training of the run tells them
    own: list[Entry] = field(default_factory=list)
    #: the values logged outside a round (``Agent.log`` between trainings), taken by the next training's loggers
    pending: dict[str, float] = field(default_factory=dict)
    #: during a training: the run, the callbacks told (the recipe's, then the caller's) and the one stopping it
    run: Run | None = None
    told: list[Entry] = field(default_factory=list)
    stopped_by: str | None = None

    @classmethod
    def built(cls, recipe: Recipe, run_dir: Path) -> Callbacks:
        """The recipe's ``[[callbacks]]`` built (each checked against the protocol, :meth:`Entry.check`); a warning
        where one acts on evaluations and the recipe evaluates only at the end."""
        entries = [Entry(c.spec.name, c.title, c.build(run_dir=run_dir)).check() for c in recipe.callbacks]
        for index, entry in enumerate(entries):
            if recipe.eval.every_frames == 0 and has_member(entry.callback, protocols.Callback.on_evaluation):
                warnings.warn(RlplugWarning(f"callbacks[{index}]: {entry.title} acts on evaluations, and with "
                                            f"eval.every_frames = 0 there is one, at the end; set eval.every_frames"),
                              stacklevel=2)
        return cls(entries)

    def start(self, run: Run, given: Sequence[Any] = ()) -> Callbacks:
        """Training of ``run`` begins (its loggers not yet started), telling ``given`` too."""
        self.run, self.stopped_by = run, None
        self.told = self.own + [Entry.given(callback).check() for callback in given]
        return self

    def started(self) -> None:
        """The loggers started: the values logged before now go to them."""
        self.flush()

    def updated(self, metrics: dict[str, float] | None) -> None:
        self.tell(protocols.Callback.on_update, metrics)

    def evaluated(self, returns: list[float] | None) -> None:
        self.tell(protocols.Callback.on_evaluation, returns)

    def checkpointed(self, path: Any) -> None:
        self.tell(protocols.Callback.on_checkpoint, path)

    def tell(self, member, news: Any) -> None:
        """Each callback with ``member``, in order, with a copy of ``news`` (None: the driver has none to give)."""
        if self.run is None or news is None:
            return
        for entry in self.told:
            method = protocols.capability(entry.callback, member)
            if method is None:
                continue
            try:
                returned = method(Handle(self, entry), copy.copy(news))  # the run's own lists stay its own
            except UserError:
                raise
            except Exception as error:  # a plugin's bug: named, in one line
                raise CallbackFailed(one_line(f"{entry.title} failed in {method.__name__}(): {type(error).__name__}: "
                                              f"{error}; this is the plugin's mistake: tell its author"),
                                     original=error) from error
            if returned is not None:
                raise ContractError(one_line(f"{entry.title}: {method.__name__}() returned {returned!r}; callbacks "
                                             f"return None and stop a run with run.stop(); this is the plugin's "
                                             f"mistake: tell its author"))
        self.flush()

    def log(self, name: Any, value: Any, who: str, mistake: type[UserError] = UserError) -> None:
        """``name = value`` for every logger at the current frame, once the round of callbacks ends (or the next
        training starts its loggers); ``who`` is named, with a ``mistake``, where either is not what a logger
        takes."""
        if not isinstance(name, str) or not name or name == "frames":
            raise mistake(f"{who}: log({name!r}, ...): the name must be a non-empty string other than 'frames'")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise mistake(one_line(f"{who}: log({name!r}, {value!r}): the value must be a finite plain number "
                                   f"(float(tensor) or tensor.item())"))
        self.pending[name] = float(value)

    def flush(self) -> None:
        run = self.run
        if not self.pending or run is None or not run.loggers_started:
            return
        values, self.pending = self.pending, {}
        for logger in run.loggers:
            logger.log(values, run.frames)

    def outcome(self) -> dict[str, Any] | None:
        """How the training ended where a callback stopped it (None: none did)."""
        return None if self.stopped_by is None else {"status": "stopped", "stopped_by": self.stopped_by}

    def end(self) -> None:
        self.run, self.told = None, []


class Handle:
    """What a callback is handed (:class:`~rlplug.registry.callbacks.CallbackRun`): the run, for this callback."""

    def __init__(self, callbacks: Callbacks, entry: Entry):
        self._callbacks, self._entry = callbacks, entry
        assert callbacks.run is not None
        self._run: Run = callbacks.run

    @property
    def frames(self) -> int:
        return self._run.frames

    @property
    def run_dir(self) -> Path:
        return self._run.run_dir

    def log(self, name: str, value: float) -> None:
        self._callbacks.log(name, value, self._entry.title, ContractError)

    def stop(self, reason: str = "") -> None:
        if self._run.stop_reason is None:  # a signal's stop came first: it stays what ended the run
            self._run.stop_reason = f"callback {self._entry.name}"
            self._callbacks.stopped_by = f"callback {self._entry.name}" + (f" ({reason})" if reason else "")

    def save_checkpoint(self, name: str) -> Path:
        if not isinstance(name, str) or not name.endswith(".pt") or name.startswith(".") or "/" in name \
                or "\\" in name or name == "checkpoint.pt":
            raise ContractError(f"{self._entry.title}: save_checkpoint({name!r}): give a plain file name ending in "
                                f".pt other than checkpoint.pt (it is written in the run directory)")
        path = self._run.run_dir / name
        self._run.save_checkpoint(path)
        return path
