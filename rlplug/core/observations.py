"""One ``observation`` entry for every env: what networks, replay buffers and losses read.

A TorchRL env may declare its observations as several entries (TorchRL's ``PendulumEnv``: ``th``, ``thdot``
and its physical ``params``; DeepMind Control: ``position``, ``velocity``...). rlplug's algorithms read one
entry, ``observation`` (the policy's view, replay storage, the losses), so rather than teach each of them
several keys, the env is given one: :func:`one_observation` appends :class:`ObservationVector`, a TorchRL
transform that writes the chosen entries, flattened, as float32 and concatenated, under ``observation``.
The entries themselves stay (a stateless env such as ``PendulumEnv`` reads its state back from them).

Which entries: ``in_keys`` where given; otherwise an env that declares ``observation`` keeps it, be it one
tensor or a TensorDict of named entries (rlplug's ``gym`` env, whose Dict observations are such; transforms
such as ``StepCounter`` add entries that are not observations), with the images it declares beside a tensor
``observation`` (TorchRL's ``GymEnv(..., from_pixels=True, pixels_only=False)``: ``pixels``) read too; any other
env has all its floating-point entries and uint8 images read, nested ones included, in the order the env
declares them. An entry no network can read (integers, booleans) is a :class:`UserError` naming it and what
to do. The env's own reward that a recipe's transforms keep (``env_reward``) is never read.

Images are not flattened into a vector: where the entries read include an image (2 or more dims, TorchRL's
``pixels`` for one) beside others, :class:`ObservationEntries` writes ``observation`` as a TensorDict of the
entries, as the ``gym`` env does for a Dict observation, so ``cnn`` encodes the images and joins the rest;
an image read alone is ``observation`` itself, a uint8 one kept uint8 (the network scales it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Composite, Unbounded
from torchrl.envs import EnvBase, Transform, TransformedEnv

from rlplug.core.masks import MASK
from rlplug.core.transformed import ENV_REWARD
from rlplug.errors import UserError, did_you_mean

#: The entry every rlplug network reads.
OBSERVATION = "observation"
#: The entry an asymmetric critic reads in place of ``observation`` (``[algorithm.critic] in_keys``).
CRITIC_OBSERVATION = "critic_observation"


def is_image(spec, env_dims: int) -> bool:
    """Whether an entry is an image: two or more dims per observation (``cnn`` reads 2 to 4)."""
    return len(spec.shape) - env_dims >= 2


def key_name(key) -> str:
    """A nested key as a recipe writes it: ``params.g``."""
    return ".".join(key) if isinstance(key, tuple) else str(key)


class ObservationVector(Transform):
    """Writes ``observation`` (or ``out_key``): the entries ``in_keys``, each as float32, concatenated along the
    last dim.

    Several entries are flattened first (a scalar becomes one feature, a ``[3, 4]`` entry twelve); one entry
    keeps its shape (a float image stays an image) and a uint8 image its dtype too."""

    def __init__(self, in_keys: Sequence, event_dims: Sequence[int], dtype: torch.dtype = torch.float32,
                 out_key: str = OBSERVATION):
        super().__init__(in_keys=list(in_keys), out_keys=[out_key])
        self.event_dims = list(event_dims)
        self.dtype = dtype

    def _vector(self, data: TensorDictBase) -> torch.Tensor:
        if len(self.in_keys) == 1:
            return data.get(self.in_keys[0]).to(self.dtype)
        parts = []
        for key, dims in zip(self.in_keys, self.event_dims):
            value = data.get(key)
            parts.append(value.unsqueeze(-1) if dims == 0 else value.flatten(-dims) if dims > 1 else value)
        return torch.cat([part.to(torch.float32) for part in parts], -1)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        next_tensordict.set(self.out_keys[0], self._vector(next_tensordict))
        return next_tensordict

    forward = _call

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        batch = observation_spec.shape
        specs = [observation_spec[key] for key in self.in_keys]
        if len(specs) == 1:
            shape = specs[0].shape[len(batch):]
        else:
            shape = (sum(math.prod(spec.shape[len(batch):]) for spec in specs),)
        observation_spec[self.out_keys[0]] = Unbounded(shape=(*batch, *shape), dtype=self.dtype,
                                                       device=observation_spec.device)
        return observation_spec


def network_dtype(dtype: torch.dtype) -> torch.dtype:
    """An entry's dtype as networks get it: floats as float32 (what they compute in), uint8 images as they are."""
    return dtype if dtype == torch.uint8 else torch.float32


class ObservationEntries(Transform):
    """Writes ``observation`` (or ``out_key``) as a TensorDict of the entries ``in_keys`` (named as in a recipe:
    ``pixels``, ``params.g``), each of its own shape, floats as float32 and uint8 images as they are: the layout
    of the ``gym`` env's Dict observations, which ``cnn`` reads (its images encoded, the other entries joined)."""

    def __init__(self, in_keys: Sequence, out_key: str = OBSERVATION):
        super().__init__(in_keys=list(in_keys), out_keys=[out_key])
        self.names = [key_name(key) for key in self.in_keys]

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        entries = {name: value.to(network_dtype(value.dtype))
                   for name, value in zip(self.names, (next_tensordict.get(key) for key in self.in_keys))}
        next_tensordict.set(self.out_keys[0], TensorDict(entries, batch_size=next_tensordict.batch_size,
                                                         device=next_tensordict.device))
        return next_tensordict

    forward = _call

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        entries = {name: observation_spec[key].clone().to(network_dtype(observation_spec[key].dtype))
                   for name, key in zip(self.names, self.in_keys)}
        observation_spec[self.out_keys[0]] = Composite(entries, shape=observation_spec.shape,
                                                       device=observation_spec.device)
        return observation_spec


class OneObservationEnv(TransformedEnv):
    """The env with :class:`ObservationVector` appended. It steps through TensorDicts only: the array road
    (:class:`rlplug.registry.protocols.Env`) would hand out the base env's arrays, not the vector."""

    supports_tensor_steps = False


def entry_problem(key, spec, batch_dims: int) -> str | None:
    """Why no network reads the entry ``key``, or None."""
    if spec.dtype.is_floating_point or (spec.dtype == torch.uint8 and is_image(spec, batch_dims)):
        return None
    shape = list(spec.shape[batch_dims:])
    return (f"entry '{key_name(key)}' holds {str(spec.dtype).removeprefix('torch.')} values of shape {shape}, "
            f"which networks do not read (they read floating-point entries and uint8 images)")


def chosen_entries(spec: Composite, in_keys: Sequence[str] | None) -> list | None:
    """The keys to gather into ``observation``, or None where the env's own ``observation`` is read as it is."""
    # the env's own reward, kept beside a reshaped one by the recipe's transforms, is no observation; nor is an
    # action mask, which the policy applies, unless named; nor the critic's own entry
    named_mask = in_keys is not None and MASK in in_keys
    leaves = [key for key in spec.keys(True, True)
              if key not in (ENV_REWARD, CRITIC_OBSERVATION) and (key != MASK or named_mask)]
    names = [key_name(key) for key in leaves]
    if in_keys is None:
        if OBSERVATION in spec.keys():  # a tensor, or a TensorDict of named entries (a Dict observation)
            return images_beside(spec, leaves)
        problems = [entry_problem(key, spec[key], spec.ndim) for key in leaves]
        readable = [key for key, problem in zip(leaves, problems) if problem is None]
        if not readable:
            listed = "; ".join(problem for problem in problems if problem is not None) or "it has none"
            raise UserError(f"no observation entry of this env is one networks can read: {listed}; or choose "
                            f"the entries with in_keys", path="env")
        return readable
    chosen = keys_named(spec, in_keys, dict(zip(names, leaves)), "env.in_keys")
    if chosen == [OBSERVATION]:
        return None
    # with an image, the env's own observation is one entry of the Dict; otherwise it would be overwritten
    among_images = OBSERVATION in chosen and any(is_image(spec[key], spec.ndim) for key in chosen)
    if OBSERVATION in leaves and not among_images:
        raise UserError("the env already declares an 'observation' entry, which rlplug would overwrite: choose "
                        "['observation'] alone or with images, or rename it first (TorchRL's RenameTransform)",
                        path="env.in_keys")
    return chosen


def keys_named(spec: Composite, names: Sequence[str], by_name: dict, path: str,
               shown: Sequence[str] | None = None) -> list:
    """The keys ``by_name`` gives for ``names``, each an entry networks can read (or the action mask, where it is
    among them); a :class:`UserError` at ``path`` for none named, a name the env lacks (its entries listed as
    ``shown``, by default ``by_name``'s names), an entry no network reads, or a name given twice."""
    if not names:
        raise UserError("must name at least one observation entry", path=path)
    listed = list(by_name) if shown is None else list(shown)
    chosen = []
    for name in names:
        if name not in by_name:
            raise UserError(f"the env has no observation entry '{name}'{did_you_mean(name, list(by_name))}; its "
                            f"entries: {', '.join(listed)}", path=path)
        key = by_name[name]
        problem = None if key == MASK else entry_problem(key, spec[key], spec.ndim)
        if problem:
            raise UserError(problem, path=path)
        chosen.append(key)
    if len(set(names)) != len(names):
        raise UserError(f"names an entry twice: {list(names)}", path=path)
    return chosen


def images_beside(spec: Composite, leaves: list) -> list | None:
    """``observation`` and the images the env declares beside it (TorchRL's ``GymEnv(from_pixels=True,
    pixels_only=False)``: ``pixels`` beside the state vector), in the env's order; None where there are none
    or ``observation`` is a Dict already. An env that renders its images beside its state is read whole: ``cnn``
    encodes the images and joins the state."""
    if isinstance(spec[OBSERVATION], Composite):
        return None
    images = [key for key in leaves if key != OBSERVATION and entry_problem(key, spec[key], spec.ndim) is None
              and is_image(spec[key], spec.ndim)]
    return [key for key in leaves if key == OBSERVATION or key in images] if images else None


def one_observation(env: EnvBase, in_keys: Sequence[str] | None = None) -> EnvBase:
    """``env`` itself where it declares ``observation`` (and ``in_keys`` asks for nothing else); else the
    env with the chosen entries concatenated into ``observation`` (:class:`ObservationVector`), or, where they
    include an image beside other entries, gathered into it by name (:class:`ObservationEntries`). Entries are
    named as in a recipe: ``th``, ``params.g`` for nested ones."""
    chosen = chosen_entries(env.observation_spec, in_keys)
    return env if chosen is None else gathered(env, chosen, OBSERVATION)


def gathered(env: EnvBase, chosen: list, out_key: str) -> EnvBase:
    """``env`` with ``out_key`` written from the entries ``chosen`` (keys): concatenated
    (:class:`ObservationVector`), or by name where an image is among several (:class:`ObservationEntries`)."""
    spec = env.observation_spec
    if len(chosen) > 1 and any(is_image(spec[key], spec.ndim) for key in chosen):
        return OneObservationEnv(env, ObservationEntries(chosen, out_key=out_key))
    event_dims = [len(spec[key].shape) - spec.ndim for key in chosen]
    return OneObservationEnv(env, ObservationVector(chosen, event_dims, network_dtype(spec[chosen[0]].dtype),
                                                    out_key=out_key))


def named_entries(spec: Composite, names: Sequence[str], path: str) -> list:
    """The keys of the entries ``names`` (as a recipe writes them: ``state``, ``params.g``; an entry of a Dict
    observation by its own name too), each one networks can read (:func:`keys_named`)."""
    leaves = [key for key in spec.keys(True, True) if key not in (ENV_REWARD, MASK, CRITIC_OBSERVATION)]
    by_name = {key_name(key): key for key in leaves}
    shown = dict(by_name)
    for key in leaves:  # a Dict observation's entry ("observation", "state") by its own name, where unambiguous
        if isinstance(key, tuple) and len(key) == 2 and key[0] == OBSERVATION and key[1] not in by_name:
            by_name[key[1]] = key
            shown = {key[1] if value == key else name: value for name, value in shown.items()}
    return keys_named(spec, names, by_name, path, list(shown))


def with_network_entries(env: EnvBase, policy: Sequence[str] = (), critic: Sequence[str] = ()) -> EnvBase:
    """``env`` with the entries an asymmetric actor-critic names (``[algorithm.policy] in_keys`` and
    ``[algorithm.critic] in_keys``: privileged state in simulation) gathered: the critic's into
    ``critic_observation``, then the policy's into ``observation``, both from the entries as the env declares
    them (a Dict observation's by their own names). Where the policy names none it reads the env's observation."""
    if critic:
        chosen = named_entries(env.observation_spec, critic, "algorithm.critic.in_keys")
        env = gathered(env, chosen, CRITIC_OBSERVATION)
    if policy:
        chosen = named_entries(env.observation_spec, policy, "algorithm.policy.in_keys")
        env = gathered(env, chosen, OBSERVATION)
    return env
