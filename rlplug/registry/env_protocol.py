"""What an env must be (:class:`Env`), kept beside :mod:`rlplug.registry.protocols`, which hands it out with the
other kinds' protocols (``protocols.Env``, ``protocols.PROTOCOLS["env"]``): the env's contract is the longest, with
the array road's members. Its optional members are read with :func:`rlplug.core.env_members.env_capability`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from rlplug.registry.conformance import optional

if TYPE_CHECKING:
    import numpy as np
    import torch
    from tensordict import TensorDictBase
    from torch import nn
    from torchrl.data import TensorSpec


class Env(Protocol):
    """An env: a TorchRL ``EnvBase`` (batched or not), stepped with TensorDicts, or with numpy arrays where it
    offers the array step (``supports_tensor_steps``, ``reset_arrays``, ``step_arrays``: rlplug's ``gym`` env
    does). Networks read its ``observation`` entry; other entries are concatenated into one."""

    #: what a step's observation entries are (a TorchRL ``Composite``)
    observation_spec: TensorSpec
    #: what an action is
    action_spec: TensorSpec
    #: ``[envs]`` for a batched env, ``[]`` for one
    batch_size: torch.Size

    def set_seed(self, seed: int) -> int | None:
        """Seeds the env's random stream (every copy of a batched env its own)."""

    def reset(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Starts every episode; the first observations."""

    def step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """One step with the ``action`` entry: the step (its ``next`` entries) and where each env goes on from."""

    def close(self) -> None:
        """Called once when the run ends, however it ends."""

    @optional
    def statistics(self) -> dict[str, Any]:
        """What the env learns while it runs (running normalisation): plain tensors and numbers, saved in
        checkpoints and copied (frozen) into the evaluation env."""

    @optional
    def load_statistics(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`statistics` returned (of an env built with the same options)."""

    @optional
    def set_training(self, training: bool) -> None:
        """False: statistics frozen and rewards in the env's own units (evaluation)."""

    @optional
    def normalize_observation(self, observation: np.ndarray) -> np.ndarray:
        """A numpy observation as the policy sees it (``Agent.select_action``)."""

    @optional
    def read_action(self, action: torch.Tensor) -> np.ndarray:
        """Actions in the policy's layout (one-hot, indices from 0) as numpy in the env's own format (a
        Discrete space's start added), for ``Agent.select_action``; TorchRL's gymnasium envs have it."""

    @optional
    def observation_normalizer(self) -> nn.Module | None:
        """:meth:`normalize_observation` as a ``torch.nn.Module`` (float32 in and out), statistics frozen; None
        when observations pass unchanged. ``rlplug export`` puts it in front of the policy."""

    @property
    @optional
    def supports_tensor_steps(self) -> bool:
        """Whether :meth:`reset_arrays` and :meth:`step_arrays` may be used now (no TensorDict per step); their
        arrays are what the TensorDict road gives: the ``observation`` entry's dtype, the same episodes."""

    @optional
    def reset_arrays(self, seed: int | None = None) -> np.ndarray:
        """Every env reset (seeded when ``seed`` is given); the observations as one numpy array ``[envs, ...]``."""

    @optional
    def step_arrays(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One step of every env with a numpy action ``[envs, ...]`` in gymnasium's format (an index for discrete
        actions, else floats); numpy ``(next_observation, reward, terminated, truncated, observation)``, each
        ``[envs, ...]``: reward float32, terminated/truncated bool, ``next_observation`` where the step led (an
        episode's last), ``observation`` where each env goes on from (same-step autoreset)."""
