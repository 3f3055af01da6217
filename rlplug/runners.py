"""Runners: where a run's experience is collected, in this process (``local``) or on Ray workers (``ray``).

A runner (the recipe's ``[runner]`` table, built by :mod:`rlplug.plugins.distributed`) gives the training
loop its collector: ``runner.collector(env, policy, frames_per_batch, seed, recipe=..., algorithm=...)``
returns an object with ``collect() -> TensorDict`` (``[envs, time]``, TorchRL's layout), ``tracker``
(:class:`rlplug.collect.EpisodeTracker`), ``restart(seed)``, ``sync_weights()`` (after every update) and
``shutdown()`` (when training ends, however it ends). Optionally ``metrics()`` (logged with each update),
``statistics()`` / ``load_statistics(state)`` (the env's running normalisation statistics, where the
envs live elsewhere) and ``update(algorithm, batch)`` (an update that replaces ``algorithm.update``: gradient
workers).

``local`` is :class:`rlplug.collect.Collector` as it always was. ``ray`` runs TorchRL's
:class:`~torchrl.collectors.distributed.RayCollector`: TorchRL creates the Ray actors, dispatches their
rollouts (synchronously, or first come, first served for asynchronous algorithms such as IMPALA) and pushes
weights to them. What runs inside each actor is :class:`WorkerCollector`, a TorchRL ``BaseCollector``
around rlplug's own collector, so workers step their envs on the same fast road as a local run (TorchRL's
TensorDict-per-step collector costs several times more per CartPole step; BENCHMARKS.md). In gradient mode
(``mode = "gradients"``) the same actors also hold a copy of the algorithm and compute the update's gradients
on their own rollouts (:class:`GradientWorker`; the protocol is :class:`~rlplug.algorithms.onpolicy.OnPolicy`'s).

Choices that differ from TorchRL's defaults, and why:

- Weights travel through Ray's object store (TorchRL's ``RayWeightUpdater``: one ``ray.put`` per update,
  a fire-and-forget call per worker, ordered before that worker's next rollout), not through TorchRL's newer
  ``RayWeightSyncScheme``, which joins the driver and workers in one fixed-size gloo process group that a
  restarted worker cannot rejoin. Worker restarts (``max_restarts``) are the point of the fault handling.
- Every pushed set of weights carries a version (the learner's update count); each rollout reports the
  version it was collected with, which gives the ``policy_lag`` metric, and its worker's process id, which
  gives ``worker_restarts``.
- Rollouts and weights cross processes as consolidated TensorDicts (one buffer): a third of the transfer
  time of a TensorDict of separate tensors.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlplug.collect import Collector, EpisodeTracker
from rlplug.errors import UserError
from rlplug.training import set_compute_threads

#: The key under which a worker's rollout carries its bookkeeping (popped before the learner sees the batch).
WORKER_KEY = "rlplug_worker"


# -- local ------------------------------------------------------------------------------------------------


class LocalCollector(Collector):
    """:class:`rlplug.collect.Collector` with the runner protocol's two no-ops: the collector and the
    learner share the policy's parameters, so there is nothing to synchronise or stop."""

    def sync_weights(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class LocalRunner:
    """Collect in the training process: the env and the policy the learner trains, one after the other."""

    def collector(self, env, policy, frames_per_batch: int, seed: int, **_context) -> LocalCollector:
        return LocalCollector(env, policy, frames_per_batch, seed)


# -- what the driver hands to workers ---------------------------------------------------------------------


@dataclass(frozen=True)
class EnvMaker:
    """Builds the recipe's env in a worker's process: the env component (a frozen dataclass holding its
    factory, which pickles) with ``num_envs`` changed where the env has that key."""

    component: Any
    device: str = "cpu"
    num_envs: int | None = None

    def __call__(self):
        component = self.component
        if self.num_envs is not None and "num_envs" in component.params:
            component = type(component)(component.spec, {**component.params, "num_envs": self.num_envs},
                                        component.path)
        return component.build(device=self.device)


def quiet_torchrl() -> None:
    if "RL_LOGGING_LEVEL" not in os.environ:
        logging.getLogger("torchrl").setLevel(logging.WARNING)


# -- the ray runner -----------------------------------------------------------------------------------------


def ray_module():
    """``ray``, or the one-line error that says how to get it."""
    try:
        import ray
    except ImportError:
        raise UserError('the ray runner needs Ray: pip install "rlplug[ray]" (or pip install ray)',
                        path="runner.use") from None
    return ray


@dataclass(frozen=True)
class RayRunner:
    """``workers`` Ray actors step envs with the learner's latest weights; the learner stays in this process."""

    workers: int = 2
    address: str | None = None
    resources_per_worker: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1.0})
    mode: str = "experience"
    max_restarts: int = 3

    def remote_options(self) -> dict[str, Any]:
        """``ray.remote`` options for one worker actor: its resources and restart policy."""
        known = {"num_cpus", "num_gpus", "memory"}
        options: dict[str, Any] = {k: v for k, v in self.resources_per_worker.items() if k in known}
        options.setdefault("num_cpus", 1.0)
        if "memory" in options:
            options["memory"] = int(options["memory"])
        custom = {k: float(v) for k, v in self.resources_per_worker.items() if k not in known}
        if custom:
            options["resources"] = custom
        # Ray restarts a worker that dies; the rollout it was collecting is lost, and RayCollection asks again.
        options.update(max_restarts=self.max_restarts, max_task_retries=0)
        return options

    def collector(self, env, policy, frames_per_batch: int, seed: int, *, recipe=None, algorithm=None,
                  **_context) -> "RayCollection":
        if recipe is None:
            raise TypeError("the ray runner builds the recipe's env on each worker: pass recipe=")
        return RayCollection(self, env, policy, frames_per_batch, seed, recipe=recipe, algorithm=algorithm)


def connect_ray(runner: RayRunner) -> bool:
    """Connect to the runner's Ray cluster, or start a local instance; True when this call started Ray.

    A Ray already initialised in this process (a test fixture, a user's own ``ray.init``) is used as it is.
    """
    ray = ray_module()
    if ray.is_initialized():
        return False
    # log_to_driver off: workers report failures as exceptions; their log lines (and Ray's notes on tasks retried
    # after a restart) would only clutter the console
    options = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    if runner.address is None:
        # "local": a new instance for this run, never a cluster that RAY_ADDRESS or 'ray start' points at; enough
        # logical CPUs for the workers asked for, even on a smaller machine (oversubscribed rather than stuck)
        needed = math.ceil(runner.remote_options()["num_cpus"] * runner.workers)
        ray.init(address="local", num_cpus=max(os.cpu_count() or 1, needed), **options)
        return True
    problem = unreachable(runner.address)
    if problem is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ray.init(address=runner.address, **options)
            return True
        except Exception as error:  # ConnectionError, ValueError, RuntimeError, grpc's: all the same to a user
            text = str(error).strip()
            problem = text.splitlines()[0][:200] if text else type(error).__name__
    raise UserError(f"cannot connect to the Ray cluster at '{runner.address}' ({problem}); start one with "
                    f"'ray start --head', or leave runner.address out for a local Ray instance",
                    path="runner.address")


def unreachable(address: str, timeout: float = 5.0) -> str | None:
    """Why nothing answers at ``address`` (``host:port`` or ``ray://host:port``), or None; ``ray.init`` itself
    retries an address where nothing listens for minutes before it gives up."""
    import socket

    if address == "auto":
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except OSError as error:
        return error.strerror or type(error).__name__


def check_resources(runner: RayRunner) -> None:
    """A clear error instead of workers waiting forever for resources the cluster does not have."""
    ray = ray_module()
    total = ray.cluster_resources()
    options = runner.remote_options()
    wanted = {"CPU": options["num_cpus"] * runner.workers, "GPU": options.get("num_gpus", 0) * runner.workers,
              **{k: v * runner.workers for k, v in options.get("resources", {}).items()}}
    for name, amount in wanted.items():
        if amount > total.get(name, 0) + 1e-9:
            raise UserError(f"{runner.workers} workers with resources_per_worker {dict(runner.resources_per_worker)} "
                            f"need {amount:g} {name}, and the Ray cluster has {total.get(name, 0):g}; use fewer "
                            f"workers or smaller resources_per_worker", path="runner.workers")


_UPDATER_CLASS = None


def weights_updater_class():
    """The ``weight_updater`` handed to TorchRL's RayCollector, defined on first use (TorchRL's base class is
    deprecated and warns when subclassed)."""
    global _UPDATER_CLASS
    if _UPDATER_CLASS is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from torchrl.collectors.weight_update import RayWeightUpdater

            class VersionedRayWeightUpdater(RayWeightUpdater):
                """TorchRL's ``RayWeightUpdater`` (weights through the object store, a fire-and-forget
                ``update_policy_weights_`` call per worker, ordered before that worker's next rollout) with the
                learner's version attached, and one ``ray.put`` per version however many workers get it."""

                def __init__(self, source: TensorDictBase):
                    # the remote collectors are read from the RayCollector it is registered with
                    super().__init__(policy_weights=source, remote_collectors=[], max_interval=0)
                    self.source, self.version = source, 0
                    self._published: tuple[int, Any] | None = None

                def all_worker_ids(self) -> list[int]:
                    return list(range(len(self.collector.remote_collectors)))

                def _get_server_weights(self):
                    import ray

                    if self._published is None or self._published[0] != self.version:
                        weights = self.source.to("cpu") if self.source.device not in (None, torch.device("cpu")) \
                            else self.source
                        self._published = (self.version, ray.put(weights.consolidate()))
                    return self._published[1]

                def _sync_weights_with_worker(self, worker_id: int, server_weights) -> None:
                    self.collector.remote_collectors[worker_id].update_policy_weights_.remote(
                        policy_weights=server_weights, version=self.version)

                def _skip_update(self, worker_id: int) -> bool:
                    return False

            _UPDATER_CLASS = VersionedRayWeightUpdater
    return _UPDATER_CLASS


def worker_collector_class():
    """:class:`WorkerCollector`'s class, defined on first use: its base is TorchRL's ``BaseCollector``."""
    return _worker_collector()


_WORKER_CLASS = None


def _worker_collector():
    global _WORKER_CLASS
    if _WORKER_CLASS is not None:
        return _WORKER_CLASS
    with warnings.catch_warnings():  # TorchRL's deprecated weight updaters announce themselves on import
        warnings.simplefilter("ignore", DeprecationWarning)
        from torchrl.collectors import BaseCollector

    class WorkerCollector(BaseCollector):
        """One Ray worker: rlplug's collector on this worker's envs, behind TorchRL's collector interface.

        Built by TorchRL's RayCollector inside the actor with the keywords it passes every collector
        (devices, exploration type and the like, which do not apply here) plus ``seed`` and ``threads`` from
        rlplug. With ``learner`` (gradient mode) it also holds a copy of the algorithm and computes gradients
        on its own rollouts (:mod:`rlplug.runners` ``GradientWorker``).
        """

        def __init__(self, create_env_fn, policy=None, *, frames_per_batch: int, seed: int = 0, threads: int = 1,
                     worker_idx: int | None = None, total_frames: int = -1, learner=None, **_torchrl_options):
            super().__init__()
            set_compute_threads(threads)
            torch.distributions.Distribution.set_default_validate_args(False)
            quiet_torchrl()
            import ray

            self.worker_idx = worker_idx
            self.pid = os.getpid()
            with warnings.catch_warnings():  # Ray's property reads a deprecated attribute of its own
                warnings.simplefilter("ignore")
                try:
                    reconstructed = ray.get_runtime_context().was_current_actor_reconstructed
                except AssertionError:  # not in an actor (built directly, as tests and benchmarks do)
                    reconstructed = False
            if reconstructed:
                # a restarted worker must not replay the episodes its first life already played
                seed = (seed * 1_000_003 + self.pid) % 2**31
            random.seed(seed)
            np.random.seed(seed % 2**32)
            torch.manual_seed(seed)
            make_env = create_env_fn[0] if isinstance(create_env_fn, (list, tuple)) else create_env_fn
            self.env = make_env() if callable(make_env) else make_env
            self.learner = learner.build(self.env) if learner is not None else None
            self.policy = self.learner.algorithm.policy if self.learner is not None else policy
            self.weights = TensorDict.from_module(self.policy).data
            self.inner = Collector(self.env, self.policy, frames_per_batch, seed)
            self.frames_per_batch = self.requested_frames_per_batch = frames_per_batch
            self.total_frames = total_frames
            self.version = 0
            self._iterator = None

        # -- what TorchRL's RayCollector calls ------------------------------------------------------------

        def iterator(self):
            while True:
                yield self.rollout()

        def next(self) -> TensorDictBase:
            # BaseCollector.next copies every batch whose device is not the string "cpu" (a torch.device never
            # is), which undoes the consolidation that makes Ray's transfer cheap: 4 ms more per rollout here
            return self.rollout()

        def update_policy_weights_(self, policy_or_weights=None, *, policy_weights=None, version: int | None = None,
                                   **_ignored) -> None:
            weights = policy_weights if policy_weights is not None else policy_or_weights
            if weights is not None:
                self.weights.update_(weights)
            if version is not None:
                self.version = version

        def set_seed(self, seed: int, static_seed: bool = False) -> int:
            self.restart(seed)
            return seed

        def state_dict(self):
            return {"version": self.version}

        def load_state_dict(self, state_dict) -> None:
            self.version = state_dict.get("version", self.version)

        def shutdown(self, timeout=None, close_env: bool = True, raise_on_error: bool = True) -> None:
            if close_env and not self.env.is_closed:
                self.env.close()

        # -- rlplug's own calls (through RayCollector.map_fn / cascade_execute) -----------------------------

        def fail_next_rollout(self) -> None:
            """Fault injection for tests: this worker's process dies in the middle of its next rollout."""
            self.failing = True

        def rollout(self) -> TensorDictBase:
            if getattr(self, "failing", False):
                os._exit(1)
            started = time.perf_counter()
            batch = self.inner.collect()
            self.stamp(batch, time.perf_counter() - started)
            # one buffer: Ray moves it in a third of the time a TensorDict of separate tensors takes
            return batch.consolidate()

        def stamp(self, batch: TensorDictBase, seconds: float) -> None:
            shape = batch.batch_size
            batch.set(WORKER_KEY, TensorDict({
                "version": torch.full(shape, self.version, dtype=torch.int64),
                "pid": torch.full(shape, self.pid, dtype=torch.int64),
                "worker": torch.full(shape, self.worker_idx or 0, dtype=torch.int64),
                "seconds": torch.full(shape, seconds, dtype=torch.float64),
            }, batch_size=shape))

        def restart(self, seed: int) -> None:
            self.inner.restart(seed)

        def statistics(self) -> dict:
            statistics = getattr(self.env, "statistics", None)
            return statistics() if callable(statistics) else {}

        def load_statistics(self, state: dict) -> None:
            if state:
                self.env.load_statistics(state)

        # -- gradient mode (GradientWorker does the work) -------------------------------------------------------

        def prepare(self, weights, version: int, progress: float) -> TensorDictBase:
            """Collect a rollout with ``weights`` and keep it, estimates made, for :meth:`gradients`; hand back
            what the driver tracks (rewards and dones)."""
            started = time.perf_counter()
            self.learner.algorithm.set_weights(weights)
            self.version = version
            batch = self.inner.collect()
            seconds = time.perf_counter() - started
            tracking = self.learner.prepare(batch, progress)
            self.stamp(tracking, seconds)
            return tracking.consolidate()

        def gradients(self, step: int, weights) -> TensorDictBase:
            self.learner.algorithm.set_weights(weights)
            return self.learner.step(step)

    _WORKER_CLASS = WorkerCollector
    return WorkerCollector


class RayCollection:
    """The ``ray`` runner's collector: TorchRL's RayCollector over :class:`WorkerCollector` actors.

    - Synchronous (on-policy algorithms): each ``collect()`` asks every worker for one rollout and stacks
      them. The recipe's envs are split between the workers where ``num_envs`` divides evenly (the learner
      sees exactly the batch a local run gives it); otherwise each worker runs the whole env and collects
      its share of ``frames_per_batch``. After every update ``sync_weights()`` pushes the new weights to all
      workers before their next rollout: the policy lag is zero, unless a worker restarted.
    - Asynchronous (``algorithm.asynchronous``, IMPALA): each worker runs the recipe's whole env and
      collects ``frames_per_batch`` at a time; ``collect()`` returns the first rollout ready, and that
      worker gets the newest weights before it starts its next one, while the others keep collecting with
      the weights they have. The learner corrects for the lag (V-trace); ``policy_lag`` says how large it is.

    Workers are started when this is built (so that a bad address, missing resources or an env that fails
    to build on a worker is an error before training), stopped by :meth:`shutdown`, and started again by a
    later :meth:`collect` (the Python API may train a run in several pieces).
    """

    def __init__(self, runner: RayRunner, env, policy, frames_per_batch: int, seed: int, *, recipe, algorithm=None):
        self.runner, self.policy, self.seed, self.recipe = runner, policy, seed, recipe
        self.algorithm = algorithm
        self.device = torch.device(recipe.run.device)
        self.asynchronous = bool(getattr(algorithm, "asynchronous", False))
        self.gradients = runner.mode == "gradients"
        if self.gradients:
            problem = gradient_mode_problem(algorithm)
            if problem:
                raise UserError(problem, path="runner.mode")
        workers = runner.workers
        self.recipe_envs = envs = max(1, env.batch_size.numel())
        splittable = "num_envs" in recipe.env.params and envs % workers == 0 and not self.asynchronous
        self.envs_per_worker = envs // workers if splittable else envs
        self.worker_frames = frames_per_batch if self.asynchronous else frames_per_batch // workers
        shares = 1 if self.asynchronous else workers
        if frames_per_batch % (shares * self.envs_per_worker):
            raise UserError(f"frames_per_batch ({frames_per_batch}) must split evenly over {shares} worker(s) of "
                            f"{self.envs_per_worker} envs each (a multiple of {shares * self.envs_per_worker})",
                            path="algorithm.frames_per_batch")
        self.tracker = EpisodeTracker(self.envs_per_worker * workers)
        self.steps = self.worker_frames // self.envs_per_worker
        self.version = 0
        self.restarts = 0
        self.failures = 0
        self.explained_variance = float("nan")
        self.pids: dict[int, int] = {}
        self.lags: list[float] = []
        self.sync_seconds = 0.0
        self.wait_seconds = 0.0
        self.worker_seconds = 0.0
        self.collections = 0
        self.started_ray = False
        self.ray_collector = None
        self.iterator = None
        self.statistics_state: dict | None = None
        self.env_has_statistics = False
        self.start()

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        ray = ray_module()
        self.started_ray = connect_ray(self.runner) or self.started_ray
        try:
            check_resources(self.runner)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                from torchrl.collectors.distributed import RayCollector

            runner, workers = self.runner, self.runner.workers
            shadow = standalone_copy(self.policy)
            source = TensorDict.from_module(self.policy).data
            learner = GradientWorkerSpec(self.recipe, self.runner.workers) if self.gradients else None
            kwargs = [{"seed": self.worker_seed(i, self.seed), "threads": 1, "learner": learner}
                      for i in range(workers)]
            split = self.envs_per_worker if self.envs_per_worker != self.recipe_envs else None
            makers = [EnvMaker(self.recipe.env, "cpu", split) for _ in range(workers)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # TorchRL's notes on deprecated updaters and remote devices
                self.ray_collector = RayCollector(
                    makers, shadow, collector_class=worker_collector_class(), collector_kwargs=kwargs,
                    frames_per_batch=self.worker_frames * (1 if self.asynchronous else workers),
                    total_frames=sys.maxsize, sync=not self.asynchronous, remote_configs=runner.remote_options(),
                    update_after_each_batch=self.asynchronous, weight_updater=self.make_updater(source),
                )
            self.updater.version = self.version
            # every worker answers once before training starts: an env that cannot be built there fails now
            try:
                actors = self.ray_collector.remote_collectors
                answers = ray.get([actor.cascade_execute.remote("statistics") for actor in actors])
            except ray.exceptions.RayActorError as error:
                raise RuntimeError(f"a Ray worker could not start: {last_line_of(error)}") from None
            self.env_has_statistics = bool(answers[0])
            if self.statistics_state:
                self.load_statistics(self.statistics_state)
        except BaseException:
            self.shutdown()
            raise

    def make_updater(self, source: TensorDictBase):
        self.updater = weights_updater_class()(source)
        return self.updater

    def worker_seed(self, index: int, seed: int) -> int:
        """Worker ``index``'s env seed: its envs continue the numbering of the envs before it."""
        return seed + index * self.envs_per_worker

    def shutdown(self) -> None:
        """Stop the workers (and the Ray instance, where this run started it); a later collect() restarts them."""
        collector, self.ray_collector, self.iterator = self.ray_collector, None, None
        if collector is not None:
            try:
                if self.env_has_statistics:
                    self.statistics_state = self._statistics(collector)
            except Exception:
                pass
            try:
                collector.shutdown(timeout=5.0)
            except Exception:
                pass
        if self.started_ray:
            import ray

            ray.shutdown()
            self.started_ray = False

    # -- collection -----------------------------------------------------------------------------------------

    def collect(self) -> TensorDictBase:
        if self.ray_collector is None:
            self.start()
        if self.gradients:
            return self._collect_for_gradients()
        if self.iterator is None:
            self.iterator = self.ray_collector.iterator()
        started = time.perf_counter()
        recollected = 0
        while True:
            try:
                batch = next(self.iterator)
            except ray_module().exceptions.RayActorError as error:
                self.worker_died(error)
                continue
            if not self.asynchronous:
                batch = batch.reshape(-1, self.steps)  # [workers, envs, time] -> [workers * envs, time]
            info = batch.pop(WORKER_KEY)
            self.note_workers(info)
            if self.asynchronous or bool((info.get("version") == self.version).all()) or recollected == 2:
                break
            recollected += 1
            # A restarted worker collected with the weights it was first built with (or missed the last push
            # while it restarted): on-policy learners get the batch again, every worker with the current weights.
            self.ray_collector.update_policy_weights_()
        self.wait_seconds += time.perf_counter() - started
        return self.received(batch, info)

    def worker_died(self, error: Exception) -> None:
        """A worker died during its rollout: Ray restarts it (up to ``max_restarts`` times) and collection
        starts over once every worker answers; TorchRL's iterator ends with the error, so a new one takes its
        place."""
        self.failures += 1
        self.wait_for_workers(error)
        if self.iterator is not None:
            self.iterator = self.ray_collector.iterator()

    def wait_for_workers(self, cause: Exception, timeout: float = 300.0) -> None:
        """Until every worker answers; a worker Ray will not restart again (``max_restarts`` used up) or that
        does not come back within ``timeout`` seconds ends the run with the error that killed it."""
        ray = ray_module()
        deadline = time.monotonic() + timeout
        for index, actor in enumerate(self.ray_collector.remote_collectors):
            while True:
                try:
                    ray.get(actor.__ray_ready__.remote(), timeout=max(1.0, deadline - time.monotonic()))
                    break
                except ray.exceptions.ActorUnavailableError:  # restarting
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"Ray worker {index} did not come back within {timeout:g} s of dying "
                                           f"({one_line_of(cause)})") from cause
                    time.sleep(0.2)
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as error:
                    raise RuntimeError(f"Ray worker {index} died and was not restarted (runner.max_restarts = "
                                       f"{self.runner.max_restarts}): {one_line_of(cause)}") from error

    def note_workers(self, info: TensorDictBase) -> bool:
        """Count the workers whose process changed since their last rollout (restarted); True if any did."""
        first = (slice(None), 0)
        restarted = False
        for worker, pid in zip(info.get("worker")[first].tolist(), info.get("pid")[first].tolist()):
            if self.pids.get(worker, pid) != pid:
                self.restarts += 1
                restarted = True
                rows = slice(worker * self.envs_per_worker, (worker + 1) * self.envs_per_worker)
                self.tracker.running[rows] = 0.0  # its episodes were cut short: not counted
            self.pids[worker] = pid
        return restarted

    def received(self, batch: TensorDictBase, info: TensorDictBase) -> TensorDictBase:
        """Bookkeeping of a batch from the workers (lag, episode returns); the batch as the learner wants it."""
        first = (slice(None), 0)
        workers = info.get("worker")[first].numpy()
        self.lags.append(float((self.version - info.get("version")[first]).double().mean()))
        self.worker_seconds += float(info.get("seconds")[first].max())
        self.collections += 1
        # tracker rows: worker w's envs are rows w * envs_per_worker onwards (a synchronous batch is all of them)
        rows = workers * self.envs_per_worker + np.arange(len(workers)) % self.envs_per_worker
        rewards = batch.get(("next", "reward")).reshape(len(rows), -1).cpu().numpy()
        dones = batch.get(("next", "done")).reshape(len(rows), -1).cpu().numpy()
        track(self.tracker, rewards, dones, rows)
        return batch if self.device.type == "cpu" else batch.to(self.device)

    def restart(self, seed: int) -> None:
        """Every env starts a new episode from ``seed`` at its next rollout (each worker's envs numbered on)."""
        self.tracker.running[:] = 0.0
        if self.ray_collector is None:
            self.seed = seed
            return
        try:
            self.ray_collector.map_fn("restart", [(self.worker_seed(i, seed),) for i in range(self.runner.workers)])
        except ray_module().exceptions.RayActorError as error:  # a restarted worker starts new episodes anyway
            self.worker_died(error)

    def sync_weights(self) -> None:
        """After an update: the learner's weights become the next version, pushed to every worker before its
        next rollout (an asynchronous worker gets them when it hands in its current one)."""
        self.version += 1
        if self.ray_collector is None:
            return
        started = time.perf_counter()
        self.updater.version = self.version
        if self.gradients:  # weights travel with every call to the workers
            return
        if not self.asynchronous or self.iterator is None:
            self.ray_collector.update_policy_weights_()
        self.sync_seconds += time.perf_counter() - started

    def metrics(self) -> dict[str, float]:
        """Since the last call: mean policy lag (learner updates between the weights a rollout was collected
        with and the learner's), time spent publishing weights and waiting for rollouts, restarts so far."""
        result = {"worker_restarts": float(self.restarts)}
        if self.collections:
            result.update(policy_lag=float(np.mean(self.lags)), weight_sync_ms=1000 * self.sync_seconds /
                          self.collections, wait_ms=1000 * self.wait_seconds / self.collections,
                          worker_collect_ms=1000 * self.worker_seconds / self.collections)
        self.lags, self.sync_seconds, self.wait_seconds, self.worker_seconds, self.collections = [], 0.0, 0.0, 0.0, 0
        return result

    # -- env statistics (running normalisation) --------------------------------------------------------------

    def statistics(self) -> dict:
        """The first worker's env statistics (each worker keeps its own), for evaluation and checkpoints."""
        if self.ray_collector is None:
            return self.statistics_state or {}
        if not self.env_has_statistics:
            return {}
        return self._statistics(self.ray_collector)

    def _statistics(self, collector) -> dict:
        import ray

        return ray.get(collector.remote_collectors[0].cascade_execute.remote("statistics"))

    def load_statistics(self, state: dict) -> None:
        self.statistics_state = state or None
        if self.ray_collector is not None and state:
            self.ray_collector.map_fn("load_statistics", [(state,)] * self.runner.workers)

    # -- gradient mode --------------------------------------------------------------------------------------

    def _collect_for_gradients(self) -> TensorDictBase:
        """Every worker collects a rollout with the current weights and keeps it; the batch returned holds only
        what the loop counts and tracks (rewards and dones), ``[envs, time]`` like any batch."""
        algorithm = self.algorithm
        progress = (algorithm.frames + self.worker_frames * self.runner.workers) / algorithm.total_frames
        started = time.perf_counter()
        weights = ray_module().put(algorithm.get_weights())
        try:
            parts = self.ray_collector.map_fn("prepare", [(weights, self.version, progress)] * self.runner.workers)
        except ray_module().exceptions.RayActorError as error:
            self.worker_died(error)
            return self._collect_for_gradients()
        self.wait_seconds += time.perf_counter() - started
        batch = torch.cat(parts, 0)
        info = batch.pop(WORKER_KEY)
        self.note_workers(info)
        self.explained_variance = float(batch.pop("explained_variance")[:, 0].double().mean())
        return self.received(batch, info)

    def update(self, algorithm, batch: TensorDictBase) -> dict[str, float]:
        """The algorithm's own update, or in gradient mode its data-parallel form: for each of the update's
        minibatch steps every worker computes the gradient on its share with the current weights, and the
        learner averages them and takes the optimiser step."""
        if not self.gradients:
            return algorithm.update(batch)
        from rlplug.training import MetricMean, NonFiniteError

        config, ray = algorithm.config, ray_module()
        lr = algorithm.start_update(batch.numel())
        steps = math.ceil(self.worker_frames / worker_minibatch(algorithm, self.runner.workers))
        metrics = MetricMean()
        for step in range(config.epochs * steps):
            weights = ray.put(algorithm.get_weights())
            try:
                results = self.ray_collector.map_fn("gradients", [(step, weights)] * self.runner.workers)
            except ray.exceptions.RayActorError as error:  # its rollout is gone: the update ends here
                self.worker_died(error)
                break
            losses = {key: float(np.mean([r.get(("losses", key)).item() for r in results]))
                      for key in results[0].get("losses").keys()}
            if not math.isfinite(losses["loss"]):
                raise NonFiniteError("the loss")
            grads = [torch.stack([r.get(("grads", str(i))) for r in results]).mean(0)
                     for i in range(len(algorithm.parameters))]
            norm = algorithm.apply_gradients(grads)
            del losses["loss"]
            if "loss_policy" in losses:
                metrics.add(grad_norm=norm, **{k: torch.tensor(v) for k, v in losses.items()})
        result = {**metrics.means(), "lr": lr, **algorithm.extra_metrics()}
        if algorithm.critic is not None:
            result["explained_variance"] = self.explained_variance
        return result



def standalone_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A CPU copy of ``module`` whose tensors own their memory, to ship to workers: the learner's parameters
    are views of one flat tensor (:class:`rlplug.training.FlatParameters`), and a view pickles its whole
    storage, once per parameter."""
    copied = copy.deepcopy(module).to("cpu")
    for tensor in (*copied.parameters(), *copied.buffers()):
        tensor.data = tensor.data.clone()
    return copied


def last_line_of(error: BaseException) -> str:
    """The last line of a remote traceback: the exception the worker raised."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(error).__name__


def one_line_of(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0][:300] if text else type(error).__name__)


def track(tracker: EpisodeTracker, rewards: np.ndarray, dones: np.ndarray, rows: np.ndarray) -> None:
    """:meth:`EpisodeTracker.add` for the tracker rows ``rows`` (one worker's envs among all workers')."""
    for t in range(rewards.shape[1]):
        tracker.running[rows] += rewards[:, t]
        for index in np.flatnonzero(dones[:, t]):
            row = rows[index]
            tracker.recent.append(float(tracker.running[row]))
            tracker.running[row] = 0.0
            tracker.episodes += 1


# -- gradient workers ---------------------------------------------------------------------------------------


def gradient_mode_problem(algorithm) -> str | None:
    """Why ``algorithm`` cannot train with gradient workers, or None."""
    from rlplug.algorithms.onpolicy import OnPolicy

    name = type(algorithm).__name__
    if getattr(algorithm, "asynchronous", False):
        return (f"mode = 'gradients' is synchronous data-parallel training, and {name} learns from asynchronous "
                f"experience; use mode = 'experience'")
    if not isinstance(algorithm, OnPolicy):
        return f"mode = 'gradients' trains the on-policy algorithms (ppo, a2c, vpg, surrogate), not {name}"
    if type(algorithm).after_minibatch is not OnPolicy.after_minibatch:
        return (f"{name} adapts its loss after every minibatch from that minibatch alone (ppo-kl's beta), which "
                f"workers computing gradients apart cannot agree on; use mode = 'experience'")
    return None


def worker_minibatch(algorithm, workers: int) -> int:
    """Each worker's share of the update's minibatch: together they make the learner's minibatch."""
    return math.ceil(algorithm.minibatch_size / workers)


@dataclass(frozen=True)
class GradientWorkerSpec:
    """What a gradient worker builds its algorithm copy from (pickled into the Ray actor)."""

    recipe: Any
    workers: int

    def build(self, env) -> "GradientWorker":
        run = self.recipe.run
        algorithm = self.recipe.algorithm.build(observation_spec=env.observation_spec, action_spec=env.action_spec,
                                                device="cpu", seed=run.seed, total_frames=run.total_frames)
        return GradientWorker(algorithm, self.workers)


class GradientWorker:
    """A worker's side of gradient mode: its rollout prepared as the on-policy update prepares a batch
    (estimates, advantages), then one minibatch gradient per :meth:`step`, in the update's order (a new
    shuffle each epoch)."""

    def __init__(self, algorithm, workers: int):
        self.algorithm, self.workers = algorithm, workers
        self.data: dict[str, torch.Tensor] = {}
        self.order: list[torch.Tensor | None] = []

    def prepare(self, batch: TensorDictBase, progress: float) -> TensorDictBase:
        """Estimates for ``batch`` with the current weights; what the driver needs to track it (rewards, dones,
        this worker's explained variance) is returned."""
        from rlplug.algorithms.onpolicy import explained_variance, normalized

        algorithm, config = self.algorithm, self.algorithm.config
        algorithm.before_update(progress)
        # what OnPolicy.update does before its epochs (rlplug/algorithms/onpolicy.py), on this worker's share
        data = algorithm.training_data(batch)
        length = len(data["advantage"])
        self.minibatch = worker_minibatch(algorithm, self.workers)
        self.normalize_each = config.normalize_advantages and self.minibatch < length
        if config.normalize_advantages and not self.normalize_each:
            data["advantage"] = normalized(data["advantage"])
        self.data, self.length = data, length
        self.steps = math.ceil(self.length / self.minibatch)
        variance = explained_variance(data["old_value"], data["value_target"]) if algorithm.critic else float("nan")
        return TensorDict({"next": {"reward": batch.get(("next", "reward")), "done": batch.get(("next", "done"))},
                           "explained_variance": torch.full(batch.batch_size, variance, dtype=torch.float64)},
                          batch_size=batch.batch_size)

    def step(self, step: int) -> TensorDictBase:
        """The gradient of minibatch ``step`` (counting over all epochs) with the current weights."""
        epoch, index = divmod(step, self.steps)
        if index == 0:
            self.order = list(torch.randperm(self.length).split(self.minibatch)) if self.minibatch < self.length \
                else [None]
        indices = self.order[index]
        minibatch = self.data if indices is None else {k: v[indices] for k, v in self.data.items()}
        grads, losses = self.algorithm.compute_gradients(minibatch, self.normalize_each,
                                                         diagnostics=epoch == self.algorithm.config.epochs - 1)
        return TensorDict({"grads": {str(i): g for i, g in enumerate(grads)},
                           "losses": {k: v.reshape(()).double() for k, v in losses.items()}}, []).consolidate()
