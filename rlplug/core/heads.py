"""Heads that turn a plain torch module into the TensorDict module a role needs.

A network plugin builds the trunk (any ``nn.Module`` from observation features to :func:`output_size`
features) and calls :func:`wrap`; the head then matches the env's action spec: a categorical
distribution for discrete actions, a Gaussian for continuous ones. Or, simpler, it builds only the hidden
layers (by hand or from layer tables with :func:`rlplug.core.layers.build_layers`) and calls :func:`with_head`,
which adds the output layer, the initialisation and the head, as the built-in ``mlp`` and ``sequential`` do.

The continuous head has options every built-in network shares (defaults as in ``mlp`` and ``sequential``):

- ``log_std``: ``"parameter"``, a learnable log-std vector the same for every state (initialised to
  ``log_std_init``; the Stable-Baselines3 / CleanRL default for PPO), or ``"state"``, the network outputs a
  mean and a scale per action dimension.
- ``squash``: ``"tanh"``, a ``TanhNormal`` squashed into one env's action bounds, or ``"none"``, a plain
  (independent) Normal whose samples may leave the bounds: the env must clip them.

Roles (what the algorithm asks for; the trunk's input and output sizes follow from it):

- ``policy``: a TorchRL ``ProbabilisticActor`` (categorical or Gaussian), the shape
  :class:`rlplug.core.acting.ActorView` reads; ``value``: a ``ValueOperator`` writing ``state_value``;
- ``deterministic_policy``: a TorchRL ``Actor`` writing ``action``, squashed by tanh into the action bounds
  (left as it is where they are not finite) (DDPG, TD3);
- ``q_value``: a ``TensorDictModule`` reading the observation and ``action``, concatenated, and writing
  ``state_action_value`` (the critics of DDPG, TD3, SAC). :func:`with_head` widens the first linear layer of
  the body by the action's features, so networks sized from the observation alone work unchanged;
- ``q_values``: a ``TensorDictModule`` writing ``action_value``, one value per discrete action (DQN).

Actions (:mod:`rlplug.core.actions`): one categorical (Discrete), independent categorical parts whose
log-probabilities add up (MultiDiscrete, MultiBinary), or a Gaussian over a Box of any shape. Observations:
the ``observation`` entry is one tensor (a vector, or an image) or, for a Dict observation, a TensorDict of
named entries; an ``encoder`` (a module from one observation to features, :mod:`rlplug.core.images`) reads
what is not a vector.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torch.distributions import Categorical
from torchrl.data import Composite, OneHot, TensorSpec
from torchrl.modules import (
    Actor,
    IndependentNormal,
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
    ProbabilisticActor,
    TanhNormal,
    ValueOperator,
)

from rlplug.core.actions import ActionLayout, EventShape, IndependentCategoricals, action_layout
from rlplug.core.layers import ELEMENTWISE, HIDDEN_GAIN, Init, linear
from rlplug.core.masks import MASK, MASKED_LOGIT
from rlplug.errors import UserError

ROLES = ("policy", "value", "deterministic_policy", "q_value", "q_values")


class Role(str):
    """A role with several outputs per value: ``Role("q_value", outputs=25)`` asks for a critic of 25 quantiles
    (TQC's), ``Role("q_values", outputs=51)`` for 51 atoms per action (C51's). It is still the plain role string
    (``role == "q_value"``), so a network plugin that sizes its output with :func:`output_size` or builds with
    :func:`with_head` serves it unchanged; :func:`outputs_of` reads the count."""

    outputs: int

    def __new__(cls, name: str, outputs: int = 1) -> Role:
        role = super().__new__(cls, name)
        role.outputs = int(outputs)
        return role

    def __repr__(self) -> str:
        return f"Role({str(self)!r}, outputs={self.outputs})"


def outputs_of(role: str) -> int:
    """How many outputs each value of ``role`` has: 1 for a plain role string."""
    return getattr(role, "outputs", 1)

LogStd = Literal["state", "parameter"]
Squash = Literal["tanh", "none"]
#: Output-layer gains of the orthogonal initialisation (the CleanRL / Stable-Baselines3 convention).
HEAD_GAIN = {"policy": 0.01, "value": 1.0, "deterministic_policy": 0.01, "q_value": 1.0, "q_values": 1.0}


def observation_key(observation_spec: Composite) -> str:
    """The observation entry networks read: ``observation`` (a tensor, or a TensorDict of named entries), or
    the only entry there is."""
    if "observation" in observation_spec.keys():
        return "observation"
    keys = list(observation_spec.keys(True, True))
    if len(keys) == 1:
        return keys[0]
    raise ValueError(f"the env has several observations {keys}; rlplug's networks read one named 'observation' "
                     f"(rlplug.envs.one_observation concatenates them into it, as every env rlplug builds for a run)")


def observation_entries(observation_spec: Composite) -> dict[str, TensorSpec] | None:
    """The named entries of a Dict observation (``observation`` holding a TensorDict), each spec with the env
    batch dims; None where the observation is one tensor."""
    spec = observation_spec[observation_key(observation_spec)]
    if not isinstance(spec, Composite):
        return None
    return {key: spec[key] for key in spec.keys()}


def observation_shape(observation_spec: Composite) -> tuple[int, ...]:
    """One observation's shape, without the env batch dims (``()`` for a Dict observation: see
    :func:`observation_entries`)."""
    spec = observation_spec[observation_key(observation_spec)]
    return tuple(int(n) for n in spec.shape[observation_spec.ndim:])


def input_size(observation_spec: Composite) -> int:
    return math.prod(observation_shape(observation_spec))


def is_discrete(action_spec: TensorSpec) -> bool:
    return action_spec.domain == "discrete"


def layout_of(action_spec: TensorSpec, observation_spec: Composite | None) -> ActionLayout:
    """The action's layout; without ``observation_spec`` (which tells the env batch dims), every dim of the
    spec but the last counts as the env's."""
    if observation_spec is None:  # one-hot and continuous actions fill the last dim, an index none
        event_dims = 1 if isinstance(action_spec, OneHot) or not is_discrete(action_spec) else 0
        return action_layout(action_spec, max(len(action_spec.shape) - event_dims, 0))
    return action_layout(action_spec, observation_spec.ndim)


def action_size(action_spec: TensorSpec, observation_spec: Composite | None = None) -> int:
    """Logits for discrete actions (one per choice of each part), otherwise one value per action float. Give
    ``observation_spec`` for actions of several parts or dims (MultiDiscrete, a Box of shape [2, 3])."""
    return layout_of(action_spec, observation_spec).size


def output_size(role: str, action_spec: TensorSpec, log_std: LogStd = "state",
                observation_spec: Composite | None = None) -> int:
    """The trunk's output features: logits, a mean (and a scale unless ``log_std="parameter"``), a value,
    an action, or one value per discrete action; values (``value``, ``q_value``, ``q_values``) times the
    role's :func:`outputs_of` (quantiles, atoms), laid out value by value (``[..., action, output]`` flattened)."""
    if role in ("value", "q_value"):
        return outputs_of(role)
    layout = layout_of(action_spec, observation_spec)
    if role == "policy":
        return layout.size if layout.kind != "continuous" or log_std == "parameter" else 2 * layout.size
    if role == "deterministic_policy":
        if layout.kind != "continuous":
            raise ValueError("a deterministic policy needs continuous (Box) actions; for discrete actions use "
                             "an algorithm with a categorical policy or Q-values (dqn)")
        return layout.size
    if role == "q_values":
        if layout.kind != "categorical":
            raise ValueError(f"one Q-value per action needs one discrete action, and this env's are "
                             f"{layout.describe()}; for continuous actions use a critic of the observation and "
                             f"the action (role 'q_value': ddpg, td3, sac), for several parts a categorical policy")
        return layout.size * outputs_of(role)
    raise ValueError(f"unknown network role '{role}' (roles: {', '.join(ROLES)})")


def trunk_input_size(role: str, observation_spec: Composite, action_spec: TensorSpec) -> int:
    """The features a trunk for ``role`` reads: one observation's, plus the action's for ``q_value``."""
    size = input_size(observation_spec)
    if role == "q_value":
        size += action_size(action_spec, observation_spec)
    return size


class ConcatInputs(nn.Module):
    """``(observation, action) -> trunk(cat([encoder(observation), action], -1))``: a critic of both.

    Discrete (one-hot or index) actions are turned into float features first, actions of several dims
    (``action_dims``) flattened; ``encoder`` (None: the observation itself) turns what is not a vector into
    features.
    """

    def __init__(self, trunk: nn.Module, encoder: nn.Module | None = None, action_dims: int = 1):
        super().__init__()
        self.trunk, self.encoder, self.action_dims = trunk, encoder, action_dims

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        if self.encoder is not None:
            observation = self.encoder(observation)
        if self.action_dims != 1:
            action = action.flatten(action.ndim - self.action_dims) if self.action_dims else action.unsqueeze(-1)
        return self.trunk(torch.cat([observation, action.to(observation.dtype)], -1))


class TanhBounds(nn.Module):
    """Features squashed by tanh into ``[low, high]``: ``low + (high - low) * (tanh(x) + 1) / 2``."""

    center: torch.Tensor
    half_range: torch.Tensor

    def __init__(self, low: torch.Tensor, high: torch.Tensor):
        super().__init__()
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("half_range", (high - low) / 2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.center + self.half_range * torch.tanh(features)


def action_bounds(observation_spec: Composite, action_spec: TensorSpec) -> tuple[torch.Tensor, torch.Tensor] | None:
    """One env's finite action bounds (low, high), or None for unbounded or discrete actions."""
    if not hasattr(action_spec.space, "low"):
        return None
    first_env = (0,) * observation_spec.ndim  # the spec carries the env batch dims in front
    low, high = action_spec.space.low[first_env], action_spec.space.high[first_env]
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        return None
    return low.float(), high.float()


class StateIndependentScale(nn.Module):
    """``observation -> (loc, scale)``: the trunk gives the mean, a learnable log-std vector the scale.

    The scale is the same for every observation: ``exp(log_std)`` broadcast to the mean's shape.
    """

    def __init__(self, trunk: nn.Module, size: int, log_std_init: float = 0.0):
        super().__init__()
        self.trunk = trunk
        self.log_std = nn.Parameter(torch.full((size,), float(log_std_init)))

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc = self.trunk(observation)
        return loc, self.log_std.exp().expand_as(loc)


def share_body(policy: nn.Module, critic: nn.Module) -> None:
    """Make ``critic`` compute its value from the policy's hidden layers (one body, two heads): the critic's
    own hidden layers are replaced by the policy's, so both losses train them. Both networks must be built
    by :func:`with_head` with the same hidden layers."""
    policy_trunk, critic_trunk = _trunk(policy), _trunk(critic)
    shapes = [[tuple(p.shape) for p in layer.parameters()] for layer in list(policy_trunk)[:-1]]
    if shapes != [[tuple(p.shape) for p in layer.parameters()] for layer in list(critic_trunk)[:-1]]:
        raise ValueError("shared_body needs a policy and a critic with the same hidden layers")
    for index in range(len(policy_trunk) - 1):
        critic_trunk[index] = policy_trunk[index]


def _trunk(network: nn.Module) -> nn.Sequential:
    """The body-and-output-layer ``nn.Sequential`` :func:`with_head` builds, wherever the head put it."""
    for module in network.modules():
        if isinstance(module, nn.Sequential) and len(module) > 1 and isinstance(module[-1], nn.Linear):
            return module
    raise ValueError("shared_body needs networks built by rlplug.core.heads.with_head (mlp, sequential)")


def wrap(trunk: nn.Module, *, role: str, observation_spec: Composite, action_spec: TensorSpec,
         log_std: LogStd = "state", log_std_init: float = 0.0, squash: Squash = "tanh",
         encoder: nn.Module | None = None) -> TensorDictModule:
    """The TensorDict module for ``role`` around ``trunk`` (which outputs ``output_size(role, action_spec,
    log_std, observation_spec)`` features). ``log_std``, ``log_std_init`` and ``squash`` shape continuous
    policies only. ``encoder``: a module from one observation to the features the trunk reads (an image or
    Dict observation's), applied first; for ``q_value``, before the action joins."""
    obs = observation_key(observation_spec)
    if role == "q_value":
        if encoder is None and len(observation_shape(observation_spec)) != 1:
            raise ValueError("a critic of the observation and the action reads one-dimensional observations; "
                             "set flatten_observations in the env, or use a network that encodes images (cnn)")
        dims = len(layout_of(action_spec, observation_spec).shape)
        return TensorDictModule(ConcatInputs(trunk, encoder, dims), in_keys=[obs, "action"],
                                out_keys=["state_action_value"])
    if role not in ROLES:
        raise ValueError(f"unknown network role '{role}' (roles: {', '.join(ROLES)})")
    if encoder is not None:
        trunk = nn.Sequential(encoder, trunk)
    if role == "value":
        return ValueOperator(trunk, in_keys=[obs])
    layout = layout_of(action_spec, observation_spec)
    if role == "q_values":
        output_size(role, action_spec, observation_spec=observation_spec)  # checks there is one discrete action
        return TensorDictModule(trunk, in_keys=[obs], out_keys=["action_value"])
    if role == "deterministic_policy":
        output_size(role, action_spec, observation_spec=observation_spec)  # checks the actions are continuous
        bounds = action_bounds(observation_spec, action_spec)
        stages = [trunk, *_event_shape(layout), *([TanhBounds(*bounds)] if bounds is not None else [])]
        return Actor(nn.Sequential(*stages) if len(stages) > 1 else trunk, in_keys=[obs], out_keys=["action"],
                     spec=action_spec)
    if layout.kind != "continuous":
        logits = TensorDictModule(trunk, in_keys=[obs], out_keys=["logits"])
        if layout.kind == "parts":
            return ProbabilisticActor(logits, in_keys=["logits"], distribution_class=IndependentCategoricals,
                                      distribution_kwargs=layout.distribution_kwargs(), spec=action_spec,
                                      return_log_prob=True)
        if MASK in observation_spec.keys():  # the env's allowed actions (rlplug.core.masks): TorchRL's masked ones
            masked = MaskedOneHotCategorical if layout.one_hot else MaskedCategorical
            return ProbabilisticActor(logits, in_keys={"logits": "logits", "mask": MASK}, distribution_class=masked,
                                      distribution_kwargs={"neg_inf": MASKED_LOGIT}, spec=action_spec,
                                      return_log_prob=True)
        distribution = OneHotCategorical if layout.one_hot else Categorical
        return ProbabilisticActor(logits, in_keys=["logits"], distribution_class=distribution,
                                  spec=action_spec, return_log_prob=True)
    module: nn.Module
    if log_std == "parameter":
        module = StateIndependentScale(trunk, layout.size, log_std_init)
    elif log_std == "state":
        module = nn.Sequential(trunk, NormalParamExtractor())
    else:
        raise ValueError(f"unknown log_std '{log_std}' (options: 'state', 'parameter')")
    shaped = _event_shape(layout)
    params = TensorDictModule(nn.Sequential(module, *shaped) if shaped else module, in_keys=[obs],
                              out_keys=["loc", "scale"])
    event = {} if len(layout.shape) == 1 else {"event_dims": len(layout.shape)}
    if squash == "none":  # log_prob sums over the action dimensions, as TanhNormal's does
        return ProbabilisticActor(params, in_keys=["loc", "scale"], distribution_class=IndependentNormal,
                                  distribution_kwargs={"event_dim": event["event_dims"]} if event else None,
                                  spec=action_spec, return_log_prob=True)
    if squash != "tanh":
        raise ValueError(f"unknown squash '{squash}' (options: 'tanh', 'none')")
    tanh_bounds: dict[str, torch.Tensor] = {}
    if hasattr(action_spec.space, "low"):  # one env's bounds: the spec carries the env batch dims in front
        first_env = (0,) * observation_spec.ndim
        tanh_bounds = {"low": action_spec.space.low[first_env], "high": action_spec.space.high[first_env]}
    return ProbabilisticActor(params, in_keys=["loc", "scale"], distribution_class=TanhNormal,
                              distribution_kwargs={**tanh_bounds, **event}, spec=action_spec, return_log_prob=True)


def _event_shape(layout: ActionLayout) -> list[nn.Module]:
    """The reshaping of flat outputs into a continuous action of several dims (none for a vector)."""
    return [EventShape(layout.shape)] if len(layout.shape) != 1 else []


def widen_input(trunk: nn.Sequential, extra: int, *, init: Init, gain: float) -> None:
    """Replace ``trunk``'s first linear layer by a fresh one reading ``extra`` more input features (the
    action, for critics of the observation and the action). Only element-wise layers may come before it."""
    for index, layer in enumerate(trunk):
        if isinstance(layer, nn.Linear):
            trunk[index] = linear(layer.in_features + extra, layer.out_features, init=init, gain=gain,
                                  bias=layer.bias is not None)
            return
        if not isinstance(layer, (nn.Flatten, *ELEMENTWISE)):
            raise UserError(f"a critic of the observation and the action concatenates them before its first "
                            f"Linear layer; a {type(layer).__name__} before it would read the observation "
                            f"alone: move it after the first Linear")
    raise UserError("a critic of the observation and the action needs a Linear layer")


def with_head(body: Sequence[nn.Module], features: int, *, role: str, observation_spec: Composite,
              action_spec: TensorSpec, init: Init = "orthogonal", log_std: LogStd = "parameter",
              log_std_init: float = 0.0, squash: Squash = "tanh", device: str = "cpu",
              encoder: nn.Module | None = None) -> TensorDictModule:
    """The network for ``role``: the ``body`` layers (ending in ``features`` features per observation), a
    linear output layer sized by :func:`output_size` (orthogonal gain ``HEAD_GAIN[role]``), the head
    :func:`wrap` puts on it, all on ``device``. For ``q_value`` the first linear layer is widened to read
    the action's features too (the body is sized from the observation). ``encoder``: a module from one
    observation to the features ``body`` reads (:func:`wrap`)."""
    head = linear(features, output_size(role, action_spec, log_std, observation_spec), init=init,
                  gain=HEAD_GAIN[role])
    if encoder is not None and role != "q_value":  # one Sequential, so that shared_body shares the encoder too
        body, encoder = [encoder, *body], None
    trunk = nn.Sequential(*body, head)
    if role == "q_value":
        hidden = any(isinstance(layer, nn.Linear) for layer in body)
        widen_input(trunk, action_size(action_spec, observation_spec), init=init,
                    gain=HIDDEN_GAIN if hidden else HEAD_GAIN[role])
    network = wrap(trunk, role=role, observation_spec=observation_spec, action_spec=action_spec,
                   log_std=log_std, log_std_init=log_std_init, squash=squash, encoder=encoder)
    return network.to(torch.device(device))
