"""Collecting for several seeds' runs at once (``rlplug run --seeds --batched``).

Each seed keeps its own :class:`~rlplug.core.collect.Collector` (its env, seeded as its own run seeds it, its
episode tracker, its restarts); what is shared is the acting: at each step the seeds' observations
``[seeds, envs, ...]`` go through one call of a stacked actor (every seed's policy at once). The envs are then
stepped as one where they offer it (``steps_together``: the ``gym`` env's copies of an id with an array env,
e.g. CartPole, every seed's copies computed as one array, each copy still started by itself, so each seed's
episodes are those of its run alone); else seed by seed, each env taking its share of the actions, which
costs the same for gymnasium's synchronous vector envs (they step their copies one by one anyway) and keeps
each env's own running statistics (observation normalisation). Only the array road is taken.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tensordict import TensorDictBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.core.acting import ArrayActor
from rlplug.core.collect import Collector, array_batch
from rlplug.core.env_members import env_member
from rlplug.core.rollout import ArrayRoad, StepBuffers, rollout


class CollectorsTogether:
    """One batch for each of ``collectors`` per :meth:`collect`, acting for all of them with ``actor``."""

    def __init__(self, collectors: list[Collector], actor: ArrayActor):
        self.collectors, self.actor = list(collectors), actor
        join = env_member(self.collectors[0].env, "steps_together")
        #: every env's step as one (None: seed by seed); told of each env's restarts and of those that leave
        self.arrays = join([collector.env for collector in self.collectors]) if join else None

    @staticmethod
    def can_take(collector) -> bool:
        """Whether ``collector`` is rlplug's own on the array road (what stepping together needs)."""
        return isinstance(collector, Collector) and collector.array_actor is not None

    def keep(self, indices: list[int], actor: ArrayActor) -> None:
        """Go on with the collectors at these positions, acting with ``actor`` (stacked for them)."""
        self.collectors, self.actor = [self.collectors[i] for i in indices], actor
        if self.arrays is not None:
            self.arrays.keep(indices)

    def collect(self) -> list[TensorDictBase]:
        with set_exploration_type(ExplorationType.RANDOM):
            batches = self._collect()
        for collector, batch in zip(self.collectors, batches):
            collector.record(batch)
        return batches

    def _collect(self) -> list[TensorDictBase]:
        collectors = self.collectors
        envs, steps = collectors[0].envs, collectors[0].steps
        steppers, observations = [], []
        for k, collector in enumerate(collectors):
            if collector.step_arrays is None:
                raise ValueError("collectors step together on the array road only (CollectorsTogether.can_take)")
            if collector.state is None:
                collector.state = collector.start()
                if self.arrays is not None:
                    self.arrays.started(k)
            steppers.append(collector.step_arrays)
            observations.append(collector.state)
        road = ArrayRoad(None, self.actor, step_arrays=self.arrays or stepped_together(steppers))
        buffers = StepBuffers((len(collectors), envs), steps)
        observation = rollout(road, np.stack(observations), steps=steps, record=buffers)
        for k, collector in enumerate(collectors):
            collector.state = observation[k]
        columns = buffers.columns()
        batches = [array_batch(self.actor, collector.env, {key: None if b is None else b[k] for key, b in
                                                            columns.items()}, envs, steps)
                   for k, collector in enumerate(collectors)]
        device = collectors[0].batch_device
        return batches if device is None else [batch.to(device) for batch in batches]


def stepped_together(steppers: list[Callable]) -> Callable:
    """One ``step_arrays`` of several envs: env ``k`` takes ``action[k]``; their 5-tuples stacked ``[seeds, ...]``."""
    def step_all(action: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(np.stack(part) for part in zip(*(stepper(action[k]) for k, stepper in enumerate(steppers))))
    return step_all
