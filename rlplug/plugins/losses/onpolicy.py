"""rlplug's own losses for the on-policy family: TorchRL ``LossModule``s (a TensorDict in, ``loss_*`` terms and
diagnostics out, TorchRL's key names) that read the minibatch's tensors and call the policy and the critic on
them directly (:class:`rlplug.core.acting.ActorView`), where TorchRL's losses build a distribution from a
TensorDict per call: what they compute is the same, and tests hold each to TorchRL's loss where both define it.

The policy objectives, on a minibatch of advantages ``A`` (normalised per minibatch when asked) and the ratio
``r = pi(a|s) / pi_old(a|s)``:

- ``score``: ``-mean(log pi(a|s) A)`` (REINFORCE, A2C, IMPALA: TorchRL's ``A2CLoss`` and ``ReinforceLoss``);
- ``ratio``: ``-mean(r A)`` (the unclipped surrogate);
- ``clip``: ``-mean(min(r A, clip(r, 1 - eps, 1 + eps) A))`` (PPO: ``ClipPPOLoss``);
- ``kl``: ``-mean(r A) + beta KL(old || new)``, beta doubled above 1.5x ``kl_target`` and halved below
  ``kl_target`` / 1.5 after each minibatch (PPO-KL: ``KLPENPPOLoss``).

``loss_critic`` is ``value_coef`` times the squared error of the critic against ``value_target`` (or, with
``value_clip``, the larger of it and the clipped prediction's, PPO-style); ``loss_entropy`` is ``-entropy_coef``
times the policy's entropy. The update minimises their sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase
from torch.nn import functional
from torchrl.objectives import LossModule

from rlplug.core.acting import ActorView, tensor_function

OBJECTIVES = ("score", "ratio", "clip", "kl")


def asked_for(entropy: torch.Tensor | None) -> torch.Tensor:
    """The entropy :meth:`ActorView.evaluate` computed when asked (``with_entropy``): never None where read."""
    if entropy is None:
        raise RuntimeError("the policy's entropy was read without being asked for (with_entropy = False)")
    return entropy


class PolicyGradientLoss(LossModule):
    """The on-policy loss, for one of :data:`OBJECTIVES`."""

    #: set in place from a number (PPO's annealed clip range), as TorchRL's losses allow
    _schedulable_buffers = frozenset({"clip_epsilon", "beta"})
    clip_epsilon: torch.Tensor
    beta: torch.Tensor

    @dataclass
    class _AcceptedKeys:
        """The TensorDict keys read (TorchRL's PPO names; ``set_keys`` changes them)."""

        advantage: str = "advantage"
        value_target: str = "value_target"
        value: str = "state_value"
        sample_log_prob: str = "action_log_prob"
        action: str = "action"

    def __init__(self, actor, critic=None, *, objective: str, clip_epsilon: float = 0.2, entropy_coef: float = 0.0,
                 value_coef: float = 0.5, value_clip: float | None = None, normalize_advantage: bool = True,
                 kl_target: float = 0.01, kl_penalty: float = 1.0):
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        super().__init__()
        self.actor_network, self.critic_network = actor, critic
        self.view = ActorView.of(actor)
        self.value = tensor_function(critic, [self.view.observation_key]) if critic is not None else None
        self.objective, self.entropy_coef, self.value_coef = objective, entropy_coef, value_coef
        self.value_clip, self.normalize_advantage, self.kl_target = value_clip, normalize_advantage, kl_target
        self.register_buffer("clip_epsilon", torch.tensor(float(clip_epsilon)))
        self.register_buffer("beta", torch.tensor(float(kl_penalty)))
        #: whether to compute the diagnostics (entropy, KL, clip fraction): the update turns them off on the
        #: minibatches it does not report
        self.diagnostics = True
        self.set_keys(sample_log_prob=self.view.log_prob_key, action=self.view.action_key)

    @property
    def adapts_per_minibatch(self) -> bool:
        """The KL penalty's beta follows each minibatch's KL."""
        return self.objective == "kl"

    @property
    def batchable(self) -> bool:
        """Several seeds at once under ``torch.vmap``: all but the KL penalty, whose beta follows each minibatch."""
        return self.objective != "kl"

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        pass  # advantages and value targets come from rlplug's estimators, before the loss

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        keys = self.tensor_keys
        observation = tensordict.get(self.view.observation_key)
        advantage = tensordict.get(keys.advantage).reshape(-1)
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        wants_entropy = self.entropy_coef > 0 or self.diagnostics
        log_prob, entropy = self.view.evaluate(observation, tensordict.get(keys.action), with_entropy=wants_entropy)
        log_ratio = log_prob - tensordict.get(keys.sample_log_prob)
        out: dict[str, torch.Tensor] = {"loss_objective": self.policy_objective(log_prob, log_ratio, advantage)}
        if self.value is not None:
            out["loss_critic"] = self.value_coef * self.value_error(tensordict)
        if self.entropy_coef:
            out["loss_entropy"] = -self.entropy_coef * asked_for(entropy).mean()
        if self.diagnostics:
            with torch.no_grad():
                ratio = log_ratio.exp()
                out["entropy"] = asked_for(entropy).mean()
                out["kl_approx"] = ((ratio - 1) - log_ratio).mean()
                if self.objective == "clip":
                    out["clip_fraction"] = ((ratio - 1).abs() > self.clip_epsilon).float().mean()
                if self.objective == "kl":
                    out["kl_beta"] = self.beta.clone()
        return TensorDict(out, batch_size=[])

    def policy_objective(self, log_prob: torch.Tensor, log_ratio: torch.Tensor,
                         advantage: torch.Tensor) -> torch.Tensor:
        if self.objective == "score":
            return -(log_prob * advantage).mean()
        ratio = log_ratio.exp()
        if self.objective == "clip":
            clipped = ratio.clamp(1 - self.clip_epsilon, 1 + self.clip_epsilon)
            return -torch.min(ratio * advantage, clipped * advantage).mean()
        if self.objective == "ratio":
            return -(ratio * advantage).mean()
        kl = ((ratio - 1) - log_ratio).mean()  # an unbiased, non-negative estimate of KL(old || new)
        loss = -(ratio * advantage).mean() + float(self.beta) * kl  # this minibatch's beta, whatever comes next
        if self.training:
            self.adapt_beta(kl.detach())
        return loss

    @torch.no_grad()
    def adapt_beta(self, kl: torch.Tensor) -> None:
        """Double beta when the KL overshoots 1.5x the target, halve it below target / 1.5 (one minibatch's)."""
        value = kl.item()
        if value > 1.5 * self.kl_target:
            self.beta.mul_(2.0)
        elif value < self.kl_target / 1.5:
            self.beta.mul_(0.5)

    def value_error(self, tensordict: TensorDictBase) -> torch.Tensor:
        if self.value is None:
            raise RuntimeError("value_error needs a critic, and this loss was built without one")
        keys = self.tensor_keys
        value = self.value(tensordict.get(self.view.observation_key))
        target = tensordict.get(keys.value_target)
        if self.value_clip is None:
            return functional.mse_loss(value, target)  # one node where (value - target)^2 mean are three
        old = tensordict.get(keys.value)
        clipped = old + (value - old).clamp(-self.value_clip, self.value_clip)
        return torch.max((value - target).pow(2), (clipped - target).pow(2)).mean()
