"""Gradient mode (``mode = "gradients"``): data-parallel training in pytorchrl's style, over the Algorithm
protocol's ``get_weights``, ``set_weights``, ``compute_gradients`` and ``apply_gradients``.

- On-policy: each worker keeps its own rollout, prepared as the on-policy update prepares a batch; for each
  minibatch step of the update every worker computes the gradient on its share with the current weights,
  and the learner averages them and takes the optimiser step, inside the algorithm's own epoch loop
  (:meth:`OnPolicy.learn`).
- Off-policy: each worker stores its rollouts in its own replay buffer; for each of the update's
  ``gradient_steps`` every worker samples its share of ``batch_size`` and computes the gradients of every
  learner that steps (actor, critics, entropy coefficient) with the current weights, target copies included;
  the learner averages them, applies them (which moves the targets as a local step does) and the workers get
  the new weights with the next step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlplug.core.training import MetricMean, NonFiniteError, Prepared, updates_stopped
from rlplug.core.transformed import env_rewards
from rlplug.plugins.algorithms.offpolicy.base import OffPolicy
from rlplug.plugins.algorithms.onpolicy.base import OnPolicy
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
    if isinstance(algorithm, OffPolicy):
        return offpolicy_problem(algorithm, what, instead)
    if not isinstance(algorithm, OnPolicy):
        return f"{what} trains rlplug's on-policy and off-policy algorithms, not {name}"
    if capability(algorithm.loss_module, protocols.Loss.adapts_per_minibatch):
        return (f"{name}'s loss adapts after every minibatch from that minibatch alone (ppo-kl's beta), which "
                f"copies computing gradients apart cannot agree on; use {instead}")
    return None


def offpolicy_problem(algorithm: OffPolicy, what: str, instead: str) -> str | None:
    if algorithm.preprocessor is not None:
        return (f"with {what}, each copy's observation_preprocessor would learn its own statistics from its own "
                f"data; use the env's normalize_observations, or {instead}")
    if algorithm.learners.scaler is not None:
        return (f"float16 mixed precision scales the gradients where it steps them, so {what} cannot compute them "
                f"in one place and apply them in another; set algorithm.mixed_precision = false, or {instead}")
    return None


def worker_share(size: int, workers: int) -> int:
    """Each worker's share of a minibatch (or replay sample) of ``size``: together they make the learner's."""
    return math.ceil(size / workers)


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

    def build(self, env, seed: int) -> OnPolicyGradients | OffPolicyGradients:
        """The copy for the worker seeded ``seed``: its own seed, so that workers' replay samples (drawn from a
        generator seeded with it) do not pick the same positions in their buffers."""
        run = self.recipe.run
        algorithm = self.recipe.algorithm.build(observation_spec=env.observation_spec, action_spec=env.action_spec,
                                                device="cpu", seed=seed, total_frames=run.total_frames)
        if isinstance(algorithm, OffPolicy):
            return OffPolicyGradients(algorithm, self.workers)
        return OnPolicyGradients(algorithm, self.workers)


class OnPolicyGradients:
    """An on-policy worker's side of gradient mode: its rollout prepared (:meth:`OnPolicy.prepare`: estimates,
    advantages), then one minibatch gradient per :meth:`step`, in the learner's order (a new partition each
    epoch)."""

    def __init__(self, algorithm: OnPolicy, workers: int):
        self.algorithm, self.workers = algorithm, workers
        self.prepared: Prepared | None = None

    def prepare(self, batch: TensorDictBase, frames: int) -> TensorDictBase:
        """Estimates for ``batch`` with the current weights, ``frames`` collected in all by then; its tracking
        (:func:`tracking`) with this worker's explained variance."""
        algorithm = self.algorithm
        algorithm.before_update(frames / algorithm.total_frames)
        prepared = self.prepared = algorithm.prepare(batch, worker_share(algorithm.minibatch_size, self.workers))
        variance = prepared.explained_variance
        explained = torch.full(batch.batch_size, math.nan if variance is None else variance, dtype=torch.float64)
        return tracking(batch, explained_variance=explained)

    def step(self, step: int) -> TensorDictBase:
        """The gradient of minibatch ``step`` (counting over all epochs) with the current weights."""
        prepared = self.prepared
        if prepared is None:
            raise RuntimeError("a gradient step before prepare(): this worker holds no rollout")
        return gradient_message(*self.algorithm.compute_gradients(prepared.minibatch(step % prepared.steps)))


class OffPolicyGradients:
    """An off-policy worker's side of gradient mode: its rollouts stored in its own replay buffer (its
    exploration following the run's frames), then per :meth:`step` the gradients on a sample of its share of
    ``batch_size`` (a prioritised buffer's priorities from that sample's TD errors)."""

    def __init__(self, algorithm: OffPolicy, workers: int):
        self.algorithm = algorithm
        self.batch_size = worker_share(algorithm.config.batch_size, workers)

    def prepare(self, batch: TensorDictBase, frames: int) -> TensorDictBase:
        """``batch`` stored, the schedules at ``frames`` collected in all; its tracking (:func:`tracking`) with
        this worker's buffer size."""
        algorithm = self.algorithm
        algorithm.store(batch)
        algorithm.frames = frames
        algorithm.follow_schedules()
        return tracking(batch, buffer_size=torch.full(batch.batch_size, len(algorithm.replay), dtype=torch.int64))

    def step(self, step: int) -> TensorDictBase:
        algorithm = self.algorithm
        sample = algorithm.sample(self.batch_size)
        message = gradient_message(*algorithm.compute_gradients(sample))
        algorithm.new_priorities(sample, sample.get("td_error", None))
        return message


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
    """The algorithm's update in gradient mode (the family's form of it)."""
    if isinstance(algorithm, OffPolicy):
        return offpolicy_update(collection, algorithm, batch)
    return onpolicy_update(collection, algorithm, batch)


def onpolicy_update(collection, algorithm: OnPolicy, batch: TensorDictBase) -> dict[str, float]:
    """Its own epoch loop (:meth:`OnPolicy.learn`), each step's gradient the mean of the workers' on their
    shares of the minibatch. A worker that dies ends the update there (its rollout is gone); the next update
    starts afresh."""
    lr = algorithm.start_update(batch.numel())
    steps = math.ceil(collection.worker_frames / worker_share(algorithm.minibatch_size, collection.runner.workers))
    taken = 0
    cut = False

    def step(index: int, diagnostics: bool):
        nonlocal taken, cut
        answer = None if cut else gradients_of(collection, taken, algorithm.get_weights())
        if answer is None:
            cut = True
            return {}, None
        taken += 1
        gradients, losses = answer
        if not math.isfinite(losses.pop("loss")):
            raise NonFiniteError("the loss")
        norm = algorithm.apply_gradients(gradients).get("grad_norm")
        return ({key: torch.tensor(value) for key, value in losses.items()} if diagnostics else {}), norm

    variance = collection.explained_variance if algorithm.critic is not None else None
    return algorithm.learn(steps, step, lr, variance)


def offpolicy_update(collection, algorithm: OffPolicy, batch: TensorDictBase) -> dict[str, float]:
    """The schedules at the frames the workers collected, then ``gradient_steps`` steps from the workers'
    gradients (from ``learning_starts`` on, once every worker's buffer holds its share of a batch). A worker
    that dies ends the update there."""
    result = algorithm.follow_frames(batch.numel())
    result["buffer_size"] = float(collection.buffer_sizes.sum())
    share = worker_share(algorithm.config.batch_size, collection.runner.workers)
    metrics = MetricMean()
    if algorithm.frames >= algorithm.config.learning_starts and int(collection.buffer_sizes.min()) >= share:
        for _ in range(algorithm.config.gradient_steps):
            if updates_stopped():
                break
            answer = gradients_of(collection, algorithm.steps, algorithm.get_weights())
            if answer is None:
                break
            gradients, losses = answer
            norms = algorithm.apply_gradients(gradients)
            metrics.add(**{key: torch.tensor(value) for key, value in losses.items()}, **norms)
    return {**result, **metrics.means(), **algorithm.extra_metrics()}
