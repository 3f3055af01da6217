"""Gradient mode (``mode = "gradients"``): data-parallel training in pytorchrl's style, over the Algorithm
protocol's ``get_weights``, ``set_weights``, ``compute_gradients`` and ``apply_gradients`` and its
:class:`~rlplug.registry.protocols.DataParallel` (``Algorithm.data_parallel``), which says what a worker's share
is and how the update's steps go (the kit's on-policy family: each worker prepares its own rollout and computes
each minibatch step's gradient on its share; the off-policy family: each worker stores its rollouts in its own
replay and computes each gradient step's gradients on a sample of its share of ``batch_size``).

Each worker builds its own copy of the algorithm; for every gradient step the learner (the driver's copy) sends
its weights, averages the workers' gradients and takes the step, which moves its targets as a local step does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlplug.core.training import NonFiniteError
from rlplug.core.transformed import env_rewards
from rlplug.plugins.runners.ray.cluster import lost_errors, ray_module
from rlplug.registry import protocols
from rlplug.registry.protocols import capability


def gradient_mode_problem(algorithm, what: str = "mode = 'gradients'",
                          instead: str = "mode = 'experience'") -> str | None:
    """Why ``algorithm`` cannot train data-parallel (``what``: gradient workers, or several learners), or None;
    ``instead`` is the setting that trains it."""
    name = type(algorithm).__name__
    if capability(algorithm, protocols.Algorithm.asynchronous):
        return (f"{what} is synchronous data-parallel training, and {name} learns from asynchronous "
                f"experience; use {instead}")
    data_parallel = capability(algorithm, protocols.Algorithm.data_parallel)
    if data_parallel is None:
        return (f"{what} needs an algorithm whose update copies can compute apart (Algorithm.data_parallel, which "
                f"the kit's families have), and {name} has none; use {instead}")
    return data_parallel(1).problem(what, instead)


def averaged(parts: list[TensorDictBase]) -> TensorDictBase:
    """The mean of the workers' gradients (and batch-norm statistics), entry by entry; a count (the batches a
    batch-norm layer has seen, the same on every worker) is the first worker's."""
    return parts[0].apply(lambda *tensors: torch.stack(tensors).mean(0) if tensors[0].is_floating_point()
                          else tensors[0], *parts[1:])


def tracking(batch: TensorDictBase, **extra: torch.Tensor) -> TensorDictBase:
    """What the driver needs of a worker's rollout to track it (rewards, dones), with ``extra`` per env row."""
    return TensorDict({"next": {"reward": env_rewards(batch), "done": batch.get(("next", "done"))}, **extra},
                      batch_size=batch.batch_size)


@dataclass(frozen=True)
class GradientWorkerSpec:
    """What a gradient worker builds its algorithm copy from (pickled into the Ray actor)."""

    recipe: Any
    workers: int

    def build(self, env, seed: int) -> GradientWorker:
        """The copy for the worker seeded ``seed``: its own seed, so that workers' replay samples (drawn from a
        generator seeded with it) do not pick the same positions in their buffers."""
        run = self.recipe.run
        algorithm = self.recipe.algorithm.build(observation_spec=env.observation_spec, action_spec=env.action_spec,
                                                device="cpu", seed=seed, total_frames=run.total_frames)
        return GradientWorker(algorithm, algorithm.data_parallel(self.workers))


@dataclass
class GradientWorker:
    """A worker's side of gradient mode: its copy of the algorithm, and that copy's share of each update."""

    algorithm: Any
    parallel: protocols.DataParallel

    def prepare(self, batch: TensorDictBase, frames: int) -> TensorDictBase:
        """``batch`` (this worker's rollout) taken with the current weights, ``frames`` collected in all by then;
        its tracking (:func:`tracking`) with what the copy reports of it on every row."""
        taken = self.parallel.take(batch, frames)
        return tracking(batch, **{key: torch.full(batch.batch_size, float(value), dtype=torch.float64)
                                  for key, value in taken.items()})

    def step(self, step: int) -> TensorDictBase:
        """The gradients of gradient step ``step`` with the current weights."""
        return gradient_message(*self.parallel.gradients(step))


def gradient_message(gradients: TensorDictBase, reported: dict[str, torch.Tensor]) -> TensorDictBase:
    """A worker's answer: its gradients and what the loss reported, in one buffer."""
    return TensorDict({"grads": gradients, "losses": {k: v.reshape(()).double() for k, v in reported.items()}},
                      []).consolidate()


def gradients_of(collection, step: int, weights: TensorDictBase) -> tuple[TensorDictBase, dict[str, float]] | None:
    """Every worker's gradients for ``step`` with ``weights``, averaged, and the mean of what they reported;
    None where a worker died (its data is gone: the update ends there)."""
    ray = ray_module()
    try:
        results = collection.ray_collector.map_fn("gradients", [(step, ray.put(weights))] * collection.runner.workers)
    except lost_errors() as error:
        collection.worker_died(error)
        return None
    losses = {key: float(np.mean([r.get(("losses", key)).item() for r in results]))
              for key in results[0].get("losses").keys()}
    return averaged([r.get("grads") for r in results]), losses


def gradient_update(collection, algorithm, batch: TensorDictBase) -> dict[str, float]:
    """The algorithm's update in gradient mode: its :class:`~rlplug.registry.protocols.DataParallel` ``learn``,
    each step's gradients the mean of the workers'. A worker that dies ends the update there (its data are
    gone); the next update starts afresh."""

    def step(index: int):
        answer = gradients_of(collection, index, algorithm.get_weights())
        if answer is None:
            return None
        gradients, losses = answer
        if not math.isfinite(losses.get("loss", 0.0)):
            raise NonFiniteError("the loss")
        return {key: torch.tensor(value) for key, value in losses.items()}, algorithm.apply_gradients(gradients)

    return collection.parallel.learn(batch.numel(), step, collection.taken)
