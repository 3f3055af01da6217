"""Minari datasets on disk, read and written with minari's own storage classes.

A dataset is a directory ``DIR`` holding ``DIR/data/metadata.json`` and the episodes (``main_data.hdf5`` in
minari's default format): the layout ``minari.load_dataset(ID)`` reads under ``MINARI_DATASETS_PATH/ID``. rlplug
adds three metadata keys of its own: ``rlplug_env`` (the recipe's ``[env]`` table the data was recorded on, as
JSON), ``rlplug_recipe`` (the whole resolved recipe, TOML) and ``rlplug_behaviour`` (how the actions were chosen).

TorchRL's ``MinariExperienceReplay`` was the first choice for reading; it takes a dataset by id only, downloads
unless told to read minari's local root, and writes a processed copy into a root of its own: a run must read a
local path and write nothing outside its run directory, so the episodes are read here with ``MinariStorage``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from rlplug.errors import UserError

#: minari's id form: ``(namespace/)name-vN``
DATASET_ID = re.compile(r"(?:[\w.-]+/)?[\w.-]+-v\d+")
MAKE_ONE = ("record one with 'rlplug record RUN_DIR --episodes N --out DIR', or fetch one with 'minari download "
            "ID' (which writes it under Minari's root)")


def minari_root() -> Path:
    """Where minari keeps datasets by id: ``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    return Path(os.environ.get("MINARI_DATASETS_PATH") or Path.home() / ".minari" / "datasets")


def data_folder(path: Path) -> Path:
    """The folder holding ``metadata.json``: ``path/data`` (minari's layout), or ``path`` itself."""
    return path / "data" if (path / "data").is_dir() else path


def read_metadata(path: Path, key: str) -> dict[str, Any]:
    """The dataset's raw metadata (JSON, no torch, no h5py), or a one-line error at ``key`` saying what is wrong."""
    if not path.exists():
        raise UserError(f"no Minari dataset at {path}; {MAKE_ONE}", path=key)
    if not path.is_dir():
        raise UserError(f"{path} is a file; a Minari dataset is a directory holding data/metadata.json", path=key)
    file = data_folder(path) / "metadata.json"
    if not file.is_file():
        raise UserError(f"{path} is not a Minari dataset (no data/metadata.json in it); {MAKE_ONE}", path=key)
    try:
        metadata = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UserError(f"{file}: not a Minari dataset's metadata ({type(error).__name__}: {error})",
                        path=key) from None
    if not isinstance(metadata, dict) or not {"data_format", "observation_space", "action_space"} <= set(metadata):
        raise UserError(f"{file}: not a Minari dataset's metadata (no data_format, observation_space or "
                        f"action_space)", path=key)
    if not metadata.get("total_steps"):
        raise UserError(f"{path}: the dataset is empty (0 steps); record episodes into it first", path=key)
    return metadata


#: Where a dataset is read (its key path) -> the key that rescales its actions onto [-1, 1].
RESCALE_KEYS = {"dataset": "dataset.rescale_actions",
                "algorithm.replay_buffer.prefill": "algorithm.replay_buffer.prefill_rescale_actions"}
#: gymnasium's wrapper that makes an env act in [-1, 1], as a recipe's ``env.wrappers`` entry
UNIT_ACTIONS = {"name": "RescaleAction", "kwargs": {"min_action": -1.0, "max_action": 1.0}}


def bounds_to_rescale(metadata: dict[str, Any], key: str) -> tuple[list[float], list[float]] | None:
    """The dataset's continuous action bounds (low, high) to rescale from; None where they are [-1, 1] already. One
    line at ``key`` where its actions have no finite bounds to rescale (a discrete space, an unbounded box)."""
    import math

    try:
        space = json.loads(metadata["action_space"])
        low, high = [float(x) for x in space["low"]], [float(x) for x in space["high"]]
    except (TypeError, ValueError, KeyError):
        raise UserError(f"the dataset's actions are not a Box ({str(metadata.get('action_space'))[:80]}): only "
                        f"continuous actions are rescaled; leave rescale_actions out", path=key) from None
    if not all(math.isfinite(x) for x in low + high) or any(lo >= hi for lo, hi in zip(low, high)):
        raise UserError(f"the dataset's action bounds are not finite ({low} to {high}): there is no range to "
                        f"rescale from; leave rescale_actions out", path=key)
    return None if set(low) == {-1.0} and set(high) == {1.0} else (low, high)


def env_table(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The recipe ``[env]`` table of the env the data was recorded on: rlplug's own where ``record`` wrote it,
    else a ``gym`` env of the gymnasium spec minari keeps; None where the dataset names no env."""
    if isinstance(metadata.get("rlplug_env"), str):
        own = json.loads(metadata["rlplug_env"])
        own.pop("num_envs", None)
        return own
    spec = metadata.get("env_spec")
    if not isinstance(spec, str):
        return None
    spec_data = json.loads(spec)
    table: dict[str, Any] = {"use": "gym", "id": spec_data["id"]}
    if spec_data.get("max_episode_steps"):
        table["max_episode_steps"] = int(spec_data["max_episode_steps"])
    if spec_data.get("kwargs"):
        table["kwargs"] = spec_data["kwargs"]
    return table


def load_episodes(path: Path, key: str) -> list[dict[str, Any]]:
    """Every episode as numpy arrays (``observations`` one longer than ``actions``), read by minari; a file that
    does not read is one line at ``key``."""
    from minari.dataset.minari_storage import MinariStorage

    folder = data_folder(path)
    try:
        storage = MinariStorage.read(folder)
        episodes = list(storage.get_episodes(range(storage.total_episodes)))
    except Exception as error:  # h5py's and minari's errors for a damaged file are of many types
        detail = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        raise UserError(f"{path}: the dataset's episodes do not read ({detail}); the files are damaged or were left "
                        f"half written: record it again", path=key) from None
    if not episodes or not sum(len(episode["rewards"]) for episode in episodes):
        raise UserError(f"{path}: the dataset is empty (no steps)", path=key)
    return episodes


def new_dataset_id(out: Path) -> str:
    """The id a dataset written to ``out`` takes: its folder's name where that is a minari id (``name-vN``), so
    that ``minari.load_dataset`` finds it under a root that holds it, else the name with ``-v0``."""
    name = re.sub(r"[^\w.-]+", "-", out.name).strip("-") or "dataset"
    return name if DATASET_ID.fullmatch(name) else f"{name}-v0"


def write_dataset(folder: Path, episodes: list[dict[str, Any]], *, observation_space, action_space, env_spec,
                  metadata: dict[str, Any]) -> None:
    """A new Minari dataset in ``folder`` (``folder/data``), written by minari's storage in its default format."""
    from minari import __version__ as minari_version
    from minari.data_collector import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    storage = MinariStorage.new(folder / "data", observation_space=observation_space, action_space=action_space,
                                env_spec=env_spec)
    storage.update_metadata({**metadata, "minari_version": minari_version})
    storage.update_episodes(EpisodeBuffer(id=i, observations=episode["observations"], actions=episode["actions"],
                                          rewards=episode["rewards"], terminations=episode["terminations"],
                                          truncations=episode["truncations"], infos=episode.get("infos") or {})
                            for i, episode in enumerate(episodes))


class MinariData:
    """A Minari dataset on disk (:class:`rlplug.registry.protocols.Dataset`): its metadata read when made, its
    episodes when the run asks for its transitions."""

    def __init__(self, path: Path, key: str, *, rescale_actions: bool = False,
                 rescale_key: str = RESCALE_KEYS["dataset"]):
        self.path, self.key = path, key
        self.metadata = read_metadata(path, key)
        self.rescaled_from = bounds_to_rescale(self.metadata, rescale_key) if rescale_actions else None

    def env_table(self) -> dict[str, Any] | None:
        """The env recorded on; with rescaled actions, a gymnasium one wrapped to act in [-1, 1] too (another
        kind of env as recorded: the run refuses it in one line unless it acts in [-1, 1])."""
        table = env_table(self.metadata)
        if table is None or self.rescaled_from is None or table.get("use") not in ("gym", "rlplug:gym"):
            return table
        return {**table, "wrappers": [*(table.get("wrappers") or []), UNIT_ACTIONS]}

    def transitions(self, device: str):
        """Every step as ``[N]`` transitions (discrete actions as class indices, int64)."""
        import numpy as np
        import torch
        from tensordict import TensorDict

        try:
            import minari  # noqa: F401
        except ImportError:
            raise UserError("reading a Minari dataset needs minari: pip install \"rlplug[offline]\"",
                            path=self.key) from None
        episodes = load_episodes(self.path, self.key)

        def joined(name: str, part: slice | None = None):
            arrays = [np.asarray(episode[name]) for episode in episodes]
            if part is not None:
                arrays = [array[part] for array in arrays]
            return torch.as_tensor(np.concatenate(arrays), device=device)

        try:
            observation = joined("observations", slice(None, -1)).float()
            next_observation = joined("observations", slice(1, None)).float()
        except (TypeError, ValueError) as error:  # a Dict or Tuple observation: minari gives it as a dict
            raise UserError(f"{self.path}: its observations are not arrays ({type(error).__name__}: {error}); "
                            f"offline runs read Box observations", path=self.key) from None
        action = joined("actions")
        action = action.long() if not action.is_floating_point() else action.float()
        if self.rescaled_from is not None:  # onto [-1, 1], as gymnasium's RescaleAction maps the env's
            low, high = (torch.tensor(bound, device=device) for bound in self.rescaled_from)
            action = (2 * (action - low) / (high - low) - 1).clamp(-1, 1)
        count = len(action)
        if len(observation) != count:
            raise UserError(f"{self.path}: {len(observation) + len(episodes)} observations for {count} actions in "
                            f"{len(episodes)} episodes (each episode needs one more observation than actions)",
                            path=self.key)
        terminated = joined("terminations").bool().reshape(count, 1)
        truncated = joined("truncations").bool().reshape(count, 1)
        reward = joined("rewards").float().reshape(count, 1)
        return TensorDict({
            "observation": observation, "action": action,
            "next": {"observation": next_observation, "reward": reward, "terminated": terminated,
                     "truncated": truncated, "done": terminated | truncated},
        }, batch_size=[count], device=device)

    def describe(self) -> dict[str, Any]:
        """Size, returns and env, for ``rlplug show`` (the episodes read: returns are not in the metadata)."""
        import numpy as np

        returns = [float(np.sum(episode["rewards"])) for episode in load_episodes(self.path, self.key)]
        table = self.env_table()
        return {"dataset_id": self.metadata.get("dataset_id"), "episodes": self.metadata.get("total_episodes"),
                "steps": self.metadata.get("total_steps"), "env": table.get("id") if table else None,
                "observation_space": self.metadata.get("observation_space"),
                "action_space": self.metadata.get("action_space"),
                "return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
                "return_min": float(np.min(returns)), "return_max": float(np.max(returns)),
                "behaviour": self.metadata.get("rlplug_behaviour"),
                "algorithm": self.metadata.get("algorithm_name")}
