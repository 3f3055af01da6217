"""Replay buffers for off-policy algorithms: rings of TensorDict columns, sampled in plain torch.

:class:`ReplayBuffer` (the ``uniform`` component) and :class:`PrioritizedReplayBuffer` (``prioritized``)
share one interface, the one ``rlplug_register_replay_buffers`` asks for:

- ``extend(batch)``: a TensorDict of transitions of any batch shape, flattened to one dim, written to a
  ring (the oldest transitions are overwritten first); returns the storage indices written. Every batch
  carries the keys of the first.
- ``sample(batch_size) -> TensorDict`` of shape ``[batch_size]`` on the buffer's ``device``, drawn with
  replacement from a ``torch.Generator`` seeded with the run's seed (the draw TorchRL's ``RandomSampler``
  makes). The prioritised buffer adds ``index`` (the storage indices, long, ``[batch_size]``) and ``weight``
  (the importance weights, float32, ``[batch_size]``), and takes ``update_priority(index, priority)`` with
  e.g. ``|td_error|``.
- ``sample_sequences(batch_size, length) -> TensorDict`` of shape ``[batch_size // length, length]``:
  runs of ``length`` consecutive steps of one episode (for recurrent networks), found from the ``episode``
  and ``step`` entries the transitions must carry (TorchRL's ``SliceSampler`` in its fragmented mode, so the
  steps of several envs may interleave in the ring). Uniform buffers only.
- ``len(buffer)``, ``capacity``, ``cursor``, ``write_count``.
- ``state_dict()`` / ``load_state_dict(state)``: plain tensors, numbers and strings, loadable with
  ``torch.load(weights_only=True)``: the write cursor, the write count, the sampler's generator state,
  the priorities, and, for ``storage = "memory"``, the stored transitions themselves (as views of the
  storage: save the state before the next ``extend``). A buffer loaded from that state samples exactly
  what the saved one would have.

The ring is one tensor per (nested) key with ``capacity`` rows, allocated at the first ``extend`` from the
first transition's keys, shapes and dtypes, as TorchRL's lazy storages allocate theirs. The buffer writes and
reads those tensors itself and keeps its cursor and write count as plain ints: storing one transition through
TorchRL's ``Storage.set`` costs a few times the direct write, and a step-by-step off-policy loop pays a
write and a sample every env step (``benchmarks/replay_calls.py``). TorchRL's ``SliceSampler`` reads the
stored rows through a ``TensorStorage`` over them (its public constructor), in a TorchRL ``ReplayBuffer``
that hands it the buffer's generator.

With ``storage = "memmap"`` the transitions live in memory-mapped files under ``RUN_DIR/replay`` (one file
per key and a ``meta.json``: TensorDict's memmap layout, the one TorchRL's ``LazyMemmapStorage`` writes), and
a checkpoint holds only what is listed above without the transitions: ``load_state_dict`` reopens the files
in place (``TensorDict.load_memmap``). The files are not versioned with the checkpoints, so a run resumed
from a checkpoint older than the files' last write finds the transitions collected since (which may have
overwritten older ones) where the checkpoint expected older ones: the resumed run is sound but not
bit-identical to one left alone. Use memory storage where exact resumption matters and the buffer fits in
memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import ImmutableDatasetWriter, SliceSampler, TensorStorage
from torchrl.data import ReplayBuffer as TorchRLReplayBuffer

from rlplug.errors import UserError
from rlplug.plugins.replay_buffers.sizing import check_fits

#: Where, under the run directory, memory-mapped storage writes its files.
MEMMAP_DIR = "replay"


#: Why a prioritised buffer cannot serve recurrent networks (said when sampling and, earlier, when building).
SEQUENCES_NEED_UNIFORM = ("prioritized replay samples single transitions; recurrent networks (lstm, gru) learn from "
                          "sequences of a 'uniform' buffer")


class ReplayBuffer:
    """A ring of transitions sampled uniformly with replacement.

    ``storage``: ``"memory"`` (tensors on ``device``, allocated at the first ``extend``) or ``"memmap"``
    (memory-mapped files under ``run_dir / "replay"``, on the CPU; samples are moved to ``device``). ``seed``
    seeds the sampling generator.
    """

    #: bytes each slot takes besides its transition (a prioritised buffer's priorities)
    slot_overhead = 0

    def __init__(self, capacity: int, *, storage: str = "memory", run_dir: str | Path | None = None,
                 device: str | torch.device = "cpu", seed: int = 0, transition_bytes: int = 0):
        """``transition_bytes``: about how much one transition takes (:func:`transition_bytes`), so that a
        capacity that cannot fit is refused now rather than when the ring is allocated, mid-run."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        check_fits(capacity, transition_bytes + self.slot_overhead, storage, device, run_dir)
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.storage_kind = storage
        self.path: Path | None
        if storage == "memory":
            self.storage_device = self.device
            self.path = None
        elif storage == "memmap":
            if run_dir is None:
                raise UserError("storage = 'memmap' needs a run directory to write the buffer's files into")
            self.storage_device = torch.device("cpu")
            self.path = Path(run_dir) / MEMMAP_DIR
            self.path.mkdir(parents=True, exist_ok=True)
        else:
            raise ValueError(f"storage must be 'memory' or 'memmap', got {storage!r}")
        self.generator = torch.Generator(device=self._generator_device())
        self.generator.manual_seed(int(seed))
        self._ring: TensorDictBase | None = None  # capacity rows, from the first extend (_allocate) or the files
        self._columns: dict = {}  # the ring's tensors by (nested) key
        self._cursor = 0  # the row the next transition is written to
        self._write_count = 0  # transitions ever written, those a batch larger than the ring dropped included
        self._slices: SliceSampler | None = None  # made at the first sample_sequences
        self._sequences: tuple[int, TorchRLReplayBuffer] | None = None  # (write_count, buffer) sample_sequences reads

    # -- what subclasses change ------------------------------------------------------------------------

    def _generator_device(self) -> torch.device:
        return self.storage_device  # uniform indices are drawn where the ring lives

    def _written(self, index: torch.Tensor) -> None:
        """Called with the storage indices of every write."""

    # -- the interface -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return min(self._write_count, self.capacity)

    @property
    def write_count(self) -> int:
        """How many transitions were ever written (``len`` stops at ``capacity``)."""
        return self._write_count

    @property
    def cursor(self) -> int:
        """The storage index the next transition is written to (the oldest one once the ring is full)."""
        return self._cursor

    def extend(self, batch: TensorDictBase) -> torch.Tensor:
        """Add transitions (any batch shape, flattened); returns the storage indices they were written to.

        A batch larger than the capacity keeps its last ``capacity`` transitions.
        """
        if not isinstance(batch, TensorDictBase):
            raise TypeError(f"a replay buffer stores TensorDicts, got {type(batch).__name__}")
        if batch.batch_size.numel() == 0:
            return torch.zeros(0, dtype=torch.long)
        if batch.ndim != 1:
            batch = batch.reshape(-1)
        dropped = max(batch.batch_size.numel() - self.capacity, 0)
        if dropped:  # written and overwritten at once: only the last ``capacity`` are kept, from the cursor on
            batch = batch[dropped:]
        if self._ring is None:
            self._allocate(batch[0])
        else:
            keys = set(batch.keys(include_nested=True, leaves_only=True))
            if keys != self._columns.keys():
                raise ValueError(f"a replay buffer stores the keys of its first batch; these differ: "
                                 f"{sorted(map(str, keys ^ self._columns.keys()))}")
        count, start = batch.batch_size[0], self._cursor
        first = min(count, self.capacity - start)  # the part before the ring's end; the rest wraps to 0
        for key, column in self._columns.items():
            values = batch.get(key)
            column[start:start + first] = values[:first]
            if first < count:
                column[:count - first] = values[first:]
        index = torch.arange(start, start + count, device=self.storage_device) % self.capacity
        self._cursor = (start + count) % self.capacity
        self._write_count += count + dropped
        self._written(index)
        return index

    def _allocate(self, transition: TensorDictBase) -> None:
        """The ring: ``capacity`` rows shaped, typed and keyed as ``transition`` (one row), uninitialised."""
        rows = transition.to(self.storage_device).expand(self.capacity)
        if self.storage_kind == "memmap":
            self._hold(rows.memmap_like(prefix=str(self.path), existsok=True))
        else:
            self._hold(torch.empty_like(rows))

    def _stored(self) -> TensorDictBase:
        """The ring, which exists once anything was written (or loaded)."""
        if self._ring is None:
            raise RuntimeError("the replay buffer has no storage: nothing was written to it or loaded into it")
        return self._ring

    def _memmap_path(self) -> Path:
        if self.path is None:
            raise RuntimeError(f"a {self.storage_kind} replay buffer has no directory of files")
        return self.path

    def _hold(self, ring: TensorDictBase) -> None:
        self._ring = ring
        self._columns = {key: ring.get(key) for key in ring.keys(include_nested=True, leaves_only=True)}
        self._sequences = None

    def sample(self, batch_size: int) -> TensorDictBase:
        """``batch_size`` transitions drawn uniformly with replacement, on ``device``."""
        data, _ = self._sample(batch_size)
        return data

    def sample_sequences(self, batch_size: int, length: int) -> TensorDictBase:
        """``batch_size // length`` runs of ``length`` consecutive steps of one episode each (drawn with
        replacement, each run's start uniform over its episode's stored steps), shaped ``[runs, length]``.

        A run never crosses an episode's end, nor a gap where the ring overwrote steps; episodes with fewer
        than ``length`` stored steps are not drawn from.
        """
        if batch_size % length:
            raise ValueError(f"batch_size ({batch_size}) must be a multiple of the sequence length ({length})")
        if len(self) == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        if self._slices is None or self._slices.slice_len != length:
            self._slices = SliceSampler(slice_len=length, traj_key="episode", step_key="step", fragmented=True,
                                        strict_length=True, truncated_key=None, init_key=None)
            self._sequences = None
        if self._sequences is None or self._sequences[0] != self._write_count:
            # A read-only TorchRL buffer over the stored rows as they are now, which hands the SliceSampler the
            # buffer's generator. The sampler indexes the episodes of the storage it reads and keeps that index
            # while it reads the same one: rebuilt after every write, kept between writes. compilable: plain
            # counters instead of shared-memory ones, which are slow to create (the view is never shared).
            stored = TensorStorage(self._stored()[:len(self)], device=self.storage_device, compilable=True)
            self._sequences = (self._write_count, TorchRLReplayBuffer(
                storage=stored, sampler=self._slices, writer=ImmutableDatasetWriter(), generator=self.generator))
        try:
            data = self._sequences[1].sample(int(batch_size))
        except RuntimeError as error:
            if "sufficient length" not in str(error):
                raise
            raise UserError(f"no stored episode has {length} steps yet: lower algorithm.sequence_length or raise "
                            f"algorithm.learning_starts", path="algorithm.sequence_length") from None
        data = data.reshape(-1, length)
        return data.to(self.device) if data.device != self.device else data

    def _sample(self, batch_size: int) -> tuple[TensorDictBase, dict[str, Any]]:
        if len(self) == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        index, info = self._draw(int(batch_size))
        nested: dict = {}
        for key, column in self._columns.items():
            *parents, leaf = key if isinstance(key, tuple) else (key,)
            table = nested
            for parent in parents:
                table = table.setdefault(parent, {})
            table[leaf] = column.index_select(0, index).to(self.device)
        return TensorDict(nested, batch_size=[len(index)], device=self.device), {"index": index, **info}

    def _draw(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """The storage indices of one sample, and what else the sampler says about them: uniform here (the
        draw TorchRL's ``RandomSampler`` makes, from the same generator)."""
        return torch.randint(0, len(self), (batch_size,), generator=self.generator, device=self.storage_device), {}

    def state_dict(self) -> dict[str, Any]:
        """Plain tensors and numbers (``weights_only``-loadable); the transitions too with memory storage."""
        n = len(self)
        state: dict[str, Any] = {
            "capacity": self.capacity,
            "storage": self.storage_kind,
            "len": n,
            "cursor": self.cursor,
            "write_count": self.write_count,
            "generator": self.generator.get_state(),
            "sampler": self._sampler_state(),
        }
        if self.storage_kind == "memory":
            # the rows held, copied unless they are the whole ring: torch.save writes a view's whole storage, every
            # slot of the ring (gigabytes, deaf to Ctrl-C meanwhile) for a few rows held
            held = self._stored()[:n] if n else None
            state["data"] = {} if held is None else (held if n == self.capacity else held.clone()).to_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity or state["storage"] != self.storage_kind:
            raise ValueError(f"this state is of a {state['storage']} buffer of capacity {state['capacity']}, not "
                             f"of a {self.storage_kind} buffer of capacity {self.capacity}")
        n, write_count, cursor = int(state["len"]), int(state["write_count"]), int(state["cursor"])
        if n != min(write_count, self.capacity) or not 0 <= cursor < self.capacity:
            raise ValueError(f"inconsistent replay buffer state: len {n}, write_count {write_count}, cursor {cursor}")
        self._ring, self._columns, self._sequences = None, {}, None  # allocated again at the next extend if n == 0
        self._slices = None  # its index of episodes described the ring as it was
        if n and self.storage_kind == "memory":
            data = TensorDict(state["data"], batch_size=[n]).to(self.storage_device)
            self._allocate(data[0])
            self._stored()[:n] = data
        elif n:
            path = self._memmap_path()
            if not (path / "meta.json").exists():
                raise UserError(f"the replay buffer's files are missing from {path}: a run with memmap storage "
                                f"resumes only where its run directory still holds them")
            ring = TensorDict.load_memmap(path)
            if ring.batch_size[:1] != torch.Size([self.capacity]):
                raise UserError(f"the replay buffer's files in {path} hold {ring.batch_size[0]} transitions, "
                                f"not the capacity {self.capacity} of this run's buffer")
            self._hold(ring)
        self._cursor = cursor
        self._write_count = write_count
        self.generator.set_state(state["generator"])
        self._load_sampler_state(state["sampler"])

    def _sampler_state(self) -> dict[str, Any]:
        return {}

    def _load_sampler_state(self, state: dict[str, Any]) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)}, capacity={self.capacity}, storage={self.storage_kind!r})"


__all__ = ["ReplayBuffer", "MEMMAP_DIR", "SEQUENCES_NEED_UNIFORM"]
