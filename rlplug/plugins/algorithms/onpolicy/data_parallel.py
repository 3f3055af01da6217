"""The on-policy family computed by several copies at once (:class:`~rlplug.registry.protocols.DataParallel`):
what Ray's gradient workers and learners call, so that a runner needs no more of an algorithm than its protocol.

Each copy prepares its own rollout (or its shard of the batch) as the update prepares a batch (estimates,
advantages), and each minibatch step of the update's epochs is the mean of the copies' gradients on their
shares of one minibatch."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase

from rlplug.core.training import Prepared, share_of
from rlplug.registry import protocols

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.onpolicy.base import OnPolicy

Step = Callable[[int], tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] | None]


class EpochsDataParallel:
    """An on-policy algorithm's update over ``copies`` copies, each holding its own prepared data, every minibatch
    of ``minibatch_size / copies`` rows from each."""

    whole_batch = False

    def __init__(self, algorithm: OnPolicy, copies: int):
        self.algorithm, self.copies = algorithm, copies
        self.share = share_of(algorithm.minibatch_size, copies)
        self.prepared: Prepared | None = None

    def problem(self, what: str, instead: str) -> str | None:
        if protocols.capability(self.algorithm.loss_module, protocols.Loss.adapts_per_minibatch):
            return (f"{type(self.algorithm).__name__}'s loss adapts after every minibatch from that minibatch alone "
                    f"(ppo-kl's beta), which copies computing gradients apart cannot agree on; use {instead}")
        return None

    def take(self, batch: TensorDictBase, frames: int) -> dict[str, float]:
        """``batch``'s estimates with the current weights (target copies refreshed first, as an update starts),
        the schedules at ``frames``; its explained variance."""
        algorithm = self.algorithm
        algorithm.before_update(frames / algorithm.total_frames)
        if algorithm.refresh_targets:
            algorithm.refresh_targets(1.0)
        self.prepared = algorithm.prepare(batch, self.share)
        variance = self.prepared.explained_variance
        return {"explained_variance": math.nan if variance is None else variance}

    def gradients(self, step: int) -> tuple[TensorDictBase, dict[str, torch.Tensor]]:
        prepared = self.prepared
        if prepared is None:
            raise RuntimeError("a gradient step before take(): this copy holds no data")
        return self.algorithm.compute_gradients(prepared.minibatch(step % prepared.steps), grads_to_cpu=False)

    def learn(self, frames: int, step: Step, taken: Mapping[str, Sequence[float]]) -> dict[str, float]:
        """The algorithm's own epochs (:meth:`OnPolicy.learn`) over each copy's minibatches of its share; a lost
        copy ends the update there (its data are gone)."""
        algorithm = self.algorithm
        lr = algorithm.start_update(frames)
        rows = frames // self.copies
        steps = self.prepared.steps if self.prepared is not None else math.ceil(rows / self.share)
        cut = False

        def epoch_step(index: int, diagnostics: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
            nonlocal cut
            answer = None if cut else step(index)
            if answer is None:
                cut = True
                return {}, None
            reported, norms = answer
            reported.pop("loss", None)  # the total, which a local update does not report
            return (reported if diagnostics else {}), norms.get("grad_norm")

        variances = [value for value in taken.get("explained_variance", ()) if not math.isnan(value)]
        variance = sum(variances) / len(variances) if variances and algorithm.critic is not None else None
        return algorithm.learn(steps, epoch_step, lr, variance)

    def follow(self, frames: int) -> None:
        self.algorithm.start_update(frames)

    def become_learner(self, replay: protocols.ReplayBuffer | None) -> None:
        """Nothing to change: an on-policy copy keeps no exploration of its own and no replay."""
