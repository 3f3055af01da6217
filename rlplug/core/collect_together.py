"""Collecting for several seeds' runs at once (``rlplug run --seeds --batched``).

Each seed keeps its own :class:`~rlplug.core.collect.Collector` (its env, seeded as its own run seeds it, its
episode tracker, its restarts); what is shared is the acting: at each step the seeds' observations
``[seeds, envs, ...]`` go through one call of a stacked actor (every seed's policy at once), then each seed's
env takes its share of the actions. Envs are stepped seed by seed rather than as one vector env: the same
cost for gymnasium's synchronous vector envs, which step their copies one by one anyway, while each seed's
env keeps its own running statistics (observation normalisation) and its own seeding, exactly as a run of
that seed alone. Only the array road is taken.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tensordict import TensorDictBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.core.acting import ArrayActor
from rlplug.core.collect import COLUMNS, Collector, array_batch
from rlplug.core.env_members import env_capability
from rlplug.registry import protocols


class CollectorsTogether:
    """One batch for each of ``collectors`` per :meth:`collect`, acting for all of them with ``actor``."""

    def __init__(self, collectors: list[Collector], actor: ArrayActor):
        self.collectors, self.actor = list(collectors), actor

    @staticmethod
    def can_take(collector) -> bool:
        """Whether ``collector`` is rlplug's own on the array road (what stepping together needs)."""
        return isinstance(collector, Collector) and collector.array_actor is not None

    def keep(self, indices: list[int], actor: ArrayActor) -> None:
        """Go on with the collectors at these positions, acting with ``actor`` (stacked for them)."""
        self.collectors, self.actor = [self.collectors[i] for i in indices], actor

    def collect(self) -> list[TensorDictBase]:
        with set_exploration_type(ExplorationType.RANDOM):
            batches = self._collect()
        for collector, batch in zip(self.collectors, batches):
            collector.record(batch)
        return batches

    def _collect(self) -> list[TensorDictBase]:
        collectors, seeds = self.collectors, len(self.collectors)
        envs, steps = collectors[0].envs, collectors[0].steps
        states: list[Any] = []  # each env's numpy observations (reset_arrays')
        steppers = []
        for collector in collectors:
            if collector.step_arrays is None:
                raise ValueError("collectors step together on the array road only (CollectorsTogether.can_take)")
            if collector.state is None:
                collector.state = env_capability(collector.env, protocols.Env.reset_arrays)(seed=collector.seed)
            states.append(collector.state)
            steppers.append(collector.step_arrays)
        observation = np.stack(states)
        buffers: list[np.ndarray | None] = []
        for t in range(steps):
            action, log_prob = self.actor.act(observation)
            transitions = [step(action[k]) for k, step in enumerate(steppers)]
            next_observation, reward, terminated, truncated, following = (np.stack(part) for part in zip(*transitions))
            values = (observation, action, log_prob, next_observation, reward, terminated, truncated)
            if not buffers:  # sized by the first step: [seeds, envs, time, ...] of each value's own dtype
                buffers = [None if v is None else np.empty((seeds, envs, steps, *v.shape[2:]), dtype=v.dtype)
                           for v in values]
            for buffer, value in zip(buffers, values):
                if buffer is not None:
                    buffer[:, :, t] = value
            observation = following
        for k, collector in enumerate(collectors):
            collector.state = observation[k]
        batches = [array_batch(self.actor, collector.env, {key: None if b is None else b[k] for key, b in
                                                            zip(COLUMNS, buffers)}, envs, steps)
                   for k, collector in enumerate(collectors)]
        device = collectors[0].batch_device
        return batches if device is None else [batch.to(device) for batch in batches]
