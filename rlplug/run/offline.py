"""Offline runs: a recipe with a ``[dataset]`` learns from the dataset alone and steps its env only to evaluate.

The run's loop stays the one of every run (:mod:`rlplug.run.schedule`): its collector hands out empty batches
whose size is the number of transitions the next update samples, so ``run.total_frames``, ``eval.every_frames``
and ``run.checkpoint_every_frames`` count samples learned from (gradient steps times ``batch_size``), and an
offline run's metrics, checkpoints and resume are any run's. The algorithm takes the dataset through the optional
``learn_offline`` (:class:`rlplug.registry.protocols.Algorithm`); the dataset is read again when a run is rebuilt
from a checkpoint, which never holds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensordict import TensorDict, TensorDictBase

from rlplug.core.episodes import EpisodeTracker
from rlplug.errors import UserError
from rlplug.plugins.datasets.layout import laid_out
from rlplug.plugins.datasets.minari_format import MinariData
from rlplug.recipe import Recipe
from rlplug.registry import protocols
from rlplug.registry.protocols import capability


class OfflineCollector:
    """Batches of no steps, each as large as the samples of the algorithm's next update: what the run counts."""

    def __init__(self, frames_per_batch: int):
        self.frames_per_batch = frames_per_batch
        self.tracker = EpisodeTracker(1)

    def collect(self) -> TensorDictBase:
        return TensorDict({}, batch_size=[self.frames_per_batch])

    def restart(self, seed: int) -> None:
        pass

    def sync_weights(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


def env_id(table: Mapping[str, Any] | None) -> str | None:
    return None if table is None else table.get("id")


def read_dataset(recipe: Recipe, env) -> TensorDictBase:
    """The recipe's dataset read, checked against its env (before the algorithm is built: a dataset of another env
    is the error to name first), its actions laid out as the env's."""
    assert recipe.dataset is not None
    if recipe.runner.spec.name != "local":
        raise UserError("an offline run steps no env to collect: it runs in this process (runner.use = 'local')",
                        path="runner")
    dataset = recipe.dataset.build()
    recorded_on, trained_on = env_id(dataset.env_table()), env_id(recipe.env.params)
    if recorded_on and trained_on and recorded_on != trained_on:
        raise UserError(f"the dataset was recorded on {recorded_on} and this recipe's env is {trained_on}: an "
                        f"offline run learns from its own env's data (leave [env] out to evaluate on "
                        f"{recorded_on})", path="dataset")
    rescaled = isinstance(dataset, MinariData) and dataset.rescaled_from is not None
    return laid_out(dataset.transitions(str(recipe.run.device)), env.observation_spec, env.action_spec, "dataset",
                    rescaled=rescaled)


def offline_collector(recipe: Recipe, algorithm: protocols.Algorithm, transitions: TensorDictBase) -> OfflineCollector:
    """The dataset's ``transitions`` handed to the algorithm; the run's collector."""
    learn = capability(algorithm, protocols.Algorithm.learn_offline)
    if learn is None:
        raise UserError(f"{recipe.algorithm.spec.name} learns from the experience it collects, not from a "
                        f"dataset; offline algorithms: bc, iql, cql, td3-bc, discrete-iql, discrete-cql (or leave "
                        f"[dataset] out)", path="dataset")
    learn(transitions)
    return OfflineCollector(algorithm.frames_per_batch)
