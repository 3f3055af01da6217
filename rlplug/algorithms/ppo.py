"""Proximal policy optimisation with the clipped surrogate (Schulman et al. 2017).

One update, top to bottom:
1. the critic values every step and its successor; the estimators write ``advantage`` and ``value_target``;
2. ``epochs`` passes over shuffled minibatches: clipped surrogate + value regression (+ entropy bonus),
   one Adam step each with the global gradient norm clipped;
3. learning rate and clip range optionally decay linearly to zero over the run's frame budget.

The loss is computed here on tensors rather than with TorchRL's ``ClipPPOLoss``: the arithmetic is the
same, but going through TensorDicts costs about 1.8x the time per minibatch for small networks (see
BENCHMARKS.md). The policy and critic stay TorchRL modules; :mod:`rlplug.acting` reads them as tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rlplug.acting import ActorView, value_function
from rlplug.training import MetricMean, linear_decay, make_adam, minibatches, optimiser_step, set_learning_rate


@dataclass
class PPOConfig:
    frames_per_batch: int
    epochs: int
    minibatch_size: int
    lr: float
    anneal_lr: bool
    clip_epsilon: float
    anneal_clip: bool
    entropy_coef: float
    value_coef: float
    max_grad_norm: float | None
    normalize_advantages: bool
    total_frames: int


class PPO:
    """Clipped PPO; ``policy`` acts, ``update`` learns from one ``[envs, time]`` batch."""

    def __init__(self, config: PPOConfig, policy: TensorDictModuleBase, critic: TensorDictModuleBase,
                 estimators: list[TensorDictModuleBase]):
        self.config = config
        self.frames_per_batch = config.frames_per_batch
        self.policy, self.critic, self.estimators = policy, critic, estimators
        self.actor = ActorView.of(policy)
        self.value = value_function(critic, self.actor.observation_key)
        self.parameters = list({id(p): p for p in [*policy.parameters(), *critic.parameters()]}.values())
        self.optimiser = make_adam(self.parameters, lr=config.lr)
        self.frames = 0

    @torch.no_grad()
    def estimate(self, batch: TensorDictBase) -> TensorDictBase:
        """Fill ``state_value`` and ``("next", "state_value")`` in one critic call, then run the estimators."""
        key = self.actor.observation_key
        observations = batch.get(key)
        values = self.value(torch.cat([observations, batch.get(("next", key))]))
        batch.set("state_value", values[: len(observations)])
        batch.set(("next", "state_value"), values[len(observations):])
        for estimator in self.estimators:
            estimator(batch)
        missing = [k for k in ("advantage", "value_target") if k not in batch.keys()]
        if missing:
            raise RuntimeError(f"PPO needs {' and '.join(missing)}, which no estimator wrote; "
                               f"set algorithm.advantage / algorithm.value_target")
        return batch

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        config = self.config
        self.frames += batch.numel()
        progress = self.frames / config.total_frames
        lr = linear_decay(config.lr, progress) if config.anneal_lr else config.lr
        clip = linear_decay(config.clip_epsilon, progress) if config.anneal_clip else config.clip_epsilon
        set_learning_rate(self.optimiser, lr)

        flat = self.estimate(batch).reshape(-1)
        data = {
            "observation": flat.get(self.actor.observation_key), "action": flat.get(self.actor.action_key),
            "old_log_prob": flat.get(self.actor.log_prob_key), "advantage": flat.get("advantage").reshape(-1),
            "value_target": flat.get("value_target"),
        }
        # Advantages are normalised per minibatch; a minibatch that is the whole batch is the same every epoch.
        normalize_each = config.normalize_advantages and config.minibatch_size < len(flat)
        if config.normalize_advantages and not normalize_each:
            data["advantage"] = normalized(data["advantage"])
        metrics = MetricMean()
        for epoch in range(config.epochs):
            for minibatch in minibatches(data, config.minibatch_size):
                losses = self.loss(minibatch, clip, normalize_each, diagnostics=epoch == config.epochs - 1)
                grad_norm = optimiser_step(self.optimiser, losses.pop("loss"), self.parameters, config.max_grad_norm)
                if losses:
                    metrics.add(grad_norm=grad_norm, **losses)
        return {**metrics.means(), "lr": lr, "clip_epsilon": clip}

    def loss(self, data: dict[str, torch.Tensor], clip: float, normalize_advantages: bool,
             diagnostics: bool = False) -> dict[str, torch.Tensor]:
        """The PPO objective on one minibatch; ``diagnostics`` adds the losses, clip fraction and KL estimate."""
        config = self.config
        log_prob, entropy = self.actor.evaluate(data["observation"], data["action"], with_entropy=config.entropy_coef > 0)
        log_ratio = log_prob - data["old_log_prob"]
        ratio = log_ratio.exp()
        advantage = normalized(data["advantage"]) if normalize_advantages else data["advantage"]
        policy_loss = -torch.min(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage).mean()
        value_loss = (self.value(data["observation"]) - data["value_target"]).pow(2).mean()
        loss = policy_loss + config.value_coef * value_loss
        result = {"loss": loss}
        if entropy is not None:
            entropy_mean = entropy.mean()
            result["loss"] = loss - config.entropy_coef * entropy_mean
            if diagnostics:
                result["entropy"] = entropy_mean
        if diagnostics:
            with torch.no_grad():
                result.update(loss_policy=policy_loss, loss_value=value_loss,
                              clip_fraction=((ratio - 1).abs() > clip).float().mean(),
                              kl=((ratio - 1) - log_ratio).mean())
        return result

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
                "optimiser": self.optimiser.state_dict(), "frames": self.frames}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.optimiser.load_state_dict(state["optimiser"])
        self.frames = state["frames"]


def normalized(advantage: torch.Tensor) -> torch.Tensor:
    return (advantage - advantage.mean()) / (advantage.std() + 1e-8)
