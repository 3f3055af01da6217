"""Replay storages (``runner.storages = M``, off-policy algorithms): Ape-X's layout on Ray.

The replay lives in ``M`` Ray actors (:class:`Storage`), each holding the recipe's own replay buffer
(``algorithm.replay_buffer``: uniform or prioritized, the same alpha and beta) of capacity
``ceil(capacity / M)``. Worker ``i`` writes its rollouts into storage ``i % M`` (:class:`StorageWriter`) and
hands the driver only what it tracks (rewards and dones). The learner samples through :class:`ShardedReplay`,
which has the interface of one buffer, so the algorithm's own update runs on it unchanged:

- a sample of ``B`` draws how many items each storage gives, multinomial in the storages' sizes (uniform) or
  in their total priority mass ``sum p^alpha`` (prioritized), so that every stored item has the probability
  it would have in one buffer; each storage samples by its own rule (in one round trip: each draws ``B`` and
  the first ``count`` are kept, so ``M * B`` items cross the network for a sample of ``B``);
- importance weights are computed here against the smallest ``p^alpha`` of all the storages, so they equal one
  buffer's ``(p_i^alpha / min_k p_k^alpha)^-beta``;
- a sampled item's ``index`` is ``storage * ceil(capacity / M) + its index there``, so ``update_priority``
  sends each priority to the storage that holds the item.

Faults: storages are spread over the nodes and restarted by Ray (``runner.max_restarts``) when lost with theirs,
empty; the ``storage_restarts`` metric counts them, their workers fill them again, and meanwhile the learner
samples from the storages that answer and hold items. Every call to a storage waits :data:`STORAGE_TIMEOUT`
seconds at most. Checkpoints hold every storage's state (its transitions with ``storage = "memory"``, the only
storage the storages keep), as one buffer's checkpoint does.

Why not TorchRL's ``RayReplayBuffer``: it holds one TorchRL buffer in one actor; sharding and the global
importance weights need each storage's priority mass and minimum, which its samplers keep in private trees.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase

from rlplug.errors import UserError, WorkersLost
from rlplug.plugins.runners.ray.cluster import lost_errors, node_number, ray_module
from rlplug.registry import protocols
from rlplug.registry.protocols import capability

#: The longest wait for a storage's answer; a storage that does not answer by then is skipped for that call.
STORAGE_TIMEOUT = 60.0
#: How long a storage may stay silent (Ray restarting it wherever there is room) before the run stops: the
#: time a lost worker has to come back.
LOST_AFTER = 300.0


class Storage:
    """One storage: the recipe's replay buffer in a Ray actor. A restarted actor is built again, empty."""

    def __init__(self, component, capacity: int, seed: int, context: dict[str, Any]):
        from rlplug.core.process import prepare_process

        prepare_process(1)
        self.buffer = component.with_params(capacity=capacity).build(device="cpu", seed=seed, **context)
        self.prioritized = hasattr(self.buffer, "update_priority")
        self.life = f"{os.getpid()}-{time.time_ns()}"  # changes when Ray restarts the actor
        self.node = node_number(ray_module())

    def extend(self, transitions: TensorDictBase) -> int:
        self.buffer.extend(transitions)
        return len(self.buffer)

    def _powered(self, index: torch.Tensor | None = None) -> torch.Tensor:
        """``p^alpha`` of the stored items (or of those at ``index``): what prioritized sampling is in proportion to."""
        sampler = self.buffer.sampler
        priorities = sampler.priorities[:len(self.buffer)] if index is None else sampler.priorities[index]
        return priorities.pow(sampler.alpha)

    def mass(self) -> dict[str, Any]:
        """Its life, size, sampling mass (the size, or the sum of ``p^alpha``) and smallest ``p^alpha``."""
        size = len(self.buffer)
        state: dict[str, Any] = {"life": self.life, "node": self.node, "size": size, "mass": float(size),
                                 "least": math.inf}
        if self.prioritized and size:
            powered = self._powered()
            state.update(mass=float(powered.sum()), least=float(powered.min()))
        return state

    def sample(self, count: int) -> tuple[TensorDictBase | None, dict[str, Any]]:
        """``count`` items by the buffer's own rule (prioritized ones with their ``p^alpha``; None while it is
        empty), and :meth:`mass`."""
        if not len(self.buffer):
            return None, self.mass()
        data = self.buffer.sample(count)
        if self.prioritized:
            data.set("powered", self._powered(data.get("index").cpu()))
        return data.consolidate(), self.mass()

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        self.buffer.update_priority(index, priority)

    def state_dict(self) -> dict[str, Any]:
        return self.buffer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state)


@dataclass(frozen=True)
class StorageWriter:
    """What a worker writes its rollouts with (pickled into the worker's actor): the storage's handle and how the
    algorithm turns a rollout into transitions (:meth:`~rlplug.registry.protocols.ReplayStorage.writer`)."""

    storage: Any
    transitions: Any

    def write(self, batch: TensorDictBase) -> bool:
        """``batch`` stored; False where the storage is lost or restarting (those transitions are dropped, and
        the rollouts that follow fill it again)."""
        ray = ray_module()
        transitions = self.transitions(batch).consolidate()
        try:
            ray.get(self.storage.extend.remote(transitions), timeout=STORAGE_TIMEOUT)
            return True
        except (*lost_errors(), ray.exceptions.GetTimeoutError):
            return False


class ShardedReplay:
    """The storages as one replay buffer (``extend``, ``sample``, ``update_priority``, ``len``, ``step``,
    ``state_dict``): picklable (actor handles, numbers and a generator), so any process may sample from it.

    ``schedule``: for prioritized storages, a buffer of the recipe's kind whose ``beta`` follows the run's
    frames (``step``); None for uniform ones.
    """

    #: how a checkpoint's replay state says it came from storages (``OffPolicy.load_state_dict`` reads it)
    sharded = True

    def __init__(self, shards: list, shard_capacity: int, *, seed: int = 0, schedule=None,
                 device: str | torch.device = "cpu", timeout: float = STORAGE_TIMEOUT, max_restarts: int = 3):
        self.shards, self.shard_capacity = list(shards), int(shard_capacity)
        self.schedule, self.device, self.timeout = schedule, torch.device(device), timeout
        self.generator = torch.Generator().manual_seed(int(seed))
        self.lives: list[str | None] = [None] * len(self.shards)
        self.nodes: list[int | None] = [None] * len(self.shards)
        self.sizes: list[int] = [0] * len(self.shards)
        self.restarts, self.max_restarts = 0, max_restarts
        #: since when each storage that stopped answering has been silent (monotonic seconds)
        self.silent: dict[int, float] = {}
        self.written = 0  # driver-side extends, spread round-robin
        #: the storages' state while they are stopped (:meth:`detach`), put back into the next ones (:meth:`attach`)
        self.kept: dict[str, Any] | None = None

    def reseed(self, seed: int) -> None:
        """Another seed for the draws made here (a copy of this replay sampling in another process)."""
        self.generator.manual_seed(int(seed))

    @property
    def capacity(self) -> int:
        return self.shard_capacity * len(self.shards)

    def detach(self) -> None:
        """Keep the storages' contents here and stop them (the collection shuts down; a checkpoint may follow)."""
        if self.kept is None:
            self.kept = self.state_dict()
            ray = ray_module()
            for shard in self.shards:
                ray.kill(shard, no_restart=True)

    def attach(self, shards: list) -> None:
        """New storages (the collection starts again), filled with what :meth:`detach` kept."""
        kept, self.kept = self.kept, None
        self.shards, self.lives, self.sizes = list(shards), [None] * len(shards), [0] * len(shards)
        self.nodes = [None] * len(shards)
        self.silent = {}
        if kept is not None:
            self.load_state_dict(kept)

    # -- calls to the storages, each answered within the timeout or skipped -----------------------------------

    def ask(self, calls: dict[int, Any]) -> dict[int, Any]:
        """The answers of the storages that give one in time (``calls``: shard -> object ref). A storage that
        does not answer (lost, restarting, slow) is skipped; one silent for :data:`LOST_AFTER` seconds (its
        restarts used up, or no node to restart it on) stops the run (:class:`WorkersLost`)."""
        ray = ray_module()
        deadline = time.monotonic() + self.timeout
        answers = {}
        for shard, ref in calls.items():
            try:
                answers[shard] = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                self.silent.pop(shard, None)
            except (*lost_errors(), ray.exceptions.GetTimeoutError) as error:
                since = self.silent.setdefault(shard, time.monotonic())
                if time.monotonic() - since > LOST_AFTER:
                    line = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
                    raise WorkersLost(f"replay storage {shard} has not answered for {LOST_AFTER:g} s (lost and not "
                                      f"restarted, {self.max_restarts} restarts allowed): {line}",
                                      path="runner.max_restarts") from None
        return answers

    def note(self, shard: int, mass: dict[str, Any]) -> None:
        """A storage's :meth:`Storage.mass`: a new life is a restart, counted."""
        if self.lives[shard] is not None and self.lives[shard] != mass["life"]:
            self.restarts += 1
        self.lives[shard] = mass["life"]
        self.nodes[shard] = mass["node"]
        self.sizes[shard] = int(mass["size"])

    def masses(self) -> dict[int, dict[str, Any]]:
        answers = self.ask({i: shard.mass.remote() for i, shard in enumerate(self.shards)})
        for shard, mass in answers.items():
            self.note(shard, mass)
        return answers

    # -- one buffer's interface -------------------------------------------------------------------------------

    def __len__(self) -> int:
        if self.kept is not None:
            return sum(self.sizes)
        return sum(mass["size"] for mass in self.masses().values())

    def extend(self, transitions: TensorDictBase) -> None:
        """Transitions from the driver (the workers write their own), to the storages in turn."""
        shard = self.written % len(self.shards)
        self.written += 1
        self.ask({shard: self.shards[shard].extend.remote(transitions.reshape(-1).cpu().consolidate())})

    def sample(self, batch_size: int) -> TensorDictBase:
        """``batch_size`` items, each storage's count drawn in proportion to its size (uniform) or its priority
        mass (prioritized); prioritized samples carry ``index`` and the global importance ``weight``.

        One round trip: every storage answers with its mass and ``batch_size`` items drawn by its own rule, of
        which the first ``count`` are kept (independent draws, so the first ``count`` are a sample of
        ``count``); a storage that does not answer in time is left out of this sample."""
        answers = self.ask({i: shard.sample.remote(batch_size) for i, shard in enumerate(self.shards)})
        for shard, (_, mass) in answers.items():
            self.note(shard, mass)
        held = sorted(shard for shard, (data, _) in answers.items() if data is not None)
        if not held:
            raise RuntimeError("no replay storage answered with a transition: nothing to sample")
        masses = torch.tensor([answers[shard][1]["mass"] for shard in held], dtype=torch.float64)
        counts = torch.bincount(torch.multinomial(masses, batch_size, replacement=True, generator=self.generator),
                                minlength=len(held)).tolist()
        parts = []
        for shard, count in zip(held, counts):
            data = answers[shard][0][:count]
            if "index" in data.keys():
                data.set("index", data.get("index").cpu() + shard * self.shard_capacity)
            parts.append(data)
        sample: TensorDictBase = torch.cat(parts, 0)  # dispatched to TensorDict's cat
        if self.schedule is not None:
            least = min(answers[shard][1]["least"] for shard in held)
            powered = sample.pop("powered")
            sample.set("weight", (powered / least).pow(-self.schedule.beta).to(torch.float32))
        return sample.to(self.device) if sample.device != self.device else sample

    def sample_many(self, batch_size: int, count: int) -> Iterator[TensorDictBase]:
        """``count`` samples of ``batch_size``: uniform storages in one round trip (one sample of them all,
        shuffled and cut; its items are independent draws, so each part is a sample of ``batch_size``).
        Prioritized storages are asked for each sample after the last one's priorities went back, as one buffer
        is sampled."""
        if self.schedule is not None:
            for _ in range(count):
                yield self.sample(batch_size)
            return
        whole = self.sample(batch_size * count)
        order = torch.randperm(whole.shape[0], generator=self.generator).to(whole.device)
        yield from whole[order].split(batch_size)

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Each priority to the storage that holds its item (``index`` as :meth:`sample` gave it)."""
        index = torch.as_tensor(index).detach().reshape(-1).to("cpu", torch.long)
        priority = torch.as_tensor(priority).detach().reshape(-1).cpu()
        if priority.numel() == 1 and index.numel() != 1:
            priority = priority.expand(index.shape)
        shard_of = index // self.shard_capacity
        self.ask({int(shard): self.shards[int(shard)].update_priority.remote(
            index[shard_of == shard] % self.shard_capacity, priority[shard_of == shard])
            for shard in shard_of.unique().tolist()})

    def step(self, frames: int) -> None:
        """A prioritized replay's importance-weight schedule (the recipe's buffer's own ``step``)."""
        if self.schedule is not None:
            self.schedule.step(frames)

    # -- checkpoints --------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Every storage's state (a storage that does not answer in time is saved empty: it is refilled)."""
        if self.kept is not None:
            return self.kept
        answers = self.ask({i: shard.state_dict.remote() for i, shard in enumerate(self.shards)})
        return {"shards": [answers.get(i, {}) for i in range(len(self.shards))],
                "generator": self.generator.get_state(), "restarts": self.restarts,
                **({"beta": self.schedule.beta} if self.schedule is not None else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        shards = state["shards"]
        if len(shards) != len(self.shards):
            raise UserError(f"this checkpoint's replay is in {len(shards)} storages; resume with "
                              f"--set runner.storages={len(shards)}", path="runner.storages")
        self.ask({i: self.shards[i].load_state_dict.remote(shard) for i, shard in enumerate(shards) if shard})
        self.generator.set_state(state["generator"])
        self.restarts = int(state["restarts"])
        if self.schedule is not None and "beta" in state:
            self.schedule.beta = float(state["beta"])

    def metrics(self) -> dict[str, float]:
        """``storages``, ``storage_sizes`` (their total, as last known), ``storage_restarts`` and
        ``storage_nodes`` (over how many Ray nodes they are, as last known)."""
        nodes = {node for node in self.nodes if node is not None}
        return {"storages": float(len(self.shards)), "storage_sizes": float(sum(self.sizes)),
                "storage_restarts": float(self.restarts), **({"storage_nodes": float(len(nodes))} if nodes else {})}


def storages_problem(algorithm) -> str | None:
    """Why ``algorithm`` cannot learn from replay storages, or None."""
    replay_storage = capability(algorithm, protocols.Algorithm.replay_storage)
    if replay_storage is None:
        return (f"replay storages hold an algorithm's replay, and {type(algorithm).__name__} learns without one (it "
                f"has no Algorithm.replay_storage, as on-policy algorithms have none); leave runner.storages out (0)")
    return replay_storage().problem()


def sharded_replay(algorithm, count: int, *, seed: int, device, total_frames: int,
                   max_restarts: int) -> ShardedReplay:
    """The algorithm's replay as ``count`` storages (no storage started yet: :meth:`ShardedReplay.attach`)."""
    storage = algorithm.replay_storage()
    one = storage.buffer.with_params(capacity=1).build(device="cpu", total_frames=total_frames)
    schedule = one if capability(one, protocols.ReplayBuffer.update_priority) else None
    return ShardedReplay([], math.ceil(storage.capacity / count), seed=seed, schedule=schedule, device=device,
                         max_restarts=max_restarts)


def start_storages(algorithm, replay: ShardedReplay, count: int, *, seed: int, options: dict[str, Any],
                   context: dict[str, Any]) -> list:
    """``count`` storage actors of the algorithm's replay buffer kind, ``replay.shard_capacity`` items each;
    ``context``: what a buffer is built with (``total_frames``, the env's specs)."""
    actor = ray_module().remote(Storage).options(**options)
    buffer = algorithm.replay_storage().buffer
    return [actor.remote(buffer, replay.shard_capacity, seed + 7919 * (i + 1), context) for i in range(count)]


def writers(replay: ShardedReplay, algorithm, workers: int) -> list[StorageWriter]:
    """Worker ``i``'s writer, into storage ``i % M``."""
    transitions = algorithm.replay_storage().writer()
    return [StorageWriter(replay.shards[i % len(replay.shards)], transitions) for i in range(workers)]


__all__ = ["LOST_AFTER", "STORAGE_TIMEOUT", "ShardedReplay", "Storage", "StorageWriter", "sharded_replay",
           "storages_problem", "writers"]
