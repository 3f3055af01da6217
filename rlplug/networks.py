"""Heads that turn a plain torch module into the TensorDict module a role needs.

A network plugin builds the trunk (any ``nn.Module`` from observation features to :func:`output_size`
features) and calls :func:`wrap`; the head then matches the env's action spec: a categorical
distribution for discrete actions, a Gaussian (tanh-squashed into the bounds) for continuous ones.
"""

from __future__ import annotations

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torch.distributions import Categorical
from torchrl.data import Composite, OneHot, TensorSpec
from torchrl.modules import OneHotCategorical, ProbabilisticActor, TanhNormal, ValueOperator


ROLES = ("policy", "value")


def observation_key(observation_spec: Composite) -> str:
    """The observation entry networks read: ``observation``, or the only entry there is."""
    keys = list(observation_spec.keys(True, True))
    if "observation" in keys:
        return "observation"
    if len(keys) == 1:
        return keys[0]
    raise ValueError(f"the env has several observations {keys}; rlplug's networks read one named 'observation'")


def input_size(observation_spec: Composite) -> int:
    spec = observation_spec[observation_key(observation_spec)]
    return int(torch.Size(spec.shape[observation_spec.ndim:]).numel())


def is_discrete(action_spec: TensorSpec) -> bool:
    return action_spec.domain == "discrete"


def action_size(action_spec: TensorSpec) -> int:
    """Logits for discrete actions (one per choice), otherwise one value per action dimension."""
    if is_discrete(action_spec):
        return int(action_spec.space.n)
    return int(action_spec.shape[-1])


def output_size(role: str, action_spec: TensorSpec) -> int:
    if role == "policy":
        size = action_size(action_spec)
        return size if is_discrete(action_spec) else 2 * size  # mean and scale per dimension
    if role == "value":
        return 1
    raise ValueError(f"unknown network role '{role}' (roles: {', '.join(ROLES)})")


def wrap(trunk: nn.Module, *, role: str, observation_spec: Composite, action_spec: TensorSpec) -> TensorDictModule:
    """The TensorDict module for ``role`` around ``trunk``."""
    obs = observation_key(observation_spec)
    if role == "value":
        return ValueOperator(trunk, in_keys=[obs])
    if is_discrete(action_spec):
        logits = TensorDictModule(trunk, in_keys=[obs], out_keys=["logits"])
        distribution = OneHotCategorical if isinstance(action_spec, OneHot) else Categorical
        return ProbabilisticActor(logits, in_keys=["logits"], distribution_class=distribution,
                                  spec=action_spec, return_log_prob=True)
    params = TensorDictModule(nn.Sequential(trunk, NormalParamExtractor()), in_keys=[obs], out_keys=["loc", "scale"])
    bounds = {}
    if hasattr(action_spec.space, "low"):  # one env's bounds: the spec carries the env batch dims in front
        first_env = (0,) * observation_spec.ndim
        bounds = {"low": action_spec.space.low[first_env], "high": action_spec.space.high[first_env]}
    return ProbabilisticActor(params, in_keys=["loc", "scale"], distribution_class=TanhNormal,
                              distribution_kwargs=bounds, spec=action_spec, return_log_prob=True)
