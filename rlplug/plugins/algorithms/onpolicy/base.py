"""What every collect-then-learn policy-gradient algorithm shares, written once.

An algorithm here is a config dataclass (:mod:`rlplug.plugins.algorithms.onpolicy.config`: its fields are its recipe table)
and a subclass of :class:`OnPolicy` that says only what differs, mostly :meth:`OnPolicy.policy_loss`.
One update, top to bottom:

1. the critic values every step and its successor; the estimators write ``advantage`` and ``value_target``;
2. ``epochs`` passes over shuffled minibatches: policy loss + ``value_coef`` x value regression (optionally
   clipped around the values at collection time) - ``entropy_coef`` x entropy, one optimiser step each with
   the global gradient norm clipped;
3. the learning rate follows its schedule over the run's frame budget.

Everything runs on tensors: the policy and critic stay TorchRL modules, read through :mod:`rlplug.core.acting`
(going through TensorDicts per minibatch costs more than the arithmetic for small networks; BENCHMARKS.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rlplug.core.acting import ActorView, tensor_function
from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig
from rlplug.errors import UserError
from rlplug.networks import share_body
from rlplug.core.training import (FlatParameters, MetricMean, clip_and_step, make_optimizer, optimiser_step,
                                  scheduled_lr, set_learning_rate)


class OnPolicy:
    """The shared update; subclasses replace :meth:`policy_loss` and may adapt after each minibatch."""

    uses_critic = True

    def __init__(self, config: OnPolicyConfig, *, observation_spec, action_spec, device: str, total_frames: int):
        self.config, self.total_frames = config, total_frames
        self.frames_per_batch = config.frames_per_batch
        self.schedule, self.minibatch_size = config.schedule(), config.minibatch_length()
        specs = {"observation_spec": observation_spec, "action_spec": action_spec, "device": device}
        self.policy: TensorDictModuleBase = config.policy.build(role="policy", **specs)
        self.actor = ActorView.of(self.policy)
        self.critic = config.critic.build(role="value", **specs) if self.uses_critic else None
        if self.critic is not None and config.shared_body:
            try:
                share_body(self.policy, self.critic)
            except ValueError as error:
                raise UserError(str(error), path="algorithm.shared_body") from None
        self.value = tensor_function(self.critic, [self.actor.observation_key]) if self.critic else None
        #: (estimator, the keys taken from it): the advantage estimator may give a value target too (``mc``,
        #: ``td-lambda``...), used unless a ``value_target`` estimator is set, which never changes the advantage.
        self.estimators = [(e.build(), keys) for e, keys in ((config.advantage, ("advantage", "value_target")),
                                                             (config.value_target, ("value_target",))) if e is not None]
        modules = [self.policy, *([self.critic] if self.critic else [])]
        self.parameters = list({id(p): p for m in modules for p in m.parameters()}.values())
        #: the parameters in one tensor where they fit (what the optimiser steps), else the list itself
        self.trained = FlatParameters.where_possible(self.parameters)
        self.optimiser = make_optimizer(config.optimizer, self.trained, config.lr, config.optimizer_kwargs)
        self.frames = 0

    # -- 1. estimates ---------------------------------------------------------------------------------

    @torch.no_grad()
    def estimate(self, batch: TensorDictBase) -> TensorDictBase:
        """Critic values for each step and its successor (one call), then the estimators in order."""
        if self.value is not None:
            key = self.actor.observation_key
            observations = batch.get(key)
            values = self.value(torch.cat([observations, batch.get(("next", key))]))
            batch.set("state_value", values[: len(observations)])
            batch.set(("next", "state_value"), values[len(observations):])
        for estimator, keys in self.estimators:
            written = estimator(batch.copy())
            for key in keys:
                if key in written.keys():
                    batch.set(key, written.get(key))
        needed = ["advantage"] + (["value_target"] if self.critic else [])
        missing = [k for k in needed if k not in batch.keys()]
        if missing:
            raise UserError(f"no estimator wrote {' and '.join(missing)}; choose algorithm.advantage and "
                            f"algorithm.value_target estimators that do", path="algorithm")
        return batch

    # -- 2. learning ----------------------------------------------------------------------------------

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        lr = self.start_update(batch.numel())
        prepared = self.prepare(batch, self.minibatch_size)

        def step(index: int, diagnostics: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
            losses = self.loss(prepared.minibatch(index), prepared.normalize_each, diagnostics=diagnostics)
            return losses, optimiser_step(self.optimiser, losses.pop("loss"), self.trained, self.config.max_grad_norm)

        return self.learn(prepared.steps, step, lr, prepared.explained_variance)

    def start_update(self, frames: int) -> float:
        """Count the batch's frames, set the learning rate its schedule gives now; returns that rate."""
        self.frames += frames
        lr = scheduled_lr(self.config.lr, self.schedule, self.frames / self.total_frames)
        set_learning_rate(self.optimiser, lr)
        self.before_update(self.frames / self.total_frames)
        return lr

    def prepare(self, batch: TensorDictBase, minibatch_size: int) -> "Prepared":
        """The estimates for ``batch``, then the flat tensors the loss reads, advantages normalised over the
        whole batch where a minibatch is the whole batch (per minibatch otherwise). Ray's gradient workers
        prepare their own share of a batch the same way."""
        flat = self.estimate(batch).reshape(-1)
        data = {
            "observation": flat.get(self.actor.observation_key), "action": flat.get(self.actor.action_key),
            "old_log_prob": flat.get(self.actor.log_prob_key), "advantage": flat.get("advantage").reshape(-1),
        }
        if self.critic:
            data.update(value_target=flat.get("value_target"), old_value=flat.get("state_value"))
        normalize = self.config.normalize_advantages
        normalize_each = normalize and minibatch_size < len(data["advantage"])
        if normalize and not normalize_each:
            data["advantage"] = normalized(data["advantage"])
        variance = explained_variance(data["old_value"], data["value_target"]) if self.critic else None
        return Prepared(data, minibatch_size, normalize_each, variance)

    def learn(self, steps: int, step: Callable[[int, bool], tuple[dict[str, torch.Tensor], torch.Tensor | None]],
              lr: float, explained_variance: float | None) -> dict[str, float]:
        """``epochs`` passes of ``steps`` optimiser steps; ``step(index, diagnostics)`` takes the step on the
        epoch's minibatch ``index`` and returns its losses and gradient norm (here, :meth:`update`'s; on Ray,
        gradients computed by workers). The last epoch reports its diagnostics."""
        metrics = MetricMean()
        for epoch in range(self.config.epochs):
            for index in range(steps):
                losses, grad_norm = step(index, epoch == self.config.epochs - 1)
                self.after_minibatch(losses)
                if "loss_policy" in losses:
                    metrics.add(grad_norm=grad_norm, **losses)
        result = {**metrics.means(), "lr": lr, **self.extra_metrics()}
        if explained_variance is not None:
            result["explained_variance"] = explained_variance
        return result

    def loss(self, data: dict[str, torch.Tensor], normalize_advantages: bool,
             diagnostics: bool = False) -> dict[str, torch.Tensor]:
        """The objective on one minibatch; ``diagnostics`` adds the parts, entropy, KL and
        :meth:`policy_diagnostics`."""
        config = self.config
        log_prob, entropy = self.actor.evaluate(data["observation"], data["action"], with_entropy=config.entropy_coef > 0
                                                or diagnostics)
        log_ratio = log_prob - data["old_log_prob"]
        advantage = normalized(data["advantage"]) if normalize_advantages else data["advantage"]
        policy_loss, extras = self.policy_loss(log_prob, log_ratio, advantage)
        loss = policy_loss
        if self.critic:
            value_loss = self.value_loss(data)
            loss = loss + config.value_coef * value_loss
        if config.entropy_coef:
            loss = loss - config.entropy_coef * entropy.mean()
        result = {"loss": loss, **extras}
        if diagnostics:
            with torch.no_grad():
                ratio = log_ratio.exp()
                result.update(loss_policy=policy_loss, entropy=entropy.mean(), kl=((ratio - 1) - log_ratio).mean(),
                              **self.policy_diagnostics(ratio))
                if self.critic:
                    result["loss_value"] = value_loss
        return result

    def value_loss(self, data: dict[str, torch.Tensor]) -> torch.Tensor:
        value, target = self.value(data["observation"]), data["value_target"]
        clip = self.config.value_clip
        if clip is None:
            return torch.nn.functional.mse_loss(value, target)  # one node where (value - target)^2 mean are three
        old = data["old_value"]
        clipped = old + (value - old).clamp(-clip, clip)
        return torch.max((value - target).pow(2), (clipped - target).pow(2)).mean()

    def networks(self) -> dict[str, torch.nn.Module]:
        """The trained networks by name, for loggers that record weights."""
        return {"policy": self.policy, **({"critic": self.critic} if self.critic is not None else {})}

    # -- distributed training (pytorchrl's Algorithm protocol; the gradient workers of rlplug.plugins.runners.ray.collection) ------

    def get_weights(self) -> TensorDictBase:
        """Every trained parameter (policy and critic, a shared body once) keyed by position: copies built
        from one recipe list their parameters in the same order."""
        return TensorDict({str(i): p.detach() for i, p in enumerate(self.parameters)}, []).consolidate()

    @torch.no_grad()
    def set_weights(self, weights: TensorDictBase) -> None:
        for i, p in enumerate(self.parameters):
            p.copy_(weights.get(str(i)))

    def compute_gradients(self, data: dict[str, torch.Tensor], normalize_advantages: bool,
                          diagnostics: bool = False) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        """The loss on one minibatch (see :meth:`loss`) and its gradient for every parameter; nothing steps."""
        losses = self.loss(data, normalize_advantages, diagnostics=diagnostics)
        self.zero_grad()
        losses["loss"].backward()
        grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in self.parameters]
        return grads, {k: v.detach() for k, v in losses.items()}

    def apply_gradients(self, gradients: list[torch.Tensor]) -> torch.Tensor | None:
        """Take the optimiser step with ``gradients`` (in :meth:`get_weights` order), the global norm clipped
        as in :meth:`update`; returns the norm before clipping (None without clipping)."""
        self.zero_grad()
        for p, g in zip(self.parameters, gradients):
            p.grad.copy_(g)
        return clip_and_step(self.optimiser, self.trained, self.config.max_grad_norm)

    def zero_grad(self) -> None:
        if isinstance(self.trained, FlatParameters):
            self.trained.zero_grad()
        else:
            for p in self.parameters:
                p.grad = torch.zeros_like(p)

    # -- what algorithms define -----------------------------------------------------------------------

    def policy_loss(self, log_prob: torch.Tensor, log_ratio: torch.Tensor,
                    advantage: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy's part of the loss, and any extra metrics (tensors) to report.

        By default the score-function (REINFORCE) gradient, ``-E[log pi(a|s) * A]``: VPG and A2C use it
        as it is; the surrogate objectives replace it.
        """
        return -(log_prob * advantage).mean(), {}

    def policy_diagnostics(self, ratio: torch.Tensor) -> dict[str, torch.Tensor]:
        """Metrics of the policy's step (``ratio``: new over old probability of each action), computed on the
        minibatches that report (the last epoch's), not on every one."""
        return {}

    def before_update(self, progress: float) -> None:
        """Called with the run's progress (0..1) before each update: for schedules of the algorithm's own."""

    def after_minibatch(self, losses: dict[str, torch.Tensor]) -> None:
        """Called after each optimiser step with the minibatch's losses: for adaptive coefficients."""

    def extra_metrics(self) -> dict[str, float]:
        return {}

    # -- checkpoints ----------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        state = {"policy": self.policy.state_dict(), "optimiser": self.optimiser.state_dict(), "frames": self.frames}
        if self.critic:
            state["critic"] = self.critic.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        if self.critic:
            self.critic.load_state_dict(state["critic"])
        self.optimiser.load_state_dict(state["optimiser"])
        self.frames = state["frames"]


@dataclass
class Prepared:
    """A batch made ready for the epochs: the flat tensors the loss reads, split into a fresh random partition
    of minibatches each epoch (the last may be smaller; one minibatch as large as the batch is the batch)."""

    data: dict[str, torch.Tensor]
    minibatch_size: int
    #: whether advantages are normalised per minibatch (else they were, over the whole batch)
    normalize_each: bool
    #: of the critic's values at collection time against the value targets (None without a critic)
    explained_variance: float | None
    order: list[torch.Tensor] = field(default_factory=list, repr=False)

    @property
    def length(self) -> int:
        return len(self.data["advantage"])

    @property
    def steps(self) -> int:
        """Minibatches per epoch."""
        return math.ceil(self.length / self.minibatch_size)

    def minibatch(self, index: int) -> dict[str, torch.Tensor]:
        """The epoch's minibatch ``index``; index 0 starts an epoch with a new partition."""
        if self.minibatch_size >= self.length:
            return self.data
        if index == 0:
            self.order = list(torch.randperm(self.length, device=self.data["advantage"].device).split(self.minibatch_size))
        return {key: value[self.order[index]] for key, value in self.data.items()}


def normalized(advantage: torch.Tensor) -> torch.Tensor:
    return (advantage - advantage.mean()) / (advantage.std() + 1e-8)


@torch.no_grad()
def explained_variance(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(target - prediction) / Var(target): 1 is a perfect critic, 0 no better than a constant."""
    variance = target.var()
    return float("nan") if variance == 0 else (1 - (target - prediction).var() / variance).item()
