"""Datasets: recorded experience an offline run learns from (a recipe's top-level ``[dataset]``). ``minari``
reads a Minari dataset from a local directory or by id from Minari's local root; nothing is ever downloaded
during a run. Torch-free: building one reads its metadata only (:mod:`rlplug.plugins.datasets.minari_format`)."""

from __future__ import annotations

from typing import Annotated

from rlplug.errors import UserError
from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Check


def id_problem(dataset_id: str) -> str | None:
    from rlplug.plugins.datasets.minari_format import DATASET_ID

    if DATASET_ID.fullmatch(dataset_id):
        return None
    return f"'{dataset_id}' is not a Minari dataset id ((namespace/)name-vN, e.g. mujoco/pusher/expert-v0)"


def make_minari(
    #: the dataset's directory: the --out of rlplug record, or any Minari dataset's (the one holding data/)
    path: str | None = None,
    #: or a dataset id in Minari's local root (MINARI_DATASETS_PATH, else ~/.minari/datasets); never downloaded:
    #: fetch it first with 'minari download ID'
    id: Annotated[str, Check(id_problem)] | None = None,
    #: continuous actions mapped from the dataset's action bounds onto [-1, 1], and the env the dataset names given
    #: gymnasium's RescaleAction(-1, 1) to match: for losses that assume that range (TorchRL's CQLLoss draws its
    #: random actions from it); a recipe's own [env] must then act in [-1, 1] too
    rescale_actions: bool = False,
):
    """A Minari dataset (https://minari.farama.org), read with minari itself; needs ``pip install
    "rlplug[offline]"``. Observations, actions, rewards, terminations and truncations are read; infos are not."""
    from pathlib import Path

    from rlplug.plugins.datasets.minari_format import MinariData, minari_root

    if (path is None) == (id is None):
        raise UserError("give the dataset's path or its id (one of them), e.g. --set dataset.path=DIR",
                        path="dataset.path")
    if path is not None:
        return MinariData(Path(path), "dataset.path", rescale_actions=rescale_actions)
    return MinariData(minari_root() / str(id), "dataset.id", rescale_actions=rescale_actions)


@hookimpl
def rlplug_register_datasets(register):
    register("minari", make_minari)
