"""DQN (Mnih et al. 2015) as Stable-Baselines3 has it: one Q-value per discrete action, epsilon-greedy
exploration on a linear schedule, a target network, the Huber loss; ``double = true`` for double DQN
(van Hasselt et al. 2016).

One update: the batch is stored; the target network moves towards the online one (``tau = 1``: a copy) once
for every ``target_update_interval`` frames collected since the last update; then ``gradient_steps`` steps
regressing ``Q(s, a)`` on ``r + gamma * (1 - terminated) * Q'(s', argmax_a' Q(s', a'))``, where the argmax
is the target network's own (plain DQN) or the online network's (double DQN).

Here: the algorithm (:class:`DQN`), rlplug's loss (:class:`DQNObjective`, ``dqn-loss``) and the builds of both
losses a recipe may choose (:func:`objective`, :func:`torchrl_loss`: TorchRL's ``DQNLoss``).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch.nn import functional
from torchrl.data import OneHot
from torchrl.objectives import LossModule

from rlplug.core.acting import tensor_function
from rlplug.core.actions import action_layout
from rlplug.core.masks import MASK, masked_values, random_allowed
from rlplug.core.module_values import BufferedValue
from rlplug.errors import UserError
from rlplug.plugins.algorithms.networks import build_network
from rlplug.plugins.algorithms.offpolicy.base import OffPolicy
from rlplug.plugins.algorithms.offpolicy.config import DQNConfig
from rlplug.plugins.algorithms.offpolicy.losses import Sample, polyak_update, target_copy, with_learners
from rlplug.plugins.algorithms.offpolicy.parts import exploring
from rlplug.registry.networks import QNetworks


class EpsilonGreedy(TensorDictModuleBase):
    """``action_value -> action``: the greedy action, replaced by a uniformly random one with probability
    :attr:`epsilon` while exploring (never in deterministic evaluation). Actions are one-hot vectors or
    indices, as the env's action spec has them. With ``masked``, both choose among the actions the env's
    ``action_mask`` allows (the greedy one by TorchRL's ``QValueModule`` rule, :func:`masked_values`)."""

    #: float64 keeps the recipe's value exact
    epsilon = BufferedValue("scheduled_epsilon", torch.float64)

    def __init__(self, action_spec, epsilon: float, masked: bool = False):
        super().__init__()
        self.in_keys, self.out_keys = ["action_value", *([MASK] if masked else [])], ["action"]
        self.one_hot = isinstance(action_spec, OneHot)
        self.masked = masked
        self.epsilon = float(epsilon)

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        data.set("action", self.act_on(data.get("action_value"), data.get(MASK) if self.masked else None))
        return data

    def act_on(self, values: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The action for ``[..., actions]`` Q-values (what :meth:`forward` writes; the collector's array road
        and seeds acting together call it directly), among the allowed ones where ``mask`` is given."""
        index = masked_values(values, mask).argmax(-1)
        epsilon = self.epsilon
        if exploring() and epsilon > 0:
            explore = torch.rand(index.shape, device=index.device) < epsilon
            random = random_allowed(mask) if mask is not None else torch.randint_like(index, values.shape[-1])
            index = torch.where(explore, random, index)
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

    def trained_networks(self) -> QNetworks:
        return {"q_network": self.network}

    def exploration_stages(self) -> list[TensorDictModuleBase]:
        self.greedy = EpsilonGreedy(self.action_spec, self.config.epsilon_start,
                                    masked=MASK in self.observation_spec.keys())
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


class DQNObjective(LossModule):
    """DQN's loss on a Q-network writing one value per discrete action (one-hot or index actions): ``loss``, the
    Huber loss of ``Q(s, a)`` against ``r + gamma (1 - terminated) Q'(s', argmax)``, the argmax the target
    network's (or, double DQN, the online network's)."""

    #: its target discounts by gamma ** steps_to_next_obs (:meth:`Sample.target`): n-step returns serve it
    n_step_targets = True

    def __init__(self, q_network, *, gamma: float, double: bool, one_hot: bool, observation_key: str = "observation"):
        super().__init__()
        self.gamma, self.double, self.one_hot = gamma, double, one_hot
        self.value_network = q_network
        self.target_value_network = target_copy(q_network)
        self.q = tensor_function(q_network, [observation_key])
        self.target_q = tensor_function(self.target_value_network, [observation_key])
        self.parameter_groups = {"q": list(q_network.parameters())}
        self.term_learners = {"loss": "q"}
        self.target_parameters = {"q": list(self.target_value_network.parameters())}

    @property
    def batchable(self) -> bool:
        """Several seeds at once under ``torch.vmap`` (seeds trained together)."""
        return True

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        sample = Sample.of(data)
        with torch.no_grad():  # the max over the next state's allowed actions, where the env masks them
            next_values = masked_values(self.target_q(sample.next_observation).float(), sample.next_mask)
            if self.double:  # the online network chooses, the target network values
                best = masked_values(self.q(sample.next_observation), sample.next_mask).argmax(-1, keepdim=True)
                next_value = next_values.gather(-1, best)
            else:
                next_value = next_values.max(-1, keepdim=True).values
            target = sample.target(self.gamma, next_value)
        action = sample.action
        index = action.argmax(-1, keepdim=True) if self.one_hot else action.reshape(-1, 1).long()
        q = self.q(sample.observation).float().gather(-1, index)
        loss = sample.mean(functional.smooth_l1_loss(q, target, reduction="none"))
        data.set("td_error", (q.detach() - target).abs().reshape(-1))
        return TensorDict({"loss": loss, "q_value": q.detach().mean()}, batch_size=[])

    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        polyak_update(self.target_value_network, self.value_network, tau)


def objective(networks: QNetworks, settings: Any, action_spec=None) -> DQNObjective:
    """rlplug's DQN loss with the algorithm's Q-network, its discount and ``double``."""
    network = networks["q_network"]
    return DQNObjective(network, gamma=settings.gamma, double=settings.double, one_hot=isinstance(action_spec, OneHot),
                        observation_key=network.in_keys[0])


def torchrl_loss(networks: QNetworks, settings: Any, action_spec, observation_spec=None, **values: Any):
    """TorchRL's ``DQNLoss`` with the algorithm's Q-network (double DQN as the algorithm says, unless set in
    ``values``), followed by TorchRL's ``QValueModule`` (which writes the greedy action and its value, as the
    loss reads them; among the allowed actions, the next state's in the target, where the env masks them)."""
    from tensordict.nn import TensorDictSequential
    from torchrl.modules import QValueModule
    from torchrl.objectives import DQNLoss

    from rlplug.plugins.algorithms.loss_parts import unset_to

    space = "one_hot" if isinstance(action_spec, OneHot) else "categorical"  # the spec's shape has the env's dims
    defaults = {"double_dqn": settings.double, "loss_function": "smooth_l1"}
    masked = observation_spec is not None and MASK in observation_spec.keys()
    q_actor = TensorDictSequential(networks["q_network"],
                                   QValueModule(action_space=space, action_mask_key=MASK if masked else None))
    loss = DQNLoss(q_actor, action_space=space, **unset_to(values, defaults))
    return with_learners(loss, settings.gamma, {"q": "value_network_params"}, {"loss": "q"})
