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

from rlplug.core.acting import tensor_function
from rlplug.core.training import MetricMean
from rlplug.plugins.algorithms.offpolicy.base import OffPolicy
from rlplug.plugins.algorithms.offpolicy.parts import Learner, exploring, flat_target, polyak_update, target_copy


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
        values = data.get("action_value")
        index = values.argmax(-1)
        if exploring() and self.epsilon > 0:
            explore = torch.rand(index.shape, device=index.device) < self.epsilon
            index = torch.where(explore, torch.randint_like(index, values.shape[-1]), index)
        data.set("action", functional.one_hot(index, values.shape[-1]) if self.one_hot else index)
        return data


def linear_schedule(start: float, end: float, fraction: float, progress: float) -> float:
    """``start`` to ``end`` linearly over the first ``fraction`` of the run, then ``end``."""
    if fraction <= 0 or progress >= fraction:
        return end
    return start + (end - start) * progress / fraction


class DQN(OffPolicy):
    actions = "discrete"

    def build(self) -> TensorDictModuleBase:
        config = self.config
        self.network = config.q_network.build(role="q_values", **self.specs)
        self.target_network = target_copy(self.network)
        self.q = tensor_function(self.network, [self.observation_key])
        self.target_q = tensor_function(self.target_network, [self.observation_key])
        self.learners = {"q": Learner(list(self.network.parameters()), config.lr, config, self.device)}
        self.target = flat_target(self.target_network, self.learners["q"].trained)  # what polyak_update moves
        return self.network

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
        if due:  # `due` polyak steps towards the same online network are one with tau' = 1 - (1 - tau)^due
            polyak_update(self.target, self.learners["q"].trained, 1.0 - (1.0 - self.config.tau) ** due)

    def gradient_step(self, data: dict[str, torch.Tensor], metrics: MetricMean) -> torch.Tensor:
        next_observation = data["next_observation"]
        with torch.no_grad(), self.autocast():
            next_values = self.target_q(next_observation).float()
            if self.config.double:
                best = self.q(next_observation).argmax(-1, keepdim=True)
                next_value = next_values.gather(-1, best)
            else:
                next_value = next_values.max(-1, keepdim=True).values
            target = self.td_target(data, next_value)
        action = data["action"]
        index = action.argmax(-1, keepdim=True) if self.greedy.one_hot else action.reshape(-1, 1).long()
        with self.autocast():
            q = self.q(data["observation"]).float().gather(-1, index)
            loss = self.weighted_mean(functional.smooth_l1_loss(q, target, reduction="none"), data["weight"])
        grad_norm = self.learners["q"].step(loss)
        metrics.add(loss_q=loss, q_value=q.detach(), grad_norm=grad_norm)
        return q.detach() - target

    def extra_metrics(self) -> dict[str, float]:
        return {"epsilon": self.greedy.epsilon}

    def modules(self):
        return {"q_network": self.network, "target_q_network": self.target_network}
