"""C51's class (:class:`C51`, DQN's acting and target updates on a distributional Q-network) and the build of its
loss, TorchRL's ``DistributionalDQNLoss`` (:func:`torchrl_loss`).

The Q-network is the recipe's ``q_network`` built for ``Role("q_values", outputs=atoms)``: ``actions x atoms``
outputs, action by action. TorchRL's loss reads them as ``[..., atoms, actions]`` log-probabilities
(:class:`AtomsFirst`, then its own log-softmax over the atoms); the acting policy reads them as each action's
expected return (:class:`ExpectedValues`), which DQN's epsilon-greedy stage takes as its Q-values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.data import OneHot

from rlplug.algorithms import DQN, build_network, one_env_actions, with_learners
from rlplug.core.masks import MASK, MASKED_LOGIT
from rlplug.errors import UserError
from rlplug.networks import Role, is_discrete, output_size
from rlplug.plugins.algorithms.c51 import C51Config


def support(settings: Any, device: torch.device | str = "cpu") -> torch.Tensor:
    """The atoms: ``atoms`` return values evenly spaced from ``v_min`` to ``v_max``."""
    return torch.linspace(settings.v_min, settings.v_max, settings.atoms, device=device)


class AtomsFirst(nn.Module):
    """``[..., actions * atoms]`` (action by action) to ``[..., atoms, actions]``, TorchRL's layout."""

    def __init__(self, atoms: int):
        super().__init__()
        self.atoms = atoms

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        return values.unflatten(-1, (-1, self.atoms)).transpose(-1, -2)


class LowestWhereMasked(nn.Module):
    """``[..., atoms, actions]`` logits whose disallowed actions (the env's ``action_mask``) put all their mass
    on the lowest atom: their mean is ``v_min``, so TorchRL's loss, choosing the next action by the mean, picks
    an allowed one (its ``action_mask_key`` would compare the masked log-probabilities' means, where a masked
    action's is 0). An allowed action's atoms are untouched."""

    def forward(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lowest = torch.full_like(values[..., :, :1], MASKED_LOGIT)
        lowest[..., 0, :] = 0.0
        return torch.where(mask.bool().unsqueeze(-2), values, lowest)


class ExpectedValues(nn.Module):
    """``[..., actions * atoms]`` logits (action by action) to each action's expected return ``[..., actions]``:
    the mean of the atoms under the softmax of its logits."""

    support: torch.Tensor

    def __init__(self, support: torch.Tensor):
        super().__init__()
        self.register_buffer("support", support)

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        probabilities = values.unflatten(-1, (-1, self.support.numel())).float().softmax(-1)
        return probabilities @ self.support


class C51(DQN):
    config: C51Config

    def check_actions(self, action_spec) -> None:
        if not is_discrete(action_spec):
            raise UserError("c51 is for discrete actions and this env's are not; use ddpg, td3 or sac, or an "
                            "on-policy algorithm (ppo)", path="algorithm")
        try:
            output_size("q_values", action_spec, observation_spec=self.observation_spec)
        except ValueError as error:
            raise UserError(f"c51 learns a distribution of returns for each choice of one Discrete action: {error}",
                            path="algorithm") from None

    def build(self) -> TensorDictModuleBase:
        config = self.config
        if config.v_min >= config.v_max:
            raise UserError(f"must be above v_min ({config.v_min}), got {config.v_max}", path="algorithm.v_max")
        if not config.double:
            raise UserError("TorchRL's DistributionalDQNLoss chooses the next action with the online network "
                            "(double DQN) and has no other way; leave it true", path="algorithm.double")
        self.network = build_network(config.q_network, role=Role("q_values", outputs=config.atoms), **self.specs)
        expected = ExpectedValues(support(config, self.device))
        network = self.network
        if type(network) is TensorDictModule and len(network.out_keys) == 1:  # one module: the fast acting road
            return TensorDictModule(nn.Sequential(network.module, expected), in_keys=list(network.in_keys),
                                    out_keys=["action_value"])
        return TensorDictSequential(network, TensorDictModule(expected, in_keys=["action_value"],
                                                              out_keys=["action_value"]))


def torchrl_loss(networks: Mapping[str, Any], settings: Any, action_spec, *, observation_spec=None):
    """TorchRL's ``DistributionalDQNLoss`` on the algorithm's Q-network, its outputs read as atoms
    (:class:`AtomsFirst`) by TorchRL's ``DistributionalQValueActor``; the discount the algorithm's gamma."""
    from torchrl.modules import DistributionalQValueActor
    from torchrl.objectives import DistributionalDQNLoss

    network = networks["q_network"]
    atoms = TensorDictModule(AtomsFirst(settings.atoms), in_keys=["action_value"], out_keys=["action_value"])
    if observation_spec is not None and MASK in observation_spec.keys():  # the next action among allowed ones
        atoms = TensorDictSequential(atoms, TensorDictModule(LowestWhereMasked(), in_keys=["action_value", MASK],
                                                             out_keys=["action_value"]))
    space = "one_hot" if isinstance(action_spec, OneHot) else "categorical"
    device = next(network.parameters()).device
    actor = DistributionalQValueActor(TensorDictSequential(network, atoms), support=support(settings, device),
                                      action_space=space, spec=one_env_actions(action_spec, observation_spec))
    loss = DistributionalDQNLoss(actor, gamma=settings.gamma, delay_value=True)
    loss.set_keys(done="terminated")  # the replay keeps terminations only: a time limit is no end of returns
    return with_learners(loss, settings.gamma, {"q": "value_network_params"}, {"loss": "q"})
