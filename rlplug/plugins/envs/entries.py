"""Dict observations through the ``gym`` env: their entries reach the networks as they are (an image stays a
uint8 image), named, under ``observation``.

TorchRL's ``GymWrapper`` reads one observation array per step: its reader of the final observations of ended
episodes (same-step autoreset) knows no other, and leaves a Dict's entries at zero there. So each sub-env
packs its Dict into one float32 vector (:class:`PackEntries`, a gymnasium wrapper: the same packing on both
of TorchRL's steps and on every vectorisation), and :class:`UnpackEntries`, a TorchRL transform around the
env, gives each entry back its shape and dtype, as ``("observation", name)``. The array road stays closed
for such envs (:class:`EntriesEnv`): it would hand out the packed vector.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import EnvBase, Transform, TransformedEnv

if TYPE_CHECKING:
    from rlplug.plugins.envs.workers import ArrayCopies

from rlplug.errors import UserError

#: The attribute of a packed sub-env that holds its :class:`Entry` list (read through the vector env).
ENTRIES = "observation_entries"


@dataclass(frozen=True)
class Entry:
    """One entry of a packed Dict observation: its name, shape, numpy dtype and (finite or not) bounds."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    low: float
    high: float

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def as_box(space: gym.Space) -> gym.spaces.Box:
    """A Box entry as it is (float64 read as float32, what networks compute in); any other space flattened
    into float32 features (Discrete one-hot encoded), as ``flatten_observations`` does."""
    if isinstance(space, gym.spaces.Box):
        dtype = np.float32 if space.dtype == np.float64 else space.dtype
        return gym.spaces.Box(space.low.astype(dtype), space.high.astype(dtype), dtype=dtype)
    flat = gym.spaces.flatten_space(space)
    if not isinstance(flat, gym.spaces.Box):  # a Sequence or Graph entry, whose size varies
        raise UserError(f"a Dict observation entry of type {type(space).__name__} cannot be flattened into "
                        f"features of a fixed size", path="env")
    return gym.spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32)


class BoxEntries(gym.ObservationWrapper):
    """A Dict observation whose every entry is a Box (see :func:`as_box`), so that frames stack entry by entry."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.sources = dict(env.observation_space.spaces)  # type: ignore[attr-defined]  # a Dict: pack_entries checks
        self.observation_space = gym.spaces.Dict({name: as_box(space) for name, space in self.sources.items()})

    def observation(self, observation):
        boxes = self.observation_space.spaces
        return {name: (np.asarray(observation[name], dtype=boxes[name].dtype) if isinstance(space, gym.spaces.Box)
                       else gym.spaces.flatten(space, observation[name]).astype(np.float32))
                for name, space in self.sources.items()}


class PackEntries(gym.ObservationWrapper):
    """A Dict of Box entries as one float32 vector, entries in the Dict's order; :attr:`observation_entries`
    says where each is. With ``stacked`` frames (frame_stack), a stacked vector ``[k, n]`` is one vector of
    ``k * n``, oldest first, as the flat road has it."""

    def __init__(self, env: gym.Env, stacked: int = 1):
        super().__init__(env)
        entries = []
        for name, space in env.observation_space.spaces.items():  # type: ignore[attr-defined]  # Dict by construction
            shape = tuple(space.shape)
            if stacked > 1 and len(shape) == 2:
                shape = (shape[0] * shape[1],)
            low, high = float(np.min(space.low)), float(np.max(space.high))
            entries.append(Entry(str(name), shape, np.dtype(space.dtype).name, low, high))
        self.observation_entries = tuple(entries)
        size = sum(entry.size for entry in entries)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def observation(self, observation) -> np.ndarray:
        return np.concatenate([np.asarray(observation[entry.name], dtype=np.float32).reshape(-1)
                               for entry in self.observation_entries])


def pack_entries(env: gym.Env, env_id: str, frame_stack: int, indices: Sequence[int] | None) -> gym.Env:
    """The sub-env's Dict observation packed (:class:`PackEntries`), frames stacked entry by entry first."""
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict):
        raise TypeError(f"packs the entries of a Dict observation, got {space}")
    if indices is not None:
        raise UserError(f"selects entries of a one-dimensional observation, and {env_id}'s is a Dict (keys "
                        f"{', '.join(map(str, space.spaces))}); set flatten_observations = true",
                        path="env.observation_indices")
    if frame_stack > 1 and "action_mask" in space.spaces:
        raise UserError(f"{env_id}'s Dict observation holds an action_mask, which stacking would turn into k masks "
                        f"of the past steps; unset frame_stack (or stack the other entries in the env itself)",
                        path="env.frame_stack")
    env = BoxEntries(env)
    if frame_stack > 1:
        env = gym.wrappers.FrameStackObservation(env, frame_stack)
    return PackEntries(env, stacked=frame_stack)


def packed_entries(vector_env: gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv | ArrayCopies
                   ) -> tuple[Entry, ...] | None:
    """The entries a vector env's sub-envs pack, or None where they observe one array."""
    if not all(vector_env.call("has_wrapper_attr", ENTRIES)):
        return None
    return vector_env.get_attr(ENTRIES)[0]


class UnpackEntries(Transform):
    """``observation``, a packed vector, becomes a TensorDict of the named entries, each of its own shape and
    dtype (the inverse of :class:`PackEntries`)."""

    def __init__(self, entries: Sequence[Entry]):
        super().__init__(in_keys=["observation"], out_keys=["observation"])
        self.entries = tuple(entries)
        self.sizes = [entry.size for entry in self.entries]
        self.dtypes = [getattr(torch, entry.dtype) for entry in self.entries]

    def _unpack(self, packed: torch.Tensor) -> TensorDictBase:
        batch = packed.shape[:-1]
        pieces = packed.split(self.sizes, -1)
        return TensorDict({entry.name: piece.reshape(*batch, *entry.shape).to(dtype)
                           for entry, piece, dtype in zip(self.entries, pieces, self.dtypes)}, batch_size=batch)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        packed = next_tensordict.pop("observation")
        next_tensordict.set("observation", self._unpack(packed))
        return next_tensordict

    forward = _call

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        batch, device = observation_spec.shape, observation_spec.device
        specs = {}
        for entry, dtype in zip(self.entries, self.dtypes):
            shape = (*batch, *entry.shape)
            if math.isfinite(entry.low) and math.isfinite(entry.high):
                specs[entry.name] = Bounded(entry.low, entry.high, shape=shape, dtype=dtype, device=device)
            else:
                specs[entry.name] = Unbounded(shape=shape, dtype=dtype, device=device)
        observation_spec["observation"] = Composite(specs, shape=batch, device=device)
        return observation_spec


class EntriesEnv(TransformedEnv):
    """The env with :class:`UnpackEntries` appended. It steps through TensorDicts only: the array road
    (:class:`rlplug.registry.protocols.Env`) would hand out the packed vector."""

    supports_tensor_steps = False


def with_entries(env: EnvBase, entries: Sequence[Entry]) -> EnvBase:
    return EntriesEnv(env, UnpackEntries(entries))
