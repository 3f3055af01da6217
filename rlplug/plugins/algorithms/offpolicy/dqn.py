"""DQN (Mnih et al. 2015) as Stable-Baselines3 has it: one Q-value per discrete action, epsilon-greedy
exploration on a linear schedule, a target network, the Huber loss; ``double = true`` for double DQN
(van Hasselt et al. 2016).

One update: the batch is stored; the target network moves towards the online one (``tau = 1``: a copy) once
for every ``target_update_interval`` frames collected since the last update; then ``gradient_steps`` steps
regressing ``Q(s, a)`` on ``r + gamma * (1 - terminated) * Q'(s', argmax_a' Q(s', a'))``, where the argmax
is the target network's own (plain DQN) or the online network's (double DQN).
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch.nn import functional
from torchrl.data import OneHot

from rlplug.core.actions import action_layout
from rlplug.errors import UserError
from rlplug.plugins.algorithms.offpolicy.base import OffPolicy
from rlplug.plugins.algorithms.offpolicy.config import DQNConfig
from rlplug.plugins.algorithms.offpolicy.parts import build_network, exploring


class EpsilonGreedy(TensorDictModuleBase):
    """``action_value -> action``: the greedy action, replaced by a uniformly random one with probability
    :attr:`epsilon` while exploring (never in deterministic evaluation). Actions are one-hot vectors or
    indices, as the env's action spec has them."""

    def __init__(self, action_spec, epsilon: float):
        super().__init__()
        self.in_keys, self.out_keys = ["action_value"], ["action"]
        self.one_hot = isinstance(action_spec, OneHot)
        self.epsilon = epsilon

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        data.set("action", self.act_on(data.get("action_value")))
        return data

    def act_on(self, values: torch.Tensor) -> torch.Tensor:
        """The action for ``[..., actions]`` Q-values (what :meth:`forward` writes; the collector's array road
        and seeds acting together call it directly)."""
        index = values.argmax(-1)
        if exploring() and self.epsilon > 0:
            explore = torch.rand(index.shape, device=index.device) < self.epsilon
            index = torch.where(explore, torch.randint_like(index, values.shape[-1]), index)
        return functional.one_hot(index, values.shape[-1]) if self.one_hot else index


def linear_schedule(start: float, end: float, fraction: float, progress: float) -> float:
    """``start`` to ``end`` linearly over the first ``fraction`` of the run, then ``end``."""
    if fraction <= 0 or progress >= fraction:
        return end
    return start + (end - start) * progress / fraction


class DQN(OffPolicy):
    config: DQNConfig
    actions = "discrete"
    learner_names = ("q",)

    def check_actions(self, action_spec) -> None:
        super().check_actions(action_spec)
        layout = action_layout(action_spec, self.observation_spec.ndim)
        if layout.kind != "categorical":
            raise UserError(f"dqn learns one Q-value per choice of one Discrete action, and this env's actions are "
                            f"{layout.describe()}; use an on-policy algorithm (ppo), whose policy acts in each "
                            f"part", path="algorithm")

    def build(self) -> TensorDictModuleBase:
        self.network = build_network(self.config.q_network, role="q_values", **self.specs)
        return self.network

    def trained_networks(self):
        return {"q_network": self.network}

    def exploration_stages(self) -> list[TensorDictModuleBase]:
        self.greedy = EpsilonGreedy(self.action_spec, self.config.epsilon_start)
        return [self.greedy]

    @property
    def epsilon(self) -> float:
        config = self.config
        return linear_schedule(config.epsilon_start, config.epsilon_end, config.exploration_fraction,
                               self.frames / self.total_frames)

    def follow_schedules(self) -> dict[str, float]:
        self.greedy.epsilon = self.epsilon
        return super().follow_schedules()

    def before_update(self, frames_before: int) -> None:
        interval = self.config.target_update_interval
        due = self.frames // interval - frames_before // interval
        if due and self.update_targets is not None:
            # `due` polyak steps towards the same online network are one with tau' = 1 - (1 - tau)^due
            self.update_targets(1.0 - (1.0 - self.config.tau) ** due)

    def moves_targets(self) -> bool:
        return False  # by frames collected, in before_update

    def extra_metrics(self) -> dict[str, float]:
        return {"epsilon": self.greedy.epsilon}
