"""TD3 (Fujimoto et al. 2018): DDPG with twin critics (``loss_qvalue``, both on the lower target), target policy
smoothing (clipped Gaussian noise on the target action, in fractions of the action half-range), and delayed
policy updates: the actor and the targets move once every ``policy_delay`` critic steps
(:class:`~rlplug.plugins.algorithms.offpolicy.actor_critic.DelayedActor`).

Here: the algorithm (:class:`TD3`), rlplug's loss (:class:`TD3Objective`, ``td3-loss``) and the builds of both
losses a recipe may choose (:func:`objective`, :func:`torchrl_loss`: TorchRL's ``TD3Loss``, as
:class:`DelayableTD3Loss`).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import dispatch
from torchrl.objectives import TD3Loss

from rlplug.networks import action_bounds
from rlplug.plugins.algorithms.ddpg.algorithm import DDPGObjective
from rlplug.plugins.algorithms.offpolicy.actor_critic import DelayedActor
from rlplug.plugins.algorithms.offpolicy.losses import Sample, one_env_actions, refuse_sequences, with_learners
from rlplug.plugins.algorithms.td3 import TD3Config
from rlplug.registry.networks import ActorCriticNetworks


class TD3(DelayedActor):
    config: TD3Config
    critics = 2


class TD3Objective(DDPGObjective):
    """TD3's loss: DDPG's with twin critics and a smoothed target action."""

    critic_term_name = "loss_qvalue"
    #: the action bounds, where there are some
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, actor, critics: list, *, gamma: float, observation_key: str = "observation", burn_in: int = 0,
                 action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None, policy_noise: float = 0.2,
                 noise_clip: float = 0.5):
        super().__init__(actor, critics, gamma=gamma, observation_key=observation_key, burn_in=burn_in)
        self.policy_noise, self.noise_clip = policy_noise, noise_clip
        if action_bounds is not None:
            self.register_buffer("action_low", action_bounds[0])
            self.register_buffer("action_high", action_bounds[1])
        self.action_bounds = action_bounds

    def target_action(self, sample: Sample) -> torch.Tensor:
        """The target actor's action with clipped noise, in fractions of the action half-range, kept in bounds."""
        action = super().target_action(sample)
        noise = (torch.randn_like(action) * self.policy_noise).clamp(-self.noise_clip, self.noise_clip)
        if self.action_bounds is None:
            return action + noise
        action = action + noise * (self.action_high - self.action_low) / 2
        return action.clamp(self.action_low, self.action_high)


def objective(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec,
              device: str = "cpu") -> TD3Objective:
    """rlplug's TD3 loss with the algorithm's actor and critics, its discount, burn-in and target noise."""
    actor = networks["policy"]
    bounds = action_bounds(observation_spec, action_spec)
    return TD3Objective(actor, networks["critics"], gamma=settings.gamma, observation_key=actor.in_keys[0],
                        burn_in=settings.burn_in,
                        action_bounds=None if bounds is None else (bounds[0].to(device), bounds[1].to(device)),
                        policy_noise=settings.target_policy_noise, noise_clip=settings.target_noise_clip)


class DelayableTD3Loss(TD3Loss):
    """TorchRL's ``TD3Loss``, which the algorithm tells (``with_actor``) on the steps it does not move the actor to
    compute the critics' term alone, by TorchRL's own ``value_loss`` (as TorchRL's TD3 example calls it): its
    ``forward`` computes the actor's term at every step, half of the step's work, which those steps discard. With
    the actor it is ``TD3Loss.forward`` itself."""

    with_actor = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.register_load_state_dict_pre_hook(self.one_env_bounds)

    @staticmethod
    def one_env_bounds(module: torch.nn.Module, state_dict: dict, prefix: str, *rest: Any) -> None:
        """Checkpoints written before the loss took one env's action spec hold its bounds with the envs' dims
        (``[num_envs, *action]``, every row alike): they load as the first env's."""
        for name in ("min_action", "max_action"):
            own, saved = getattr(module, name, None), state_dict.get(prefix + name)
            if isinstance(own, torch.Tensor) and isinstance(saved, torch.Tensor) and saved.shape != own.shape \
                    and saved.numel() % own.numel() == 0:
                state_dict[prefix + name] = saved.reshape(-1, *own.shape)[0]

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.with_actor:
            return super().forward(tensordict)
        loss_qvalue, metadata = self.value_loss(tensordict)
        tensordict.set(self.tensor_keys.priority, metadata.pop("td_error").detach().max(0)[0])
        return TensorDict(loss_qvalue=loss_qvalue, **metadata)


def torchrl_loss(networks: ActorCriticNetworks, settings: Any, action_spec=None, *, observation_spec=None,
                 **values: Any):
    """TorchRL's ``TD3Loss`` with the algorithm's actor and first critic (TorchRL makes the twins), and one env's
    action bounds; ``values``: the recipe's keys for it, unset ones the algorithm's."""
    from rlplug.plugins.algorithms.loss_parts import unset_to

    refuse_sequences(networks, "TD3Loss", "td3-loss")
    defaults = {"policy_noise": settings.target_policy_noise, "noise_clip": settings.target_noise_clip,
                "loss_function": "l2", "num_qvalue_nets": 2}
    loss = DelayableTD3Loss(networks["policy"], networks["critic"],
                            action_spec=one_env_actions(action_spec, observation_spec), **unset_to(values, defaults))
    return with_learners(loss, settings.gamma, {"actor": "actor_network_params", "critic": "qvalue_network_params"},
                         {"loss_actor": "actor", "loss_qvalue": "critic"})
