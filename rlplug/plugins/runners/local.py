"""The ``local`` runner: experience collected in the training process, by the env and the very policy the
learner trains (:class:`rlplug.core.collect.Collector`)."""

from __future__ import annotations

from rlplug.core.collect import Collector
from rlplug.core.envs import env_label


class LocalCollector(Collector):
    """:class:`rlplug.core.collect.Collector` with the runner protocol's two no-ops: the collector and the
    learner share the policy's parameters, so there is nothing to synchronise or stop."""

    def sync_weights(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class LocalRunner:
    """Collect in the training process: the env and the policy the learner trains, one after the other."""

    def collector(self, env, policy, frames_per_batch: int, seed: int, recipe=None, **_context) -> LocalCollector:
        if recipe is None:
            return LocalCollector(env, policy, frames_per_batch, seed)
        return LocalCollector(env, policy, frames_per_batch, seed, name=env_label(recipe.env))
