"""Proximal policy optimisation with the clipped surrogate (Schulman et al. 2017), on TorchRL's loss.

One update: critic values for every step and its successor, the advantage and value-target estimators,
then ``epochs`` passes of shuffled minibatches through ``ClipPPOLoss``, with learning rate and clip
range optionally annealed linearly to zero over the run's frame budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torchrl.objectives import ClipPPOLoss

from rlplug.training import MetricMean, linear_decay, minibatches, optimiser_step, set_learning_rate


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

    def __init__(self, config: PPOConfig, policy: TensorDictModule, critic: TensorDictModule,
                 estimators: list[TensorDictModule]):
        self.config = config
        self.frames_per_batch = config.frames_per_batch
        self.policy, self.critic, self.estimators = policy, critic, estimators
        self.loss = ClipPPOLoss(
            policy, critic, clip_epsilon=config.clip_epsilon, entropy_bonus=config.entropy_coef > 0,
            entropy_coeff=config.entropy_coef or None, critic_coeff=config.value_coef, loss_critic_type="l2",
            normalize_advantage=config.normalize_advantages, functional=False,
        )
        self.parameters = list(self.loss.parameters())
        self.optimiser = torch.optim.Adam(self.parameters, lr=config.lr, eps=1e-5)
        self.frames = 0

    @torch.no_grad()
    def estimate(self, batch: TensorDictBase) -> TensorDictBase:
        """Fill ``state_value``, ``("next", "state_value")``, then run the estimators in order."""
        self.critic(batch)
        self.critic(batch.get("next"))
        for estimator in self.estimators:
            estimator(batch)
        missing = [k for k in ("advantage", "value_target") if k not in batch.keys()]
        if missing:
            raise RuntimeError(f"PPO needs {' and '.join(missing)} but no estimator wrote it; "
                               f"set algorithm.advantage / algorithm.value_target")
        return batch

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        config = self.config
        self.frames += batch.numel()
        progress = self.frames / config.total_frames
        lr = linear_decay(config.lr, progress) if config.anneal_lr else config.lr
        clip = linear_decay(config.clip_epsilon, progress) if config.anneal_clip else config.clip_epsilon
        set_learning_rate(self.optimiser, lr)
        self.loss.clip_epsilon.fill_(clip)

        flat = self.estimate(batch).reshape(-1)
        metrics = MetricMean()
        for _ in range(config.epochs):
            for minibatch in minibatches(flat, config.minibatch_size):
                losses = self.loss(minibatch)
                total = losses["loss_objective"] + losses["loss_critic"]
                if "loss_entropy" in losses.keys():
                    total = total + losses["loss_entropy"]
                grad_norm = optimiser_step(self.optimiser, total, self.parameters, config.max_grad_norm)
                metrics.add(loss_policy=losses["loss_objective"], loss_value=losses["loss_critic"],
                            clip_fraction=losses["clip_fraction"], kl=losses["kl_approx"], grad_norm=grad_norm)
        return {**metrics.means(), "lr": lr, "clip_epsilon": clip}

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
                "optimiser": self.optimiser.state_dict(), "frames": self.frames}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.optimiser.load_state_dict(state["optimiser"])
        self.frames = state["frames"]
