"""The off-policy family computed by several copies at once (:class:`~rlplug.registry.protocols.DataParallel`)
and its replay held elsewhere (:class:`~rlplug.registry.protocols.ReplayStorage`): what Ray's gradient workers,
learners and replay storages call, so that a runner needs no more of an algorithm than its protocol.

Each copy keeps a replay of its own (a gradient worker's rollouts, or the whole batch on every learner) and
each gradient step is the mean of the copies' gradients on samples of their share of ``batch_size``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from rlplug.core.training import MetricMean, share_of, updates_stopped
from rlplug.registry import protocols

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.offpolicy.base import OffPolicy

Step = Callable[[int], tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] | None]


class ReplayDataParallel:
    """An off-policy algorithm's update over ``copies`` copies: each stores what it takes in its own replay, and
    every gradient step is the mean of their gradients on samples of ``batch_size / copies`` each."""

    whole_batch = True

    def __init__(self, algorithm: OffPolicy, copies: int):
        self.algorithm, self.copies = algorithm, copies
        self.share = share_of(algorithm.config.batch_size, copies)
        self.drawn: Iterator[TensorDictBase] | None = None
        #: whether this copy took the batch it learns from (a learner: :meth:`learn` then counts its frames once)
        self.took = False

    def problem(self, what: str, instead: str) -> str | None:
        algorithm = self.algorithm
        if algorithm.preprocessor is not None:
            return (f"with {what}, each copy's observation_preprocessor would learn its own statistics from its "
                    f"own data; use the env's normalize_observations, or {instead}")
        if algorithm.learners.scaler is not None:
            return (f"float16 mixed precision scales the gradients where it steps them, so {what} cannot compute "
                    f"them in one place and apply them in another; set algorithm.mixed_precision = false, or "
                    f"{instead}")
        return None

    def take(self, batch: TensorDictBase, frames: int) -> dict[str, float]:
        """``batch`` stored, the schedules (exploration) at ``frames``; this copy's buffer size."""
        algorithm = self.algorithm
        algorithm.store(batch)
        algorithm.frames = frames
        algorithm.follow_schedules()
        self.drawn, self.took = None, True
        return {"buffer_size": float(len(algorithm.replay))}

    def gradients(self, step: int) -> tuple[TensorDictBase, dict[str, torch.Tensor]]:
        """The gradients on this step's sample of this copy's share (the update's samples drawn at its first
        step, in one call where the buffer can); a prioritised buffer's new priorities from its TD errors."""
        algorithm = self.algorithm
        sample = next(self.drawn, None) if self.drawn is not None else None
        if sample is None:
            self.drawn = algorithm.draw(self.share)
            sample = next(self.drawn)
        gradients, reported = algorithm.compute_gradients(sample, grads_to_cpu=False)
        algorithm.new_priorities(sample, sample.get("td_error", None))
        return gradients, reported

    def learn(self, frames: int, step: Step, taken: Mapping[str, Sequence[float]]) -> dict[str, float]:
        """The schedules at ``frames`` more, then ``gradient_steps`` steps, from ``learning_starts`` on and once
        every copy's buffer holds its share of a sample."""
        algorithm = self.algorithm
        if self.took:  # take() moved the count to the run's frames already; follow_frames counts them once
            algorithm.frames -= frames
            self.took = False
        result = algorithm.follow_frames(frames)
        sizes = taken["buffer_size"]
        result["buffer_size"] = float(sum(sizes))
        metrics = MetricMean()
        if algorithm.frames >= algorithm.config.learning_starts and min(sizes) >= self.share:
            for index in range(algorithm.config.gradient_steps):
                if updates_stopped():
                    break
                answer = step(index)
                if answer is None:
                    break
                reported, norms = answer
                metrics.add(**reported, **norms)
        return {**result, **metrics.means(), **algorithm.extra_metrics()}

    def follow(self, frames: int) -> None:
        self.algorithm.follow_frames(frames)

    def become_learner(self, replay: protocols.ReplayBuffer | None) -> None:
        self.algorithm.noise = None
        if replay is not None:
            self.algorithm.install_replay(replay, stored_elsewhere=True)


def cadence(frames_per_batch: int, unit: int, gradient_steps: int) -> tuple[int, int]:
    """``frames_per_batch`` rounded up to a multiple of ``unit``, and ``gradient_steps`` scaled with it (the
    nearest whole number, at least one)."""
    frames = -(-frames_per_batch // unit) * unit
    return frames, max(1, round(gradient_steps * frames / frames_per_batch))


def rounded_cadence(algorithm: OffPolicy, unit: int) -> str | None:
    """:meth:`OffPolicy.rounded_cadence`: ``frames_per_batch`` rounded up to a multiple of ``unit`` (Ray's
    workers' envs, each stepping alike), ``gradient_steps`` scaled with it so that the gradient steps per frame
    stay the recipe's; the change in words (None where the frames already split)."""
    config, before = algorithm.config, algorithm.frames_per_batch
    if before % unit == 0:
        return None
    frames, steps = cadence(before, unit, config.gradient_steps)
    envs = before // config.steps_per_update
    algorithm.config = replace(config, steps_per_update=frames // envs, gradient_steps=steps)
    algorithm.frames_per_batch = frames
    return (f"each update takes {frames} ({frames // unit} env step(s) on each worker) and {steps} gradient "
            f"step(s) (algorithm.steps_per_update = {config.steps_per_update}, algorithm.gradient_steps = "
            f"{config.gradient_steps}): the same gradient steps per frame")


class OffPolicyReplayStorage:
    """An off-policy algorithm's replay as storages elsewhere hold it; ``transitions``: what the algorithm stores
    of a rollout (picklable), which the workers then write."""

    def __init__(self, algorithm: OffPolicy, transitions: Callable[[TensorDictBase], TensorDictBase]):
        self.algorithm, self.transitions = algorithm, transitions
        self.buffer: Any = algorithm.config.replay_buffer
        self.capacity = int(getattr(algorithm.replay, "capacity", 0))

    def problem(self) -> str | None:
        from rlplug.plugins.replay_buffers.buffers import ReplayBuffer

        algorithm = self.algorithm
        if algorithm.preprocessor is not None:
            return ("the observation_preprocessor learns its statistics from the observations the learner stores, "
                    "and with storages the workers store them; use the env's normalize_observations, or "
                    "runner.storages = 0")
        if not isinstance(algorithm.replay, ReplayBuffer):
            return (f"replay storages hold rlplug's 'uniform' or 'prioritized' buffers, not "
                    f"{type(algorithm.replay).__name__}; use one of those, or runner.storages = 0")
        if algorithm.replay.storage_kind != "memory":
            return ("replay storages keep their transitions in their Ray actors' memory; set "
                    "algorithm.replay_buffer.storage = 'memory', or runner.storages = 0")
        return None

    def writer(self) -> Callable[[TensorDictBase], TensorDictBase]:
        return self.transitions

    def install(self, replay: protocols.ReplayBuffer) -> None:
        self.algorithm.install_replay(replay, stored_elsewhere=True)
