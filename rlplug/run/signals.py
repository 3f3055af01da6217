"""SIGINT and SIGTERM as every long command reads them (``rlplug run``, ``resume``, ``bench`` and its runs): the
first asks for a stop that keeps what was done, a second one stops at once, except a SIGTERM delivered again
within :data:`REPEATED_SIGTERM_S`, which is the same request. A light module: the bench imports it before torch."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator

#: Exit statuses after a stop by signal, as shells report them.
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}

#: Seconds within which a second SIGTERM is the first one delivered again, not a request to stop at once: a
#: batch scheduler or ``pkill`` that signals every process of a tree, and ``rlplug bench --jobs`` handing the
#: signal on to its runs, deliver it twice, and the second one cut the checkpoint short.
REPEATED_SIGTERM_S = 5.0


class StopOnSignal:
    """The handler of SIGINT and SIGTERM while ``installed``: the first signal is recorded in :attr:`signal`,
    ``on_first(name)`` is called and ``doing`` printed; a second raises :class:`KeyboardInterrupt` (stop at once)
    unless it is a SIGTERM within :data:`REPEATED_SIGTERM_S` of the first."""

    def __init__(self, doing: str, on_first: Callable[[str], None] = lambda name: None) -> None:
        self.signal: str | None = None
        self.doing = doing
        self.on_first = on_first
        self._first_at = 0.0

    def __call__(self, signum: int, frame: object) -> None:
        if self.signal is not None:
            if signum == signal.SIGTERM and time.monotonic() - self._first_at < REPEATED_SIGTERM_S:
                return  # the same request again: the stop is under way
            raise KeyboardInterrupt
        self.signal, self._first_at = signal.Signals(signum).name, time.monotonic()
        self.on_first(self.signal)
        again = "send it again" if signum != signal.SIGTERM else f"send it again after {REPEATED_SIGTERM_S:g} s"
        print(f"rlplug: {self.signal}: {self.doing} ({again} to stop at once)", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopOnSignal]:
        previous = {sig: signal.signal(sig, self) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
