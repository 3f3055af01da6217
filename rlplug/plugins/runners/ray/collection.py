"""The learner's side of the ``ray`` runner: batches from the workers, weights to them, restarts, statistics."""

from __future__ import annotations

import signal
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlplug.core.episodes import EpisodeTracker
from rlplug.core.recurrent import is_recurrent
from rlplug.core.transformed import env_rewards
from rlplug.errors import RlplugWarning, UserError, WorkersLost
from rlplug.plugins.runners.ray.cluster import (
    check_resources,
    connect_ray,
    last_line_of,
    lost_errors,
    one_line_of,
    ray_module,
)
from rlplug.plugins.runners.ray.gradients import GradientWorkerSpec, gradient_mode_problem, gradient_update
from rlplug.plugins.runners.ray.learners import LearnerGroup, learners_problem
from rlplug.plugins.runners.ray.storages import ShardedReplay, sharded_replay, start_storages, storages_problem, writers
from rlplug.plugins.runners.ray.worker import (
    WORKER_KEY,
    EnvMaker,
    standalone_copy,
    weights_updater_class,
    worker_collector_class,
)
from rlplug.registry import protocols
from rlplug.registry.protocols import capability

if TYPE_CHECKING:
    from torchrl.collectors.distributed import RayCollector

#: How long a lost worker has to come back (Ray restarting it wherever there is room) before the run stops.
RESTART_TIMEOUT = 300.0
#: How long the learner waits for the workers' env statistics (a checkpoint, the end of training).
STATISTICS_TIMEOUT = 30.0


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

    def __init__(self, runner, env, policy, frames_per_batch: int, seed: int, *, recipe, algorithm=None):
        if is_recurrent(policy):
            raise UserError("recurrent networks (lstm, gru) carry each env's hidden state from batch to batch, which "
                            "the ray runner's workers do not keep; use the local runner", path="runner.use")
        self.runner, self.policy, self.seed, self.recipe = runner, policy, seed, recipe
        self.algorithm = algorithm
        self.device = torch.device(recipe.run.device)
        self.asynchronous = bool(capability(algorithm, protocols.Algorithm.asynchronous))
        self.gradients = runner.mode == "gradients"
        if self.gradients:
            problem = gradient_mode_problem(algorithm)
            if problem:
                raise UserError(problem, path="runner.mode")
        #: in gradient mode, the algorithm's update over the workers (Algorithm.data_parallel)
        self.parallel = algorithm.data_parallel(runner.workers) if self.gradients else None
        #: the replay storages (``runner.storages``), installed as the algorithm's replay
        self.replay: ShardedReplay | None = None
        if runner.storages:
            problem = storages_problem(algorithm)
            if problem:
                raise UserError(problem, path="runner.storages")
            self.replay = sharded_replay(algorithm, runner.storages, seed=seed, device=self.device,
                                         total_frames=recipe.run.total_frames, max_restarts=runner.max_restarts)
            algorithm.replay_storage().install(self.replay)
            #: what each storage's buffer is built with
            self.storage_context = {"total_frames": recipe.run.total_frames,
                                    "observation_spec": env.observation_spec, "action_spec": env.action_spec}
        workers = runner.workers
        self.recipe_envs = envs = max(1, env.batch_size.numel())
        splittable = "num_envs" in recipe.env.params and envs % workers == 0 and not self.asynchronous
        self.envs_per_worker = envs // workers if splittable else envs
        shares = 1 if self.asynchronous else workers
        #: the unit the update's frames were rounded to (``Algorithm.rounded_cadence``), or None
        self.cadence_unit: int | None = None
        if frames_per_batch % (shares * self.envs_per_worker):
            frames_per_batch = self.rounded_cadence(algorithm, frames_per_batch, shares * self.envs_per_worker)
        self.worker_frames = frames_per_batch if self.asynchronous else frames_per_batch // workers
        if frames_per_batch % (shares * self.envs_per_worker):
            raise UserError(f"the {frames_per_batch} frames of an update must split evenly over {shares} worker(s) "
                            f"of {self.envs_per_worker} envs each (a multiple of {shares * self.envs_per_worker})",
                            path=batch_key(algorithm))
        self.tracker = EpisodeTracker(self.envs_per_worker * workers)
        self.steps = self.worker_frames // self.envs_per_worker
        self.learner_group: LearnerGroup | None = None
        if runner.learners > 1:
            rows = self.envs_per_worker * workers
            problem = learners_problem(algorithm, runner.learners, rows)
            if problem:
                raise UserError(problem, path="runner.learners")
            self.learner_group = LearnerGroup(runner, recipe, env, algorithm, replay=self.replay,
                                              cadence_unit=self.cadence_unit)
        self.version = 0
        self.restarts = 0
        self.failures = 0
        #: in gradient mode, what each worker's copy said of the rollout it took (DataParallel.take), by key
        self.taken: dict[str, list[float]] = {}
        self.pids: dict[int, int] = {}
        self.nodes: dict[int, int] = {}
        self.lags: list[float] = []
        self.sync_seconds = 0.0
        self.wait_seconds = 0.0
        self.worker_seconds = 0.0
        self.collections = 0
        self.started_ray = False
        self.ray_collector: RayCollector | None = None
        self.iterator: Iterator[TensorDictBase] | None = None
        self.statistics_state: dict | None = None
        self.env_has_statistics = False
        if not splittable and not self.asynchronous and workers > 1:  # said once the checks above passed
            warnings.warn(RlplugWarning(
                f"runner.workers = {workers}: the recipe's {envs} env(s) do not divide among {workers} workers, so "
                f"each worker steps all {envs}: every update learns from {envs * workers} envs, each stepping "
                f"1/{workers} of the steps a local run's would (other episodes, another spread of exploration, "
                f"which an algorithm may learn differently from); give env.num_envs a multiple of {workers} to "
                f"keep the recipe's layout"), stacklevel=2)
        self.start()

    def rounded_cadence(self, algorithm, frames_per_batch: int, unit: int) -> int:
        """An update's frames that do not split over the workers (pendulum-sac's one env step on 2 workers):
        rounded up to every worker's envs stepping alike where the algorithm allows it
        (``Algorithm.rounded_cadence``: the off-policy family, its gradient steps per frame kept), the user told
        in one line; the frames it takes (unchanged where it does not allow it)."""
        rounded = capability(algorithm, protocols.Algorithm.rounded_cadence)
        change = rounded(unit) if rounded is not None else None
        if change is None:
            return frames_per_batch
        self.cadence_unit = unit
        workers = self.runner.workers
        warnings.warn(RlplugWarning(f"runner.workers = {workers}: the {frames_per_batch} frame(s) of an update do not "
                                    f"split over {workers} workers, so {change}"), stacklevel=2)
        return algorithm.frames_per_batch

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        ray = ray_module()
        with group_signals_spared():
            self.started_ray = connect_ray(self.runner) or self.started_ray
        try:
            check_resources(self.runner)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                from torchrl.collectors.distributed import RayCollector

            runner, workers = self.runner, self.runner.workers
            self.pids.clear()  # new workers: their processes are not restarts
            self.nodes.clear()
            shadow = standalone_copy(self.policy)
            source = TensorDict.from_module(self.policy).data
            learner = GradientWorkerSpec(self.recipe, self.runner.workers) if self.gradients else None
            storages: list = [None] * workers
            if self.replay is not None:
                self.replay.attach(start_storages(self.algorithm, self.replay, runner.storages, seed=self.seed,
                                                  options=runner.storage_options(), context=self.storage_context))
                storages = writers(self.replay, self.algorithm, workers)
            kwargs = [{"seed": self.worker_seed(i, self.seed), "threads": 1, "learner": learner,
                       "storage": storages[i]} for i in range(workers)]
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
                answers = ray.get([actor.cascade_execute.remote("statistics") for actor in actors],
                                  timeout=RESTART_TIMEOUT)
            except ray.exceptions.RayActorError as error:
                raise UserError(f"a Ray worker could not start: {last_line_of(error)}; every node of the cluster "
                                f"must be able to build the recipe's env and plugins (installed there, in the "
                                f"same versions)", path="runner.workers") from None
            except ray.exceptions.GetTimeoutError:
                raise UserError(f"the Ray workers did not start within {RESTART_TIMEOUT:g} s: no node of the "
                                f"cluster has room for a worker's resources "
                                f"({dict(runner.resources_per_worker)}) beside the others; use fewer workers or "
                                f"smaller resources_per_worker", path="runner.workers") from None
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
        if self.learner_group is not None:
            self.learner_group.stop(self.algorithm)  # the algorithm here takes their state: they start from it again
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
        if self.replay is not None and self.replay.shards and self.replay.kept is None:
            self.replay.detach()  # their contents kept for the checkpoint and the storages started next
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
            self.iterator = self.started_collector().iterator()
        started = time.perf_counter()
        recollected = 0
        while True:
            try:
                batch = next(self.iterator)
            except lost_errors() as error:
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
            self.started_collector().update_policy_weights_()
        self.wait_seconds += time.perf_counter() - started
        return self.received(batch, info)

    def started_collector(self) -> RayCollector:
        """TorchRL's collector over the workers, which exists from :meth:`start` to :meth:`shutdown`."""
        if self.ray_collector is None:
            raise RuntimeError("the Ray workers are not running: the collection was shut down or never started")
        return self.ray_collector

    def worker_died(self, error: Exception) -> None:
        """A worker died during its rollout (its process or its whole node): Ray restarts it (up to
        ``max_restarts`` times, on any node with room) and collection starts over once every worker answers;
        TorchRL's iterator ends with the error, so a new one takes its place."""
        self.failures += 1
        self.wait_for_workers(error)
        if self.iterator is not None:
            self.iterator = self.started_collector().iterator()

    def wait_for_workers(self, cause: Exception, timeout: float = RESTART_TIMEOUT) -> None:
        """Until every worker answers. A worker Ray will not restart again (``max_restarts`` used up) or that
        does not come back within ``timeout`` seconds (no node has room for it) stops the collection:
        :class:`WorkersLost`, once the surviving workers' env statistics are kept for the checkpoint."""
        ray = ray_module()
        deadline = time.monotonic() + timeout
        for index, actor in enumerate(self.started_collector().remote_collectors):
            while True:
                try:
                    ray.get(actor.__ray_ready__.remote(), timeout=max(1.0, deadline - time.monotonic()))
                    break
                except ray.exceptions.ActorUnavailableError:  # restarting: asked again until the deadline
                    if time.monotonic() < deadline:
                        time.sleep(0.2)
                        continue
                except ray.exceptions.GetTimeoutError:
                    pass
                except ray.exceptions.RayActorError as error:
                    self.lost(f"Ray worker {index} died and was not restarted ({self.runner.max_restarts} "
                              f"restarts allowed): {one_line_of(error)}", "runner.max_restarts", error)
                self.lost(f"Ray worker {index} did not come back within {timeout:g} s of dying (no node with room "
                          f"for it?): {one_line_of(cause)}", "runner.workers", cause)

    def lost(self, message: str, path: str, cause: Exception):
        """Collection cannot go on: the workers are stopped (the survivors' statistics kept) and the run is told."""
        self.shutdown()
        raise WorkersLost(message, path=path) from cause

    def note_workers(self, info: TensorDictBase) -> bool:
        """Count the workers whose process changed since their last rollout (restarted); True if any did."""
        first = (slice(None), 0)
        restarted = False
        for worker, pid, node in zip(info.get("worker")[first].tolist(), info.get("pid")[first].tolist(),
                                     info.get("node")[first].tolist()):
            self.nodes[worker] = node
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
        rewards = env_rewards(batch).reshape(len(rows), -1).cpu().numpy()
        dones = batch.get(("next", "done")).reshape(len(rows), -1).cpu().numpy()
        self.tracker.add(rewards, dones, rows)
        return batch if self.device.type == "cpu" else batch.to(self.device)

    def restart(self, seed: int) -> None:
        """Every env starts a new episode from ``seed`` at its next rollout (each worker's envs numbered on)."""
        self.tracker.running[:] = 0.0
        if self.ray_collector is None:
            self.seed = seed
            return
        try:
            self.ray_collector.map_fn("restart", [(self.worker_seed(i, seed),) for i in range(self.runner.workers)])
        except lost_errors() as error:  # a restarted worker starts new episodes anyway
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
        with and the learner's), time spent publishing weights and waiting for rollouts; restarts so far, and
        the number of Ray nodes the workers ran on in their latest rollouts."""
        result = {"worker_restarts": float(self.restarts)}
        if self.replay is not None:
            if self.learner_group is not None:
                len(self.replay)  # the learners sample it, not this process: its sizes asked for afresh
            result.update(self.replay.metrics())
        if self.nodes:
            result["worker_nodes"] = float(len(set(self.nodes.values())))
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
        """The first worker's statistics that answers (a worker may be lost with its node), kept for the
        workers started next; the last ones known where none answers in time."""
        ray = ray_module()
        deadline = time.monotonic() + STATISTICS_TIMEOUT
        for actor in collector.remote_collectors:
            try:
                self.statistics_state = ray.get(actor.cascade_execute.remote("statistics"),
                                                timeout=max(1.0, deadline - time.monotonic()))
                return self.statistics_state
            except (*lost_errors(), ray.exceptions.GetTimeoutError):
                continue
        return self.statistics_state or {}

    def load_statistics(self, state: dict) -> None:
        self.statistics_state = state or None
        if self.ray_collector is not None and state:
            self.ray_collector.map_fn("load_statistics", [(state,)] * self.runner.workers)

    # -- gradient mode --------------------------------------------------------------------------------------

    def _collect_for_gradients(self) -> TensorDictBase:
        """Every worker collects a rollout with the current weights and keeps it; the batch returned holds only
        what the loop counts and tracks (rewards and dones), ``[envs, time]`` like any batch."""
        algorithm = self.algorithm
        frames = algorithm.frames + self.worker_frames * self.runner.workers  # collected in all once these are
        started = time.perf_counter()
        weights = ray_module().put(algorithm.get_weights())
        try:
            parts = self.started_collector().map_fn("prepare",
                                                    [(weights, self.version, frames)] * self.runner.workers)
        except lost_errors() as error:
            self.worker_died(error)
            return self._collect_for_gradients()
        self.wait_seconds += time.perf_counter() - started
        batch: TensorDictBase = torch.cat(parts, 0)  # dispatched to TensorDict's cat
        info = batch.pop(WORKER_KEY)
        self.note_workers(info)
        # what each worker's copy said of its rollout, on every one of its rows
        said = [key for key in batch.keys() if key not in ("next", WORKER_KEY)]
        self.taken = {key: [float(part.get(key).reshape(-1)[0]) for part in parts] for key in said}
        for key in said:
            batch.pop(key)
        return self.received(batch, info)

    def update(self, algorithm, batch: TensorDictBase) -> dict[str, float]:
        """The algorithm's own update, or in gradient mode its data-parallel form (:func:`gradient_update`), or on
        several learners (:class:`LearnerGroup`)."""
        if self.learner_group is not None:
            return self.learner_group.update(algorithm, batch)
        return gradient_update(self, algorithm, batch) if self.gradients else algorithm.update(batch)

    def before_checkpoint(self, algorithm) -> None:
        """Several learners: the algorithm here takes learner 0's whole state, which the checkpoint holds."""
        if self.learner_group is not None:
            self.learner_group.fetch_state(algorithm)


@contextmanager
def group_signals_spared() -> Iterator[None]:
    """SIGTERM blocked while a local Ray instance starts, so that its processes (GCS, raylet, and the workers,
    storages and learners the raylet starts) inherit it blocked. They share this process's group, and a SIGTERM
    to the whole group (``timeout``, a batch scheduler, a terminal's job control) killed them with the run: the
    learners' state was gone before this process, which stops on SIGTERM with a checkpoint, could fetch it.
    Ray blocks SIGINT in them itself. What it costs: ``ray.shutdown`` waits its second per process for a
    SIGTERM before it kills them."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def batch_key(algorithm) -> str:
    """The recipe key that sets how many frames an update collects: off-policy algorithms' steps_per_update."""
    config = getattr(algorithm, "config", None)
    return "algorithm.steps_per_update" if hasattr(config, "steps_per_update") else "algorithm.frames_per_batch"
