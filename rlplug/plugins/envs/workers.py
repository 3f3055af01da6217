"""The gymnasium env's copies, made in this process (``vectorization = "sync"``) or in worker processes
(``"async"``: gymnasium's ``AsyncVectorEnv``), from one function, so both give the same episodes for a seed.

Worker processes belong to the run that made them:

- they ignore SIGINT, which a terminal sends to the whole process group on Ctrl-C: the run stops after the
  current iteration with a checkpoint and then closes them (a worker killed mid-step would break that stop);
- an exception in a worker, or a worker that dies, ends the run with one line naming the copy (and the exit
  status of a worker that ended), every other worker stopped at once (no orphans); the run keeps a checkpoint
  of its last update and goes on with ``resume`` (:class:`EnvWorkerError` is a ``WorkersLost``);
- a worker whose parent dies reads the end of its pipe and exits; ``Run.close`` closes them otherwise.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from rlplug.errors import UserError, WorkersLost, one_line

#: ``env.vectorization`` values: where the copies of a gymnasium env are stepped.
VECTORIZATIONS = ("sync", "async")


class EnvWorkerError(WorkersLost):
    """An env copy failed in its worker process (it raised, or the process ended). The run's own state is
    whole: it stops as when workers are lost, with a checkpoint, and goes on with ``resume``."""


class CopyMaker:
    """Makes one copy of the env: ``gym.make(env_id, **kwargs)`` inside ``wrappers``, in order. Called in the
    process that builds the vector env (every copy in ``"sync"``; the first, to read the spaces, in ``"async"``)
    and in each worker process, where it first makes the worker deaf to SIGINT (see the module docstring).
    The worker is started by ``fork`` where the system has it, so nothing here needs pickling."""

    def __init__(self, env_id: str, kwargs: Mapping[str, Any], wrappers: Sequence[Callable[[gym.Env], gym.Env]]):
        self.env_id, self.kwargs, self.wrappers = env_id, dict(kwargs), list(wrappers)
        self.owner = os.getpid()

    def __call__(self) -> gym.Env:
        if os.getpid() != self.owner:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        env = gym.make(self.env_id, **self.kwargs)
        for wrap in self.wrappers:
            env = wrap(env)
        return env


def start_method() -> str | None:
    """``fork`` where the system offers it (workers start in milliseconds, sharing the imported modules);
    the platform's default elsewhere."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else None


@contextlib.contextmanager
def gym_errors_unprinted():
    """gymnasium prints a worker's whole traceback before raising its exception here; the run says it in one
    line instead (``RLPLUG_DEBUG=1`` keeps gymnasium's print)."""
    if os.environ.get("RLPLUG_DEBUG"):
        yield
        return
    level = gym.logger.min_level
    gym.logger.min_level = gym.logger.ERROR + 1
    try:
        yield
    finally:
        gym.logger.min_level = level


class WorkerVectorEnv(gym.vector.AsyncVectorEnv):
    """gymnasium's ``AsyncVectorEnv`` whose failures end it whole: an exception raised in a copy, or a worker
    process that ended, closes every worker and raises :class:`EnvWorkerError` in one line."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], *, env_id: str, **kwargs: Any):
        self.env_id, self.started, self.stopping = env_id, False, False
        with self.failures_reported():
            super().__init__(env_fns, context=start_method(), **kwargs)
        self.started = True

    def reset_wait(self, *args: Any, **kwargs: Any):
        with self.failures_reported():
            return super().reset_wait(*args, **kwargs)

    def step_wait(self, *args: Any, **kwargs: Any):
        with self.failures_reported():
            return super().step_wait(*args, **kwargs)

    def call_wait(self, *args: Any, **kwargs: Any):
        with self.failures_reported():
            return super().call_wait(*args, **kwargs)

    @contextlib.contextmanager
    def failures_reported(self):
        if self.stopping:  # gymnasium's close finishing the call under way: a failure there ends it as a timeout
            try:
                yield
            except Exception as error:
                raise multiprocessing.TimeoutError(one_line(str(error))) from None
            return
        try:
            with gym_errors_unprinted():
                yield
        except (EOFError, ConnectionError) as error:  # a worker gone: killed, or crashed in native code
            ended = self.ended_workers(wait=1.0) or "a worker process"
            self.terminate()
            raise EnvWorkerError(f"{self.env_id}: {ended} ended while the run was using it "
                                 f"({type(error).__name__})", path="env") from None
        except EnvWorkerError:
            raise
        except Exception as error:  # raised by a copy in its worker, and handed back by gymnasium
            failed = [str(i) for i, pipe in enumerate(getattr(self, "parent_pipes", ())) if pipe is None]
            which = f"copy {', '.join(failed)}" if failed else "a copy"
            ended = self.ended_workers()
            self.terminate()
            if ended:  # a timeout or a closed pipe after a worker exited: the exit is the cause
                raise EnvWorkerError(f"{self.env_id}: {ended} ended while the run was using it", path="env") \
                    from None
            raise EnvWorkerError(f"{self.env_id}: {which} raised in its worker process: {type(error).__name__}: "
                                 f"{one_line(' '.join(str(error).split()))}", path="env") from error

    def ended_workers(self, wait: float = 0.0) -> str:
        """The copies whose worker process has ended, with how; ``wait``: seconds to give one that has closed
        its pipe to finish exiting."""
        processes = list(getattr(self, "processes", ()))
        deadline = time.monotonic() + wait  # polled: a forked sibling holds a copy of each worker's sentinel
        while processes and all(p.exitcode is None for p in processes) and time.monotonic() < deadline:
            time.sleep(0.01)
        ended = [(i, p.exitcode) for i, p in enumerate(processes) if p.exitcode is not None]
        return ", ".join(f"the worker of copy {i} ({exit_description(code)})" for i, code in ended)

    def terminate(self) -> None:
        """Every worker stopped at once (the env cannot go on after one of them failed). Once only: closing
        finishes the call under way, which fails again (:meth:`failures_reported`)."""
        if self.stopping:
            return
        self.stopping = True
        if self.started:
            with gym_errors_unprinted():  # gymnasium warns that a call was under way: the run says why instead
                self.close(terminate=True)
        else:  # failed while starting: close() does nothing before __init__ ends
            for process in getattr(self, "processes", ()):
                if process.is_alive():
                    process.terminate()
                process.join()


def exit_description(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def vector_env(make_copy: CopyMaker, num_envs: int, vectorization: str,
               **kwargs: Any) -> gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv:
    """``num_envs`` copies from ``make_copy``, stepped in this process or in as many worker processes."""
    if vectorization not in VECTORIZATIONS:
        raise UserError(f"must be one of {', '.join(map(repr, VECTORIZATIONS))}, got {vectorization!r}",
                        path="env.vectorization")
    fns = [make_copy] * num_envs
    if vectorization == "sync":
        return gym.vector.SyncVectorEnv(fns, **kwargs)
    return WorkerVectorEnv(fns, env_id=make_copy.env_id, **kwargs)
