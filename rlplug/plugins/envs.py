"""Gymnasium environments, vectorised in-process."""

from __future__ import annotations

from typing import Annotated, Any

import rlplug
from rlplug.registry.params import Check, Range
from rlplug.suggest import did_you_mean


def known_gym_id(env_id: str) -> str | None:
    """The problem with a gymnasium id, or None; ``module:Id`` ids are left to gymnasium to import."""
    if ":" in env_id:
        return None
    from gymnasium.envs.registration import registry

    if env_id in registry:
        return None
    return f"no gymnasium environment '{env_id}'{did_you_mean(env_id, registry)}"


def make_gym(
    id: Annotated[str, Check(known_gym_id)],
    num_envs: Annotated[int, Range(ge=1)] = 1,
    max_episode_steps: Annotated[int, Range(ge=1)] | None = None,
    kwargs: dict[str, Any] | None = None,
    device: str = "cpu",
):
    """Any gymnasium id, ``num_envs`` copies stepped in this process (no subprocesses)."""
    from rlplug.envs import make_gym_vector_env

    return make_gym_vector_env(id, num_envs=num_envs, max_episode_steps=max_episode_steps,
                               make_kwargs=kwargs or {}, device=device)


@rlplug.hookimpl
def rlplug_register_envs(register):
    register("gym", make_gym, aliases=("gymnasium",))
