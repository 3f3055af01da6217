"""What runs inside each Ray actor: rlplug's collector behind TorchRL's collector interface, and the weight
updater that feeds it. TorchRL's base classes are subclassed on first use (the updater's base is deprecated and
warns when subclassed; neither is needed to list or validate recipes)."""

from __future__ import annotations

import copy
import os
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlplug.core.collect import Collector
from rlplug.core.env_members import env_statistics
from rlplug.core.envs import build_env
from rlplug.core.process import prepare_process, seed_everything
from rlplug.plugins.runners.ray.cluster import node_number

if TYPE_CHECKING:
    from rlplug.plugins.runners.ray.gradients import GradientWorker

#: The key under which a worker's rollout carries its bookkeeping (popped before the learner sees the batch).
WORKER_KEY = "rlplug_worker"


@dataclass(frozen=True)
class EnvMaker:
    """Builds the recipe's env in a worker's process: the env component (a frozen dataclass holding its
    factory, which pickles) with ``num_envs`` changed where the env has that key."""

    component: Any
    device: str = "cpu"
    num_envs: int | None = None

    def __call__(self):
        component = self.component
        if self.num_envs is not None:
            component = component.with_copies(self.num_envs)
        return build_env(component, device=self.device)


def standalone_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A CPU copy of ``module`` whose tensors own their memory, to ship to workers: the learner's parameters
    are views of one flat tensor (:class:`rlplug.core.training.FlatParameters`), and a view pickles its whole
    storage, once per parameter."""
    copied = copy.deepcopy(module).to("cpu")
    for tensor in (*copied.parameters(), *copied.buffers()):
        tensor.data = tensor.data.clone()
    return copied


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
        on its own rollouts (:mod:`rlplug.plugins.runners.ray.gradients`); with ``storage`` (replay storages)
        it writes its rollouts' transitions there and hands back only their tracking.
        """

        def __init__(self, create_env_fn, policy=None, *, frames_per_batch: int, seed: int = 0, threads: int = 1,
                     worker_idx: int | None = None, total_frames: int = -1, learner=None, storage=None,
                     **_torchrl_options):
            super().__init__()
            prepare_process(threads)
            import ray

            self.worker_idx = worker_idx
            self.pid = os.getpid()
            self.node = node_number(ray)
            with warnings.catch_warnings():  # Ray's property reads a deprecated attribute of its own
                warnings.simplefilter("ignore")
                try:
                    reconstructed = ray.get_runtime_context().was_current_actor_reconstructed
                except AssertionError:  # not in an actor (built directly, as tests and benchmarks do)
                    reconstructed = False
            if reconstructed:
                # a restarted worker must not replay the episodes its first life already played
                seed = (seed * 1_000_003 + self.pid) % 2**31
            seed_everything(seed)
            make_env = create_env_fn[0] if isinstance(create_env_fn, (list, tuple)) else create_env_fn
            self.env = make_env() if callable(make_env) else make_env
            self.learner: GradientWorker | None = (
                learner.build(self.env, seed) if learner is not None else None)
            self.policy = self.learner.algorithm.policy if self.learner is not None else policy
            self.weights = TensorDict.from_module(self.policy).data
            self.inner = Collector(self.env, self.policy, frames_per_batch, seed)
            self.frames_per_batch = self.requested_frames_per_batch = frames_per_batch
            self.total_frames = total_frames
            self.version = 0
            self._iterator = None
            #: with replay storages (runner.storages): where this worker's rollouts go (a StorageWriter)
            self.storage = storage

        def __bool__(self) -> bool:
            # Ray tests an actor's truth when it reports a failed call, constructor included; without this, that
            # reaches TorchRL's __len__, which a collector of no total frames refuses, and the cause is lost
            return True

        # -- what TorchRL's RayCollector calls ------------------------------------------------------------

        def iterator(self):
            while True:
                yield self.rollout()

        def next(self) -> TensorDictBase:
            # BaseCollector.next copies every batch whose device is not the string "cpu" (a torch.device never
            # is), which undoes the consolidation that makes Ray's transfer cheap
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

        def rollout(self) -> TensorDictBase:
            started = time.perf_counter()
            batch = self.inner.collect()
            if self.storage is not None:  # the transitions go to the storage, the driver gets what it tracks
                from rlplug.plugins.runners.ray.gradients import tracking

                self.storage.write(batch)
                batch = tracking(batch)
            self.stamp(batch, time.perf_counter() - started)
            # one buffer: Ray moves it in a third of the time a TensorDict of separate tensors takes
            return batch.consolidate()

        def stamp(self, batch: TensorDictBase, seconds: float) -> None:
            shape = batch.batch_size
            batch.set(WORKER_KEY, TensorDict({
                "version": torch.full(shape, self.version, dtype=torch.int64),
                "pid": torch.full(shape, self.pid, dtype=torch.int64),
                "worker": torch.full(shape, self.worker_idx or 0, dtype=torch.int64),
                "node": torch.full(shape, self.node, dtype=torch.int64),
                "seconds": torch.full(shape, seconds, dtype=torch.float64),
            }, batch_size=shape))

        def restart(self, seed: int) -> None:
            self.inner.restart(seed)

        def statistics(self) -> dict:
            return env_statistics(self.env)

        def load_statistics(self, state: dict) -> None:
            if state:
                self.env.load_statistics(state)

        # -- gradient mode (gradients.py does the work) -------------------------------------------------------

        def prepare(self, weights, version: int, frames: int) -> TensorDictBase:
            """Collect a rollout with ``weights`` and keep it (prepared, or stored in the replay buffer) for
            :meth:`gradients`, ``frames`` being collected in all once every worker's is; hand back what the
            driver tracks (rewards and dones)."""
            started = time.perf_counter()
            learner = self.gradient_learner()
            learner.algorithm.set_weights(weights)
            self.version = version
            batch = self.inner.collect()
            seconds = time.perf_counter() - started
            tracking = learner.prepare(batch, frames)
            self.stamp(tracking, seconds)
            return tracking.consolidate()

        def gradients(self, step: int, weights) -> TensorDictBase:
            learner = self.gradient_learner()
            learner.algorithm.set_weights(weights)
            return learner.step(step)

        def gradient_learner(self) -> GradientWorker:
            if self.learner is None:
                raise RuntimeError("a gradient-mode call to a worker built without a learner (runner.mode = "
                                   "'experience')")
            return self.learner

    _WORKER_CLASS = WorkerCollector
    return WorkerCollector
