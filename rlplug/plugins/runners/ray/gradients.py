"""Gradient mode (``mode = "gradients"``): data-parallel on-policy training in pytorchrl's style. Each worker
keeps its own rollout, prepared as the on-policy update prepares a batch; for each minibatch step of the
update every worker computes the gradient on its share with the current weights, and the learner averages
them and takes the optimiser step, inside the algorithm's own epoch loop (:meth:`OnPolicy.learn`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlplug.core.training import NonFiniteError
from rlplug.core.transformed import env_rewards
from rlplug.plugins.algorithms.onpolicy.base import OnPolicy, Prepared
from rlplug.plugins.runners.ray.cluster import lost_errors, ray_module
from rlplug.registry import protocols
from rlplug.registry.protocols import capability


def gradient_mode_problem(algorithm) -> str | None:
    """Why ``algorithm`` cannot train with gradient workers, or None."""
    name = type(algorithm).__name__
    if capability(algorithm, protocols.Algorithm.asynchronous):
        return (f"mode = 'gradients' is synchronous data-parallel training, and {name} learns from asynchronous "
                f"experience; use mode = 'experience'")
    if not isinstance(algorithm, OnPolicy):
        return f"mode = 'gradients' trains the on-policy algorithms (ppo, a2c, vpg, surrogate), not {name}"
    if capability(algorithm.loss_module, protocols.Loss.adapts_per_minibatch):
        return (f"{name}'s loss adapts after every minibatch from that minibatch alone (ppo-kl's beta), which "
                f"workers computing gradients apart cannot agree on; use mode = 'experience'")
    return None


def worker_minibatch(algorithm: OnPolicy, workers: int) -> int:
    """Each worker's share of the update's minibatch: together they make the learner's minibatch."""
    return math.ceil(algorithm.minibatch_size / workers)


@dataclass(frozen=True)
class GradientWorkerSpec:
    """What a gradient worker builds its algorithm copy from (pickled into the Ray actor)."""

    recipe: Any
    workers: int

    def build(self, env) -> GradientWorker:
        run = self.recipe.run
        algorithm = self.recipe.algorithm.build(observation_spec=env.observation_spec, action_spec=env.action_spec,
                                                device="cpu", seed=run.seed, total_frames=run.total_frames)
        return GradientWorker(algorithm, self.workers)


class GradientWorker:
    """A worker's side of gradient mode: its rollout prepared (:meth:`OnPolicy.prepare`: estimates, advantages),
    then one minibatch gradient per :meth:`step`, in the learner's order (a new partition each epoch)."""

    def __init__(self, algorithm: OnPolicy, workers: int):
        self.algorithm, self.workers = algorithm, workers
        self.prepared: Prepared | None = None

    def prepare(self, batch: TensorDictBase, progress: float) -> TensorDictBase:
        """Estimates for ``batch`` with the current weights; what the driver needs to track it (rewards, dones,
        this worker's explained variance) is returned."""
        algorithm = self.algorithm
        algorithm.before_update(progress)
        prepared = self.prepared = algorithm.prepare(batch, worker_minibatch(algorithm, self.workers))
        variance = prepared.explained_variance
        explained = torch.full(batch.batch_size, math.nan if variance is None else variance, dtype=torch.float64)
        return TensorDict({"next": {"reward": env_rewards(batch), "done": batch.get(("next", "done"))},
                           "explained_variance": explained},
                          batch_size=batch.batch_size)

    def step(self, step: int) -> TensorDictBase:
        """The gradient of minibatch ``step`` (counting over all epochs) with the current weights."""
        prepared = self.prepared
        if prepared is None:
            raise RuntimeError("a gradient step before prepare(): this worker holds no rollout")
        epoch, index = divmod(step, prepared.steps)
        grads, losses = self.algorithm.compute_gradients(prepared.minibatch(index),
                                                         diagnostics=epoch == self.algorithm.config.epochs - 1)
        return TensorDict({"grads": {str(i): g for i, g in enumerate(grads)},
                           "losses": {k: v.reshape(()).double() for k, v in losses.items()}}, []).consolidate()


def gradient_update(collection, algorithm: OnPolicy, batch: TensorDictBase) -> dict[str, float]:
    """The algorithm's update in gradient mode: its own epoch loop (:meth:`OnPolicy.learn`), each step's
    gradient the mean of the workers' on their shares of the minibatch. A worker that dies ends the update
    there (its rollout is gone); the next update starts afresh."""
    ray, workers = ray_module(), collection.runner.workers
    lr = algorithm.start_update(batch.numel())
    steps = math.ceil(collection.worker_frames / worker_minibatch(algorithm, workers))
    taken = 0
    cut = False

    def step(index: int, diagnostics: bool):
        nonlocal taken, cut
        if cut:
            return {}, None
        weights = ray.put(algorithm.get_weights())
        try:
            results = collection.ray_collector.map_fn("gradients", [(taken, weights)] * workers)
        except lost_errors() as error:
            collection.worker_died(error)
            cut = True
            return {}, None
        taken += 1
        losses = {key: float(np.mean([r.get(("losses", key)).item() for r in results]))
                  for key in results[0].get("losses").keys()}
        if not math.isfinite(losses.pop("loss")):
            raise NonFiniteError("the loss")
        grads = [torch.stack([r.get(("grads", str(i))) for r in results]).mean(0)
                 for i in range(len(algorithm.parameters))]
        return {key: torch.tensor(value) for key, value in losses.items()}, algorithm.apply_gradients(grads)

    variance = collection.explained_variance if algorithm.critic is not None else None
    return algorithm.learn(steps, step, lr, variance)
