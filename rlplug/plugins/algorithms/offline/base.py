"""Offline learning on the off-policy family's update: the dataset is the replay buffer.

:class:`Offline` goes before an :class:`~rlplug.plugins.algorithms.offpolicy.base.OffPolicy` subclass. In an
offline run (:mod:`rlplug.run.offline`) its ``learn_offline`` installs the dataset as the replay
(:class:`DatasetReplay`) and makes an update's batch the samples it learns from, ``gradient_steps x
batch_size``; the batches the run hands it then hold no steps, and nothing is stored. Without a dataset it is
the plain off-policy algorithm (IQL and CQL go on online so).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rlplug.core.heads import action_bounds
from rlplug.errors import UserError
from rlplug.plugins.algorithms.offpolicy.base import OffPolicy

#: how far inside the bounds (a fraction of the half-range) a tanh-squashed policy's dataset actions are moved
SQUASH_MARGIN = 1e-3


def squashes(actor: Any) -> bool:
    """Whether ``actor`` acts with a tanh-squashed Gaussian (TorchRL's ``TanhNormal``)."""
    from torchrl.modules import TanhNormal

    modules = actor.modules() if isinstance(actor, torch.nn.Module) else ()
    return any(getattr(module, "distribution_class", None) is TanhNormal for module in modules)


def inside_bounds(action: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """``action`` clamped to ``SQUASH_MARGIN`` of the half-range inside ``[low, high]``: a tanh-squashed policy's
    log-probability of an action at a bound is ``atanh(1)``'s (TorchRL's safe tanh makes it about -90, with a
    gradient as large), so a dataset whose actions touch the bounds (a policy saturated, noise clipped) would
    have those few samples drive the likelihood (IQL's actor loss, CQL's behaviour-cloning term)."""
    margin = SQUASH_MARGIN * (high - low) / 2
    low, high = (low + margin).to(action), (high - margin).to(action)
    return torch.maximum(torch.minimum(action, high), low)


class DatasetReplay:
    """A dataset's transitions as a replay buffer (:class:`rlplug.registry.protocols.ReplayBuffer`): uniform
    samples, drawn from torch's generator (whose state checkpoints keep); nothing stored, and nothing in
    checkpoints, since the run reads the dataset again when it is rebuilt."""

    def __init__(self, transitions: TensorDictBase):
        self.transitions = transitions

    def extend(self, batch: TensorDictBase) -> Any:
        raise TypeError("an offline run's replay is its dataset: nothing is stored into it")

    def sample(self, batch_size: int) -> TensorDictBase:
        index = torch.randint(len(self.transitions), (batch_size,), device=self.transitions.device)
        return self.transitions[index]

    def __len__(self) -> int:
        return len(self.transitions)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Offline(OffPolicy):
    """An off-policy algorithm that may learn from a dataset alone."""

    #: whether this run learns from a dataset (set by :meth:`learn_offline`)
    offline = False

    def learn_offline(self, transitions: TensorDictBase) -> None:
        config = self.config
        if len(transitions) < config.batch_size:
            raise UserError(f"the dataset holds {len(transitions)} transitions, fewer than one batch of "
                            f"{config.batch_size}; record more or lower it", path="algorithm.batch_size")
        reward = transitions.get(("next", "reward")) * config.reward_scale + config.reward_offset
        if config.reward_clip is not None:  # the shaping collected rewards get (replay_transitions)
            reward = reward.clamp(-config.reward_clip, config.reward_clip)
        transitions.set(("next", "reward"), reward)
        bounds = action_bounds(self.specs["observation_spec"], self.specs["action_spec"])
        if bounds is not None and transitions.get("action").is_floating_point() and squashes(
                getattr(self, "actor", None)):
            transitions.set("action", inside_bounds(transitions.get("action"), *bounds))
        self.install_replay(DatasetReplay(transitions.to(self.device)))
        self.offline = True
        self.frames_per_batch = config.batch_size * config.gradient_steps
        if self.preprocessor is not None:  # its statistics are the dataset's, taken in once
            self.preprocessor.train()
            self.preprocessor(transitions.get("observation").float())
            self.preprocessor.eval()

    def store(self, batch: TensorDictBase) -> None:
        if not self.offline:
            super().store(batch)

    def load_state_dict(self, state: dict) -> None:
        if self.offline:  # the dataset is read again, never kept; an online run's buffer is not loaded into it
            state = {**state, "replay_buffer": {}}
        super().load_state_dict(state)
