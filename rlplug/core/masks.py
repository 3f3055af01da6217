"""Action masks: an env's ``action_mask`` entry (which choices of a Discrete action are allowed now) read once,
where the env is built, and applied where an action is chosen.

An env gives the mask as a gymnasium Dict observation entry named ``action_mask`` (rlplug's ``gym`` env keeps
it as ``("observation", "action_mask")``) or as a TorchRL entry ``action_mask`` beside its observations.
:func:`with_action_mask` puts it in one place for every algorithm: a top-level boolean ``action_mask`` entry,
out of what networks read (unless the recipe asks, ``env.action_mask = "observed"``), and TorchRL's
``ActionMask`` transform after it, so the env's random actions (``env.rand_action``, ``rlplug check-env``) are
allowed ones. The policies read the entry beside ``observation``: a categorical head through TorchRL's
``MaskedCategorical`` / ``MaskedOneHotCategorical`` (:mod:`rlplug.core.heads`), Q-values through the masked
argmax :func:`masked_values` (TorchRL's ``QValueModule`` rule).
"""

from __future__ import annotations

from typing import Literal

import torch
from tensordict import TensorDictBase
from torchrl.data import Binary, Composite, Unbounded
from torchrl.envs import ActionMask, Compose, EnvBase, Transform, TransformedEnv

from rlplug.errors import UserError

#: The entry an env's mask is read from and written to.
MASK = "action_mask"
OBSERVATION = "observation"
#: ``env.action_mask``: "auto" applies an env's mask where it has one; "applied" requires one; "observed"
#: requires one and also feeds it to the networks (concatenated to a vector observation, or an entry of a Dict).
MaskUse = Literal["auto", "applied", "observed"]


#: A disallowed choice's logit (TorchRL's ``MaskedCategorical`` ``neg_inf``, and the collection's fast path): its
#: probability is exactly 0 in float32 and every log-probability stays finite, so a loss that multiplies
#: probabilities by log-probabilities (discrete SAC's, an entropy) gets 0 where -inf would give NaN, even
#: scaled by an entropy coefficient above 1.
MASKED_LOGIT = -1e9


def masked_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``logits`` with the disallowed choices at :data:`MASKED_LOGIT`: what ``MaskedCategorical`` computes."""
    return logits.masked_fill(~mask.bool(), MASKED_LOGIT)


def masked_values(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``values`` (logits, Q-values) with the disallowed choices at the dtype's lowest finite value, as
    TorchRL's ``QValueModule`` masks: an argmax never picks them, a softmax gives them zero probability, and
    nothing is infinite (an entropy's ``0 * log 0`` stays 0)."""
    if mask is None:
        return values
    return values.masked_fill(~mask.bool(), torch.finfo(values.dtype).min)


def random_allowed(mask: torch.Tensor) -> torch.Tensor:
    """An index drawn uniformly among the allowed choices of each ``[..., choices]`` mask row."""
    weights = mask.float().reshape(-1, mask.shape[-1])
    weights = torch.where(weights.sum(-1, keepdim=True) > 0, weights, torch.ones_like(weights))
    return torch.multinomial(weights, 1).reshape(mask.shape[:-1])


def mask_spec(spec: Composite) -> tuple | None:
    """Where ``spec`` declares a mask: ``("observation", "action_mask")`` in a Dict observation, ``"action_mask"``
    beside the observations, or None."""
    if MASK in spec.keys():
        return (MASK,)
    inner = spec.get(OBSERVATION, None) if OBSERVATION in spec.keys() else None
    if isinstance(inner, Composite) and MASK in inner.keys():
        return (OBSERVATION, MASK)
    return None


class MaskEntry(Transform):
    """The env's mask as a top-level boolean ``action_mask``; a Dict observation loses the entry (its one
    other entry becomes ``observation`` itself, so ``mlp`` reads it) unless ``observed``, where the mask stays
    among what networks read: concatenated, as float features, to a vector observation."""

    def __init__(self, source: tuple, observed: bool, single: str | None):
        super().__init__(in_keys=[source], out_keys=[MASK])
        self.source, self.observed, self.single = source, observed, single

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        mask = next_tensordict.get(self.source)
        if self.source[0] == OBSERVATION:
            entries = next_tensordict.get(OBSERVATION)
            if not self.observed:
                entries = entries.exclude(MASK)
                next_tensordict.set(OBSERVATION, entries.get(self.single) if self.single else entries)
        elif self.observed:
            observation = next_tensordict.get(OBSERVATION)
            next_tensordict.set(OBSERVATION, torch.cat([observation, mask.to(observation.dtype)], -1))
        next_tensordict.set(MASK, mask.bool())
        return next_tensordict

    forward = _call

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        batch, device = observation_spec.shape, observation_spec.device
        source = observation_spec[self.source]
        if self.source[0] == OBSERVATION:
            if not self.observed:
                entries = observation_spec[OBSERVATION].clone()
                del entries[MASK]
                observation_spec[OBSERVATION] = entries[self.single].clone() if self.single else entries
        elif self.observed:
            vector = observation_spec[OBSERVATION]
            shape = (*vector.shape[:-1], vector.shape[-1] + source.shape[-1])
            observation_spec[OBSERVATION] = Unbounded(shape=shape, dtype=vector.dtype, device=device)
        observation_spec[MASK] = Binary(n=source.shape[-1], shape=(*batch, source.shape[-1]), dtype=torch.bool,
                                        device=device)
        return observation_spec


class MaskedEnv(TransformedEnv):
    """The env with :class:`MaskEntry` and TorchRL's ``ActionMask`` appended. It steps through TensorDicts
    only: the array road would hand out the observation without its mask."""

    supports_tensor_steps = False

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """A random allowed action: drawn from this env's action spec, whose mask ``ActionMask`` keeps (a base
        env's own ``rand_action``, gymnasium's, knows no mask)."""
        return EnvBase.rand_action(self, tensordict)


def with_action_mask(env: EnvBase, use: MaskUse = "auto") -> EnvBase:
    """``env`` with its mask read as :class:`MaskEntry` says, or ``env`` itself where it declares none (and
    ``use`` is "auto"); ``UserError`` (path ``env.action_mask``) where a mask cannot apply: none where one is
    asked for, continuous or multi-part actions, a mask of another size than the choices."""
    from rlplug.core.actions import action_layout

    spec = env.observation_spec
    source = mask_spec(spec)
    if source is None:
        if use != "auto":
            raise UserError(f"'{use}' asks for the env's action mask, and this env has no '{MASK}' entry (a "
                            f"gymnasium Dict observation entry, or a TorchRL entry beside the observations)",
                            path="env.action_mask")
        return env
    layout = action_layout(env.action_spec, spec.ndim)
    if layout.kind != "categorical":
        raise UserError(f"the env's observation has an '{MASK}' entry, and its actions are {layout.describe()}; "
                        f"a mask applies to one Discrete action only (drop the entry, or give the env a Discrete "
                        f"action)", path="env.action_mask")
    size = spec[source].shape[spec.ndim:]
    if tuple(size) != layout.parts:
        raise UserError(f"the env's '{MASK}' entry has shape {list(size)}, and its action has {layout.parts[0]} "
                        f"choices: a mask holds one flag per choice", path="env.action_mask")
    observed = use == "observed"
    single = None
    if source[0] == OBSERVATION and not observed:
        rest = [key for key in spec[OBSERVATION].keys() if key != MASK]
        if not rest:
            raise UserError(f"the env's Dict observation holds '{MASK}' alone: give the networks something to "
                            f"read besides it", path="env")
        single = rest[0] if len(rest) == 1 else None
    elif source[0] != OBSERVATION and observed:
        vector = spec.get(OBSERVATION, None) if OBSERVATION in spec.keys() else None
        if vector is None or isinstance(vector, Composite) or vector.ndim - spec.ndim != 1:
            raise UserError("'observed' concatenates the mask to a vector 'observation', and this env has none; "
                            "name 'action_mask' in the env's in_keys instead", path="env.action_mask")
    return MaskedEnv(env, Compose(MaskEntry(source, observed, single), ActionMask()))
