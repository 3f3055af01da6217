"""The acting half of pytorchrl's ``Algorithm`` interface, written once for every built-in algorithm:
:meth:`Acting.acting_step` over tensors and TensorDicts, and the eight read-only numbers pytorchrl's runners read
(``gamma``, ``num_epochs``, ``mini_batch_size``, ``num_mini_batch``, ``num_test_episodes``, ``start_steps``,
``test_every``, ``update_every``), each read from the recipe key that holds it (docs/from-pytorchrl.md).

``acting_step`` runs the algorithm's own acting policy, the one collection runs (or, ``deterministic``, the one
evaluation runs): exploration noise, epsilon-greedy choices, random first actions and observation preprocessors
act as in a run. A recurrent network's hidden state (TorchRL's ``LSTMModule``/``GRUModule``, wherever in the
policy or the critic it sits) is found by TorchRL's own primers, the entries a run's env carries from step to
step, so any recurrent policy is served without code of its own here.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import NamedTuple

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictModule, TensorDictModuleBase
from torchrl.data import Composite, TensorSpec
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules.utils import get_primers_from_module

from rlplug.errors import UserError
from rlplug.networks import action_bounds, observation_key
from rlplug.plugins.algorithms.offpolicy.config import OffPolicyConfig
from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig


class Acted(NamedTuple):
    """What :meth:`Acting.acting_step` returns (pytorchrl's four values, in its order)."""

    #: the action as the policy gives it (``[*batch, ...]``)
    action: torch.Tensor
    #: the action clipped to the action space's bounds (the action itself where there are none)
    clipped_action: torch.Tensor
    #: the recurrent state after this step (empty for a policy without one, or ``rhs`` as it was given)
    rhs: TensorDictBase
    #: ``log_prob`` where the policy writes one, ``value`` where the algorithm has a state-value critic
    other: dict[str, torch.Tensor]


class Acting:
    """``acting_step`` and the numbers every algorithm reports alike; each family's mixin below adds its own."""

    policy: TensorDictModuleBase
    observation_spec: Composite
    action_spec: TensorSpec
    frames_per_batch: int
    device: str
    #: the run's ``eval.episodes`` and ``eval.every_frames`` (None for an algorithm built outside a run)
    eval_episodes: int | None
    eval_every_frames: int | None

    def networks(self) -> dict[str, torch.nn.Module]:
        raise NotImplementedError

    @torch.no_grad()
    def acting_step(self, obs: torch.Tensor | TensorDictBase, rhs: TensorDictBase | None, done: torch.Tensor,
                    deterministic: bool = False) -> Acted:
        """One action for each of ``obs`` (``[*batch, *observation]``; a TensorDict of entries for a Dict
        observation). ``rhs``: the recurrent state :attr:`Acted.rhs` returned last time (None: zeros);
        ``done`` (``[*batch]`` or ``[*batch, 1]``): where ``obs`` starts a new episode, so the state restarts
        from zeros there (TorchRL's ``is_init``). ``deterministic``: the distribution's mode (what evaluation
        takes), else a sample with the run's exploration."""
        batch = self.acting_batch(obs)
        data = TensorDict({observation_key(self.observation_spec): obs,
                           "is_init": torch.as_tensor(done).bool().reshape(*batch, 1)}, batch_size=batch)
        state = self.acting_state
        if state is not None:
            data.update(self.given_state(rhs, state, batch))
        data = data.to(self.device)
        modules = [self.policy, *self.value_critic]
        with set_exploration_type(ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM):
            for module in modules:
                module(data)
        action = data.get("action")
        bounds = action_bounds(self.observation_spec, self.action_spec)
        clipped = action if bounds is None else action.clamp(bounds[0].to(action.device), bounds[1].to(action.device))
        if state is not None:
            rhs = data.get("next").select(*state.keys(True, True))
        elif rhs is None:
            rhs = TensorDict({}, batch_size=batch)
        other = {name: data.get(key) for name, key in (("log_prob", self.log_prob_key), ("value", "state_value"))
                 if key is not None and key in data.keys()}
        return Acted(action, clipped, rhs, other)

    def acting_batch(self, obs: torch.Tensor | TensorDictBase) -> torch.Size:
        """The batch dims of ``obs``: its leading dims before one observation's shape."""
        if isinstance(obs, TensorDictBase):
            return obs.batch_size
        spec = self.observation_spec[observation_key(self.observation_spec)]
        observation_dims = spec.ndim - self.observation_spec.ndim
        return obs.shape[:obs.ndim - observation_dims]

    @staticmethod
    def given_state(rhs: TensorDictBase | None, state: Composite, batch: torch.Size) -> TensorDictBase:
        """``rhs``'s recurrent entries, or zeros where none were given; one line naming an entry it lacks."""
        if rhs is None or rhs.is_empty():
            return state.zero().expand(*batch, *state.shape)
        keys = list(state.keys(True, True))
        missing = [key for key in keys if key not in rhs.keys(True, True)]
        if missing:
            raise UserError(f"acting_step(rhs=...) has no entry {missing[0]!r}; pass the rhs the last acting_step "
                            f"returned (entries {', '.join(map(repr, keys))}), or None to start from zeros")
        return rhs.select(*keys)

    @cached_property
    def acting_state(self) -> Composite | None:
        """The recurrent state of the policy and the value critic (TorchRL's primers), or None without one."""
        specs = [primer.transform_observation_spec(Composite(shape=[]))
                 for module in (self.policy, *self.value_critic)
                 if (primer := get_primers_from_module(module, warn=False)) is not None]
        if not specs:
            return None
        state = specs[0]
        for spec in specs[1:]:
            state.update(spec)
        return state

    @cached_property
    def value_critic(self) -> list[TensorDictModuleBase]:
        """The critic writing ``state_value`` (the on-policy family's), run after the policy; none otherwise."""
        critic = self.networks().get("critic")
        return [critic] if isinstance(critic, TensorDictModuleBase) and "state_value" in critic.out_keys else []

    @cached_property
    def log_prob_key(self) -> str | None:
        """Where the policy's distribution writes the action's log-probability (None: a deterministic actor)."""
        for module in self.policy.modules():
            if isinstance(module, ProbabilisticTensorDictModule) and module.return_log_prob:
                return module.log_prob_key
        return None

    # -- the numbers every algorithm reports alike -----------------------------------------------------

    @property
    def update_every(self) -> int:
        """Frames collected (over all envs) between updates: ``frames_per_batch``."""
        return self.frames_per_batch

    @property
    def num_test_episodes(self) -> int | None:
        """Episodes per evaluation: the run's ``eval.episodes``."""
        return self.eval_episodes

    @property
    def test_every(self) -> int | None:
        """Updates between evaluations: ``eval.every_frames / frames_per_batch`` rounded up (the most there are
        between two; 0: only at the end)."""
        if self.eval_every_frames is None:
            return None
        return math.ceil(self.eval_every_frames / self.frames_per_batch)


class OnPolicyActing(Acting):
    """The on-policy family's numbers: epochs of minibatches over each collected batch; no random first steps."""

    config: OnPolicyConfig
    minibatch_size: int

    @property
    def gamma(self) -> float | None:
        """The discount of the advantage estimator (else the value-target one), None where neither has one."""
        for estimator in (self.config.advantage, self.config.value_target):
            if estimator is not None and "gamma" in estimator.params:
                return float(estimator.params["gamma"])
        return None

    @property
    def num_epochs(self) -> int:
        """Passes over each batch: ``epochs``."""
        return self.config.epochs

    @property
    def mini_batch_size(self) -> int:
        """Frames per minibatch (``minibatch_size``, or from ``num_minibatches``), at most the batch."""
        return min(self.minibatch_size, self.frames_per_batch)

    @property
    def num_mini_batch(self) -> int:
        """Minibatches per epoch."""
        return math.ceil(self.frames_per_batch / self.mini_batch_size)

    @property
    def start_steps(self) -> int:
        """0: the on-policy algorithms act with their policy from the first frame."""
        return 0


class OffPolicyActing(Acting):
    """The off-policy family's numbers: ``gradient_steps`` samples of ``batch_size`` per update, no epochs."""

    config: OffPolicyConfig

    @property
    def gamma(self) -> float:
        """``gamma``."""
        return self.config.gamma

    @property
    def num_epochs(self) -> int:
        """1: an update samples the replay buffer, it makes no passes over a batch."""
        return 1

    @property
    def mini_batch_size(self) -> int:
        """Transitions per gradient step: ``batch_size``."""
        return self.config.batch_size

    @property
    def num_mini_batch(self) -> int:
        """Gradient steps per update: ``gradient_steps``."""
        return self.config.gradient_steps

    @property
    def start_steps(self) -> int:
        """Frames of uniformly random actions at the start: ``random_frames``."""
        return self.config.random_frames
