"""The gymnasium env's copies, made in this process (``vectorization = "sync"``), in worker processes
(``"async"``: gymnasium's ``AsyncVectorEnv``), or stepped as one array by the id's own array env (``"vector"``:
:class:`ArrayCopies`), from one function, so all three give the same episodes for a seed.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rlplug.errors import UserError, WorkersLost, one_line

#: ``env.vectorization`` values: where the copies of a gymnasium env are stepped.
VECTORIZATIONS = ("sync", "async", "vector")
#: gymnasium's array envs whose copies :class:`ArrayCopies` can start one by one: the array keeps copy i's
#: state in ``state[:, i]`` (what the copy keeps in its ``state``), its episode's steps in ``steps[i]``
ARRAY_ENTRY_POINTS = ("gymnasium.envs.classic_control.cartpole:CartPoleVectorEnv",)


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
            if ended and not failed:  # a timeout or a closed pipe after a worker exited: the exit is the cause
                # (a copy that raised ends its worker too, status 0, and may do so before this looks)
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


def array_ids() -> list[str]:
    """The gymnasium ids :class:`ArrayCopies` steps (an array env of :data:`ARRAY_ENTRY_POINTS`)."""
    from gymnasium.envs.registration import registry

    return [name for name, spec in registry.items() if spec.vector_entry_point in ARRAY_ENTRY_POINTS]


class ArrayCopies(gym.vector.VectorEnv):
    """Copies of an env stepped as one array by the id's own array env (gymnasium's vector entry point), each
    copy's episodes started by that copy: seeded as ``SyncVectorEnv`` seeds them (copy i from ``seed + i``),
    restarted in the step that ends them (same-step autoreset) from its own random stream. So the episodes
    are ``"sync"``'s, step for step: only the dynamics are computed for all copies at once.

    The array env restarts the copies that ended at its next step (next-step autoreset, from one stream for
    all): here a copy that ends is started by the copy and its state written into the array in the same step,
    so the array never restarts one itself. ``copies`` may be several runs' (seeds trained together):
    :meth:`start` writes copies started elsewhere (their own env's reset) into the array."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, copies: Sequence[gym.Env], env_id: str, kwargs: Mapping[str, Any]):
        self.copies, self.env_id, self.kwargs = list(copies), env_id, dict(kwargs)
        self.num_envs = len(self.copies)
        self.autoreset_mode = gym.vector.AutoresetMode.SAME_STEP
        self.array = gym.make_vec(env_id, self.num_envs, vectorization_mode="vector_entry_point", **self.kwargs)
        self.single_observation_space = self.copies[0].observation_space
        self.single_action_space = self.copies[0].action_space
        self.observation_space, self.action_space = self.array.observation_space, self.array.action_space
        self.array.reset()  # its state exists; every copy's is written over it before a step (start)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        seeds = [None] * self.num_envs if seed is None else [seed + i for i in range(self.num_envs)]
        observations = [copy.reset(seed=s, options=options)[0] for copy, s in zip(self.copies, seeds)]
        self.start(range(self.num_envs))
        return np.stack(observations), {}

    def start(self, indices: Iterable[int]) -> None:
        """The copies at ``indices``, just started by their own ``reset``, go on from there in the array."""
        array: Any = self.array.unwrapped  # a CartPoleVectorEnv (ARRAY_ENTRY_POINTS): state, steps, prev_done
        for index in indices:
            copy: Any = self.copies[index].unwrapped  # a CartPoleEnv: its state, [4]
            array.state[:, index] = copy.state
            array.steps[index], array.prev_done[index] = 0, False

    def transition(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        """One step of every copy: ``(next_observation, reward, terminated, truncated, observation)``, the last
        where each copy goes on from (the first of its next episode where one ended), as
        :class:`rlplug.plugins.envs.stage.Transition` orders them."""
        next_observation, reward, terminated, truncated, _ = self.array.step(actions)
        reward = reward.astype(np.float64)  # as "sync" batches the copies' Python floats
        ended = terminated | truncated
        observation = next_observation
        if ended.any():
            rows = np.flatnonzero(ended)
            observation = next_observation.copy()
            for index in rows:
                observation[index] = self.copies[index].reset()[0]
            self.start(rows)
        return next_observation, reward, terminated, truncated, observation

    def step(self, actions):
        next_observation, reward, terminated, truncated, observation = self.transition(actions)
        ended = terminated | truncated
        if not ended.any():
            return observation, reward, terminated, truncated, {}
        final = np.full(self.num_envs, None, dtype=object)
        for index in np.flatnonzero(ended):
            final[index] = next_observation[index]
        info = {"final_obs": final, "_final_obs": ended, "final_info": {}, "_final_info": ended.copy()}
        return observation, reward, terminated, truncated, info

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``name`` of every copy, called where it is a method, as ``SyncVectorEnv.call`` (what rlplug and
        TorchRL ask of the copies: their wrappers' attributes)."""
        values = [copy.get_wrapper_attr(name) for copy in self.copies]
        return tuple(value(*args, **kwargs) if callable(value) else value for value in values)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def close_extras(self, **kwargs: Any) -> None:
        self.array.close()
        for copy in self.copies:
            copy.close()


def copies_of(vector_env: gym.vector.VectorEnv) -> list[gym.Env] | None:
    """The copies a vector env steps in this process (``"sync"``, ``"vector"``); None for worker processes."""
    if isinstance(vector_env, ArrayCopies):
        return vector_env.copies
    if isinstance(vector_env, gym.vector.SyncVectorEnv):
        return list(vector_env.envs)
    return None


class ArraysTogether:
    """Several vector envs of one id and options (the envs of seeds trained together), all their copies
    stepped as one :class:`ArrayCopies`: each env's copies still started by themselves, so each env's episodes
    are those it gives alone. A step takes actions ``[envs, copies, ...]`` and returns the five arrays of
    :meth:`ArrayCopies.transition` in that layout (the array road's ``step_arrays`` of each env, stacked)."""

    def __init__(self, vector_envs: Sequence[gym.vector.VectorEnv], make_copy: CopyMaker):
        blocks = [copies_of(env) for env in vector_envs]
        if any(block is None for block in blocks):
            raise ValueError("only copies stepped in this process can be stepped together")
        self.size = vector_envs[0].num_envs
        self.arrays = ArrayCopies([copy for block in blocks for copy in block or ()], make_copy.env_id,
                                  make_copy.kwargs)
        #: the blocks stepped for their env, in order (the others are envs that left)
        self.active = list(range(len(blocks)))
        self.actions: np.ndarray | None = None  # every copy's, once an env has left

    def started(self, position: int) -> None:
        """The env at ``position`` among the active ones was reset by itself: its copies go on from there."""
        block = self.active[position]
        self.arrays.start(range(block * self.size, (block + 1) * self.size))

    def keep(self, positions: Sequence[int]) -> None:
        """Go on with the envs at these positions among the active ones."""
        self.active = [self.active[i] for i in positions]

    def __call__(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        flat, rows = actions.reshape(-1, *actions.shape[2:]), None
        if len(self.active) * self.size < self.arrays.num_envs:  # some envs left: they take action 0, unread
            rows = (np.asarray(self.active)[:, None] * self.size + np.arange(self.size)).reshape(-1)
            if self.actions is None:
                self.actions = np.zeros((self.arrays.num_envs, *flat.shape[1:]), dtype=flat.dtype)
            self.actions[rows] = flat
            flat = self.actions
        parts = list(self.arrays.transition(flat))
        parts[1] = parts[1].astype(np.float32)  # the array road's reward (rlplug.registry.protocols.Env)
        return tuple((part if rows is None else part[rows]).reshape(len(self.active), self.size, *part.shape[1:])
                     for part in parts)


def array_copies(make_copy: CopyMaker, num_envs: int) -> ArrayCopies:
    """``"vector"``: ``num_envs`` copies from ``make_copy`` stepped as one array, or ``UserError`` where the id has
    no such array env (the caller refuses wrapped copies: the array steps the env as gymnasium makes it)."""
    ids = array_ids()
    if make_copy.env_id not in ids:
        raise UserError(f"'vector' steps the copies as the id's own array env, which {make_copy.env_id} does not "
                        f"have (those that do: {', '.join(ids)}); use 'sync'", path="env.vectorization")
    return ArrayCopies([make_copy() for _ in range(num_envs)], make_copy.env_id, make_copy.kwargs)


def vector_env(make_copy: CopyMaker, num_envs: int, vectorization: str,
               **kwargs: Any) -> gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv | ArrayCopies:
    """``num_envs`` copies from ``make_copy``, stepped in this process, in as many worker processes, or as one
    array (``kwargs``: the autoreset mode, which ``"vector"`` keeps same-step always)."""
    if vectorization not in VECTORIZATIONS:
        raise UserError(f"must be one of {', '.join(map(repr, VECTORIZATIONS))}, got {vectorization!r}",
                        path="env.vectorization")
    fns = [make_copy] * num_envs
    if vectorization == "sync":
        return gym.vector.SyncVectorEnv(fns, **kwargs)
    if vectorization == "vector":
        return array_copies(make_copy, num_envs)
    return WorkerVectorEnv(fns, env_id=make_copy.env_id, **kwargs)
