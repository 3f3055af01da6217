"""Tensor-level views of TorchRL policy and value modules, for the hot loops.

A TorchRL ``ProbabilisticActor`` is a parameter module followed by a distribution module; calling it on a
TensorDict costs more than the arithmetic does for small networks (measured in BENCHMARKS.md).
The views here call the same modules and the same distribution class directly on tensors, so collection
and the loss pay only for the arithmetic. Nothing is copied: the view shares the module's parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from tensordict.nn import ProbabilisticTensorDictModule, TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch.distributions import Categorical, Distribution, OneHotCategorical, TanhTransform
from torchrl.modules import MaskedOneHotCategorical, TanhNormal
from torchrl.modules import OneHotCategorical as TorchRLOneHotCategorical

from rlplug.core.masks import masked_logits
from rlplug.core.observations import CRITIC_OBSERVATION
from rlplug.registry import protocols
from rlplug.registry.protocols import capability

CATEGORICALS = (Categorical, OneHotCategorical)
#: Categoricals whose samples are one-hot vectors (TorchRL's derives from the index-valued ``Categorical``).
ONE_HOT = (OneHotCategorical, TorchRLOneHotCategorical, MaskedOneHotCategorical)


@dataclass
class ActorView:
    """An actor's distribution as a function of its one observation tensor."""

    params_module: torch.nn.Module
    observation_key: str
    param_keys: tuple[str, ...]
    distribution_class: type
    distribution_kwargs: dict
    action_key: str
    log_prob_key: str
    #: the entry the distribution's ``mask`` is read from (the env's ``action_mask``: TorchRL's
    #: ``MaskedCategorical``), or None; every method takes the mask beside the observation where it is set
    mask_key: str | None = None
    #: whether the head is a categorical over logits, which :meth:`act` (and the on-policy losses) compute
    #: directly from the logits: the same numbers as the distribution's, at a quarter of the cost
    categorical: bool = field(init=False)
    #: whether actions are one-hot vectors (TorchRL's layout for gymnasium's Discrete spaces)
    one_hot: bool = field(init=False)
    #: a TanhNormal head's sampling as formulas (:class:`TanhNormalSampling`), or None
    tanh_normal: TanhNormalSampling | None = field(init=False)

    def __post_init__(self) -> None:
        # read once, not per call: the update's hot loop reads them every minibatch
        self.categorical = self.param_keys == ("logits",) and issubclass(self.distribution_class, CATEGORICALS)
        self.one_hot = issubclass(self.distribution_class, ONE_HOT)
        self.tanh_normal = TanhNormalSampling.of(self.distribution_class, self.distribution_kwargs) \
            if self.param_keys == ("loc", "scale") and not self.mask_key else None

    @classmethod
    def of(cls, actor: TensorDictModuleBase) -> ActorView:
        """The view of ``actor``, or ``TypeError`` saying what shape of actor is supported."""
        modules = list(getattr(actor, "module", []))
        if (len(modules) != 2 or not isinstance(modules[0], TensorDictModule)
                or not isinstance(modules[1], ProbabilisticTensorDictModule) or len(modules[0].in_keys) != 1):
            raise TypeError("the policy must be a TorchRL ProbabilisticActor of one parameter module reading one "
                            "observation, then a distribution (what rlplug.core.heads.wrap builds)")
        params, probabilistic = modules
        keys = [k[-1] if isinstance(k, tuple) else k for k in probabilistic.dist_keys]
        sources = dict(zip(keys, probabilistic.in_keys))
        mask_key = sources.pop("mask", None)
        return cls(
            params_module=params.module, observation_key=params.in_keys[0],
            param_keys=tuple(sources), distribution_class=probabilistic.distribution_class,
            distribution_kwargs=dict(probabilistic.distribution_kwargs or {}),
            action_key=probabilistic.out_keys[0], log_prob_key=probabilistic.log_prob_key, mask_key=mask_key,
        )

    def distribution(self, observation: torch.Tensor, mask: torch.Tensor | None = None) -> Distribution:
        params = self.params_module(observation)
        params = params if isinstance(params, tuple) else (params,)
        masked = {"mask": self.required(mask)} if self.mask_key else {}
        return self.distribution_class(**dict(zip(self.param_keys, params)), **masked, **self.distribution_kwargs)

    def rsample_and_log_prob(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action and its log-probability, scored on the same pre-tanh sample where the
        distribution has one (TanhNormal's ``rsample_and_log_prob``, its numbers computed without building it)."""
        if self.tanh_normal is not None:
            loc, scale = self.params_module(observation)
            return self.tanh_normal.rsample_and_log_prob(loc, scale)
        dist = self.distribution(observation)
        if hasattr(dist, "rsample_and_log_prob"):
            return dist.rsample_and_log_prob()
        action = dist.rsample()
        return action, dist.log_prob(action)

    def required(self, mask: torch.Tensor | None) -> torch.Tensor:
        """``mask`` as the head reads it; a masked head acting without one would choose disallowed actions."""
        if mask is None:
            raise ValueError(f"this policy chooses among the actions its env allows, and was given no "
                             f"'{self.mask_key}'")
        return mask.bool()

    def act(self, observation: torch.Tensor, deterministic: bool = False,
            mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """An action and its log-probability (the mode's, when deterministic); ``mask``: the allowed actions,
        for a head with a :attr:`mask_key`."""
        if self.categorical:
            index, log_prob, choices = self.choose(observation, deterministic, mask)
            return (torch.nn.functional.one_hot(index, choices) if self.one_hot else index), log_prob
        if self.tanh_normal is not None and not deterministic:
            loc, scale = self.params_module(observation)
            return self.tanh_normal.sample_and_log_prob(loc, scale)
        dist = self.distribution(observation, mask)
        action = deterministic_sample(dist) if deterministic else dist.sample()
        return action, dist.log_prob(action)

    def logits(self, observation: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """A categorical head's logits, the disallowed choices' at ``MASKED_LOGIT`` where it is masked (the
        head's ``MaskedCategorical`` numbers)."""
        logits = self.params_module(observation)
        return masked_logits(logits, self.required(mask)) if self.mask_key else logits

    def choose(self, observation: torch.Tensor, deterministic: bool = False,
               mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """A categorical head's choice: the chosen index (what gymnasium takes, one-hot or not), its
        log-probability from the logits' log-softmax, and the number of choices."""
        log_probs = self.logits(observation, mask).log_softmax(-1)
        if deterministic:
            index = log_probs.argmax(-1, keepdim=True)
        else:
            index = torch.multinomial(log_probs.exp().reshape(-1, log_probs.shape[-1]), 1)
            index = index.reshape(*log_probs.shape[:-1], 1)
        return index.squeeze(-1), log_probs.gather(-1, index).squeeze(-1), log_probs.shape[-1]


class TanhNormalSampling:
    """TorchRL's ``TanhNormal`` (without location scaling, with its safe tanh: the way rlplug's heads build it)
    sampled and scored as formulas on ``loc`` and ``scale``: the same noise, actions and log-probabilities as the
    distribution's, without building it and its transforms each call, which for small networks cost more than the
    arithmetic (tests/test_tanh_normal.py holds the two equal). The tanh is TorchRL's safe one, kept off 1 by
    float32's resolution, as a plain clamp: the same numbers without an autograd Function's per-call cost."""

    def __init__(self, low: torch.Tensor, high: torch.Tensor, event_dims: int | None):
        self.centre, self.half_range = (high + low) / 2, (high - low) / 2
        self.unit = bool((low == -1).all() and (high == 1).all())  # TorchRL adds no affine map then
        self.log_half_range = self.half_range.abs().log()
        self.event_dims = event_dims
        self.tanh = TanhTransform()  # its log-Jacobian is the one TorchRL's safe tanh inherits
        #: (centre, half_range, log_half_range) by device, each moved there once, not on every call
        self.moved: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def bounds_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``centre``, ``half_range`` and ``log_half_range`` on ``device``."""
        if device not in self.moved:
            self.moved[device] = (self.centre.to(device), self.half_range.to(device), self.log_half_range.to(device))
        return self.moved[device]

    @classmethod
    def of(cls, distribution_class: type, kwargs: dict) -> TanhNormalSampling | None:
        """The sampling of ``distribution_class(**kwargs)``; None unless it is TorchRL's TanhNormal read so."""
        if distribution_class is not TanhNormal or set(kwargs) - {"low", "high", "event_dims"}:
            return None
        low, high = (torch.as_tensor(kwargs.get(key, default), dtype=torch.get_default_dtype())
                     for key, default in (("low", -1.0), ("high", 1.0)))
        return cls(low, high, kwargs.get("event_dims"))

    @staticmethod
    def noise(shape: torch.Size, like: torch.Tensor) -> torch.Tensor:
        """Standard normal noise: the numbers torch's ``Normal`` draws from the same generator state, but out of
        place, which ``torch.vmap(randomness="different")`` (seeds trained together) gives each seed its own of."""
        return torch.randn(shape, dtype=like.dtype, device=like.device)

    def noise_for(self, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """:meth:`noise` of the distribution's shape (``torch.broadcast_shapes`` only where the two differ: it is
        slow to call)."""
        return self.noise(loc.shape if loc.shape == scale.shape else torch.broadcast_shapes(loc.shape, scale.shape),
                          loc)

    def rsample_and_log_prob(self, loc: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``TanhNormal.rsample_and_log_prob``: a reparameterised action scored on the pre-tanh value drawn."""
        noise = self.noise_for(loc, scale)
        preimage = loc + noise * scale
        log_density = -0.5 * noise.pow(2) - scale.log() - HALF_LOG_2PI
        return self.squashed(preimage), self.summed(log_density - self.log_jacobian(preimage))

    def sample_and_log_prob(self, loc: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``TanhNormal.sample()``, then ``log_prob`` of that action (what a ProbabilisticActor records): scored
        on the pre-tanh value its inverse maps recover from the action, as TorchRL's ``log_prob`` is."""
        with torch.no_grad():
            action = self.squashed(loc + self.noise_for(loc, scale) * scale)
        return action, self.log_prob(loc, scale, action)

    def log_prob(self, loc: torch.Tensor, scale: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``TanhNormal.log_prob(action)``: the action's pre-tanh value recovered by the inverse maps (TorchRL's
        safe atanh), scored by the normal and the log-Jacobian there."""
        if self.unit:
            squashed = action
        else:
            centre, half_range, _ = self.bounds_on(action.device)
            squashed = (action - centre) / half_range
        limit = safe_tanh_limit(squashed.dtype)
        preimage = squashed.clamp(-limit, limit).atanh()
        log_density = -((preimage - loc) ** 2) / (2 * scale.pow(2)) - scale.log() - HALF_LOG_2PI
        return self.summed(log_density - self.log_jacobian(preimage))

    def squashed(self, preimage: torch.Tensor) -> torch.Tensor:
        """The action of a pre-tanh value: TorchRL's safe tanh, then the affine map onto the bounds."""
        limit = safe_tanh_limit(preimage.dtype)
        squashed = preimage.tanh().clamp(-limit, limit)
        if self.unit:
            return squashed
        centre, half_range, _ = self.bounds_on(preimage.device)
        return centre + half_range * squashed

    def log_jacobian(self, preimage: torch.Tensor) -> torch.Tensor:
        """log |d action / d preimage| per action dimension."""
        log_jacobian = self.tanh.log_abs_det_jacobian(preimage, preimage)  # reads only its first argument
        return log_jacobian if self.unit else log_jacobian + self.bounds_on(preimage.device)[2]

    def summed(self, log_prob: torch.Tensor) -> torch.Tensor:
        """Summed over the action's dimensions (TanhNormal's ``event_dims``)."""
        event_dims = min(1, log_prob.ndim) if self.event_dims is None else self.event_dims
        return log_prob.sum(tuple(range(-event_dims, 0))) if event_dims else log_prob


#: log(sqrt(2 pi)), the normal density's constant
HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))


@functools.cache
def safe_tanh_limit(dtype: torch.dtype) -> float:
    """Where TorchRL's safe tanh stops short of 1: the dtype's resolution below it."""
    return 1.0 - float(torch.finfo(dtype).resolution)


def deterministic_sample(dist: Distribution) -> torch.Tensor:
    sample = getattr(dist, "deterministic_sample", None)
    return sample if sample is not None else dist.mode


def value_input(critic: TensorDictModuleBase | None, observation_key: Any) -> Any:
    """The entry a critic reads: an asymmetric critic's ``critic_observation`` (``[algorithm.critic] in_keys``),
    else the policy's ``observation_key``."""
    return CRITIC_OBSERVATION if CRITIC_OBSERVATION in getattr(critic, "in_keys", ()) else observation_key


def tensor_function(network: TensorDictModuleBase, in_keys: list) -> Callable[..., torch.Tensor]:
    """``network`` as a function of tensors (in ``in_keys`` order) returning its first output: its own torch
    module when it is a plain TensorDictModule reading exactly those keys, otherwise through a TensorDict."""
    if isinstance(network, TensorDictModule) and list(network.in_keys) == list(in_keys) \
            and not isinstance(network, TensorDictSequential):
        return network.module
    out_key = network.out_keys[0]

    def through_tensordict(*tensors: torch.Tensor) -> torch.Tensor:
        data = TensorDict(dict(zip(in_keys, tensors)), batch_size=tensors[0].shape[:-1])
        return network(data).get(out_key)

    return through_tensordict


class ArrayActor:
    """Acting on numpy observations during collection: gymnasium-format actions and their log-probabilities
    (None for a policy without them) as numpy arrays, and the batch keys they are recorded under.
    :meth:`for_policy` picks the fastest actor that computes what ``policy`` does, or None."""

    observation_key: str
    action_key: str
    log_prob_key: str | None
    #: whether the batch records actions one-hot (TorchRL's layout for gymnasium's Discrete spaces)
    one_hot: bool = False

    @staticmethod
    def for_policy(policy: TensorDictModuleBase, device: torch.device | str, seed: int) -> ArrayActor | None:
        try:
            view = ActorView.of(policy)
        except TypeError:
            try:
                return ChainArrayActor(policy, device)
            except TypeError:
                return None
        return TorchArrayActor(view, device)

    def _keys_of(self, view: ActorView) -> None:
        self.observation_key, self.action_key, self.log_prob_key = view.observation_key, view.action_key, \
            view.log_prob_key
        self.one_hot = view.one_hot

    def act(self, observation: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def seed(self, seed: int) -> None:
        """Restart the sampling noise (where it is the actor's own, not torch's global generator)."""


class TorchArrayActor(ArrayActor):
    """The policy's torch modules, fed and read as numpy arrays."""

    def __init__(self, view: ActorView, device: torch.device | str):
        self.view, self.device = view, torch.device(device)
        self._keys_of(view)

    @torch.inference_mode()
    def act(self, observation: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray]:
        observation_tensor = torch.from_numpy(observation).to(self.device)
        if self.view.categorical:  # the index gymnasium takes, never made one-hot only to be read back
            index, log_prob, _ = self.view.choose(observation_tensor, deterministic)
            return index.cpu().numpy(), log_prob.cpu().numpy()
        action, log_prob = self.view.act(observation_tensor, deterministic)
        return env_action(action, self.view.one_hot), log_prob.cpu().numpy()


class ChainArrayActor(ArrayActor):
    """An acting network followed by stages that each turn what the one before wrote into the action or change it
    (exploration noise, random actions, DQN's epsilon-greedy choice among Q-values): the network's own torch
    module on the observation tensor, then each stage's ``act_on``, the same arithmetic as the TensorDict modules
    without a TensorDict per step. The network is deterministic (no log-probability), or a ProbabilisticActor (its
    :class:`ActorView`'s action, and the log-probability of that action as the actor wrote it, whatever the
    stages then made of the action: SAC's random first frames). Where the last stage's actions are one-hot (its
    ``one_hot``: :meth:`rlplug.registry.protocols.Noise.act_on`), the env is handed their index."""

    log_prob_key: str | None = None
    #: the view of a ProbabilisticActor first stage, or None for a deterministic network
    view: ActorView | None = None
    #: the network's torch module (the view's parameter module, for a probabilistic one)
    module: torch.nn.Module

    def __init__(self, policy: TensorDictModuleBase, device: torch.device | str):
        actor, *rest = policy_stages(policy)
        try:
            self.view = ActorView.of(actor)
        except TypeError:
            self.view = None
        if self.view is not None:
            self._keys_of(self.view)  # its observation, action and log-probability keys, its actions' layout
            self.module, writes = self.view.params_module, [self.view.action_key]
        else:
            plain = isinstance(actor, TensorDictModule) and not isinstance(actor, TensorDictSequential) \
                and not getattr(actor, "safe", False)  # a safe module projects onto its spec: not on this road
            if not plain or len(actor.in_keys) != 1 or len(actor.out_keys) != 1:
                raise TypeError(CHAIN_SHAPE)
            self.module, writes = actor.module, list(actor.out_keys)
            self.observation_key, self.action_key = actor.in_keys[0], writes[0]
        masked = self.view is not None and self.view.mask_key is not None  # the stages would need the mask too
        if masked or not all(capability(stage, protocols.Noise.act_on) for stage in rest) \
                or not relayed(writes, rest):
            raise TypeError(CHAIN_SHAPE)
        self.stages, self.device = rest, torch.device(device)
        if rest:  # the last stage writes the action, in the layout it declares
            self.action_key = rest[-1].out_keys[0]
            self.one_hot = bool(capability(rest[-1], protocols.Noise.one_hot))

    def first_action(self, observation: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The network's action on ``observation`` (and its log-probability, for a probabilistic one)."""
        if self.view is not None:
            return self.view.act(observation, deterministic)
        return self.module(observation), None

    @torch.no_grad()
    def act(self, observation: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        action, log_prob = self.first_action(torch.from_numpy(observation).to(self.device), deterministic)
        for stage in self.stages:
            action = stage.act_on(action)
        return env_action(action, self.one_hot), None if log_prob is None else log_prob.cpu().numpy()


CHAIN_SHAPE = ("the policy must be a TensorDictModule reading one observation (or a ProbabilisticActor of one "
               "unmasked distribution), then stages with act_on each reading what the one before wrote")


def policy_stages(policy: TensorDictModuleBase) -> list[TensorDictModuleBase]:
    """The modules a policy runs one after another: a TensorDictSequential's, else the policy alone."""
    return list(policy.module) if isinstance(policy, TensorDictSequential) else [policy]


def relayed(writes: list, stages: list[TensorDictModuleBase]) -> bool:
    """Whether each of ``stages`` reads exactly the one key written before it (by the network: ``writes``)."""
    keys = [writes, *(list(stage.out_keys) for stage in stages)]
    return all(len(before) == 1 and list(getattr(stage, "in_keys", [])) == before
               for before, stage in zip(keys, stages))


def env_action(action: torch.Tensor, one_hot: bool) -> np.ndarray:
    """An action tensor as gymnasium takes it: the index of a one-hot vector."""
    return (action.argmax(-1) if one_hot else action).cpu().numpy()
