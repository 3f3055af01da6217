"""rlplug's on-policy losses: what they share (:class:`OnPolicyLoss`, the log-probabilities and entropies they
read); each algorithm's own objective is in its module (``ppo.py``, ``pg.py``). Kept apart from the shared update
(:mod:`rlplug.plugins.algorithms.onpolicy.base`, which names them too, as before)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch.distributions import Distribution
from torch.nn import functional
from torchrl.objectives import LossModule

from rlplug.core.acting import ActorView, tensor_function
from rlplug.core.recurrent import RecurrentNetwork
from rlplug.core.training import forget_former_buffers
from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig

#: the buffers every rlplug on-policy loss held when one class computed every objective: the checkpoints of runs
#: from then hold both, and each loss now has only its own
FORMER_BUFFERS = ("clip_epsilon", "beta")


def approx_kl(ratio: torch.Tensor, log_ratio: torch.Tensor) -> torch.Tensor:
    """``mean((r - 1) - log r)``: an unbiased, non-negative estimate of KL(old || new) from the ratios."""
    return ((ratio - 1) - log_ratio).mean()


def log_prob_and_entropy(view: ActorView, observation: torch.Tensor, action: torch.Tensor,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The log-probability of the taken ``action`` under the policy now (differentiable), and its entropy when
    asked for: what the losses and IMPALA's V-trace read. A categorical head's come from its logits directly."""
    if view.categorical:
        log_probs = view.params_module(observation).log_softmax(-1)
        index = action.argmax(-1, keepdim=True) if view.one_hot else action.unsqueeze(-1)
        log_prob = log_probs.gather(-1, index).squeeze(-1)
        return log_prob, (-(log_probs.exp() * log_probs).sum(-1) if with_entropy else None)
    dist = view.distribution(observation)
    return dist.log_prob(action), (entropy(dist) if with_entropy else None)


def entropy(dist: Distribution) -> torch.Tensor:
    """The exact entropy where the distribution has one, else a one-sample estimate (tanh-squashed Gaussians)."""
    try:
        return dist.entropy()
    except NotImplementedError:
        return -dist.log_prob(dist.rsample())


def asked_for(entropy: torch.Tensor | None) -> torch.Tensor:
    """The entropy :func:`log_prob_and_entropy` computed when asked (``with_entropy``): never None where read."""
    if entropy is None:
        raise RuntimeError("the policy's entropy was read without being asked for (with_entropy = False)")
    return entropy


class OnPolicyLoss(LossModule):
    """What rlplug's on-policy losses share: a TorchRL ``LossModule`` (a TensorDict in, ``loss_*`` terms and
    diagnostics out, TorchRL's key names) that calls the policy and the critic on the minibatch's tensors
    directly (:class:`ActorView`), where TorchRL's losses build a distribution from a TensorDict per call.

    Each subclass gives its policy objective (:meth:`policy_objective`, on advantages ``A``, normalised per
    minibatch when asked, and ``r = pi(a|s) / pi_old(a|s)``); the terms beside it are the same for all:
    ``loss_critic`` is ``value_coef`` times the squared error of the critic against ``value_target`` (or, with
    ``value_clip``, the larger of it and the clipped prediction's, PPO-style), ``loss_entropy`` is
    ``-entropy_coef`` times the policy's entropy. The update minimises their sum.
    """

    #: several seeds at once under ``torch.vmap``: no state of its own changes per minibatch
    batchable = True
    #: no coefficient follows each minibatch (Ray's gradient workers may compute it apart)
    adapts_per_minibatch = False

    @dataclass
    class _AcceptedKeys:
        """The TensorDict keys read (TorchRL's PPO names; ``set_keys`` changes them)."""

        advantage: str = "advantage"
        value_target: str = "value_target"
        value: str = "state_value"
        sample_log_prob: str = "action_log_prob"
        action: str = "action"

    def __init__(self, actor, critic=None, *, entropy_coef: float = 0.0, value_coef: float = 0.5,
                 value_clip: float | None = None, normalize_advantage: bool = True):
        super().__init__()
        self.actor_network, self.critic_network = actor, critic
        #: a recurrent policy's and critic's cores run over each minibatch's sequences; their heads read the features
        self.cores = [network for network in (actor, critic) if isinstance(network, RecurrentNetwork)]
        self.view = ActorView.of(actor.head if isinstance(actor, RecurrentNetwork) else actor)
        self.value_key = critic.features_key if isinstance(critic, RecurrentNetwork) else self.view.observation_key
        head = critic.head if isinstance(critic, RecurrentNetwork) else critic
        self.value = tensor_function(head, [self.value_key]) if critic is not None else None
        self.entropy_coef, self.value_coef = entropy_coef, value_coef
        self.value_clip, self.normalize_advantage = value_clip, normalize_advantage
        #: whether to compute the diagnostics (entropy, KL, clip fraction): the update turns them off on the
        #: minibatches it does not report
        self.diagnostics = True
        self.set_keys(sample_log_prob=self.view.log_prob_key, action=self.view.action_key)
        forget_former_buffers(self, FORMER_BUFFERS)

    @classmethod
    def from_settings(cls, networks: dict, settings: OnPolicyConfig, **options: Any) -> OnPolicyLoss:
        """The loss with the algorithm's policy and critic, its terms' weights the algorithm's keys; ``options``
        are the subclass's own (PPO's clip range)."""
        return cls(networks["policy"], networks.get("critic"), entropy_coef=settings.entropy_coef,
                   value_coef=settings.value_coef, value_clip=settings.value_clip,
                   normalize_advantage=settings.normalize_advantages, **options)

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        pass  # advantages and value targets come from rlplug's estimators, before the loss

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.cores:  # [sequences, steps]: the cores' features along them, then every step alike
            for network in self.cores:
                tensordict.set(network.features_key, network.sequence_outputs(tensordict))
            tensordict = tensordict.reshape(-1)
        keys = self.tensor_keys
        observation = tensordict.get(self.view.observation_key)
        advantage = tensordict.get(keys.advantage).reshape(-1)
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        log_prob, entropy = log_prob_and_entropy(self.view, observation, tensordict.get(keys.action),
                                                 with_entropy=self.entropy_coef > 0 or self.diagnostics)
        log_ratio = log_prob - tensordict.get(keys.sample_log_prob)
        out: dict[str, torch.Tensor] = {"loss_objective": self.policy_objective(log_prob, log_ratio, advantage)}
        if self.value is not None:
            out["loss_critic"] = self.value_coef * self.value_error(tensordict)
        if self.entropy_coef:
            out["loss_entropy"] = -self.entropy_coef * asked_for(entropy).mean()
        if self.diagnostics:
            with torch.no_grad():
                ratio = log_ratio.exp()
                out.update(entropy=asked_for(entropy).mean(), kl_approx=approx_kl(ratio, log_ratio),
                           **self.own_diagnostics(ratio))
        return TensorDict(out, batch_size=[])

    def policy_objective(self, log_prob: torch.Tensor, log_ratio: torch.Tensor,
                         advantage: torch.Tensor) -> torch.Tensor:
        """What the policy's gradient descends, from the minibatch's log-probabilities and advantages."""
        raise NotImplementedError

    def own_diagnostics(self, ratio: torch.Tensor) -> dict[str, torch.Tensor]:
        """The subclass's own reported scalars (PPO's clip fraction), from the minibatch's ratios."""
        return {}

    def value_error(self, tensordict: TensorDictBase) -> torch.Tensor:
        if self.value is None:
            raise RuntimeError("value_error needs a critic, and this loss was built without one")
        keys = self.tensor_keys
        value = self.value(tensordict.get(self.value_key))
        target = tensordict.get(keys.value_target)
        if self.value_clip is None:
            return functional.mse_loss(value, target)  # one node where (value - target)^2 mean are three
        old = tensordict.get(keys.value)
        clipped = old + (value - old).clamp(-self.value_clip, self.value_clip)
        return torch.max((value - target).pow(2), (clipped - target).pow(2)).mean()

