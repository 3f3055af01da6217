"""What rlplug reads of an env beyond TorchRL's ``EnvBase``: the optional members of
:class:`rlplug.registry.protocols.Env` that keep running statistics, reached only through
:func:`env_capability`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torchrl.envs import TransformedEnv

from rlplug.registry import protocols

_ABSENT = object()


def env_capability(env, member: Callable) -> Any:
    """The optional :class:`rlplug.registry.protocols.Env` ``member`` of ``env``, bound, or None: what
    :func:`rlplug.registry.protocols.capability` is for other kinds. Looked for where it is defined, on the env
    and then down its ``TransformedEnv`` base envs, never through TorchRL's attribute forwarding: a batched
    env passes a name it lacks on to its copies, and a ``ParallelEnv``'s worker ends on one it cannot find
    (one not started yet recurses)."""
    return env_member(env, protocols.optional_name(member, protocols.Env))


def env_member(env, name: str) -> Any:
    """The member ``name`` of ``env`` or of a ``TransformedEnv`` base env under it, or None: the lookup of
    :func:`env_capability`, by name, for what one env kind offers outside the protocol (the ``gym`` env's
    ``stage``, which renders the video's frames)."""
    while env is not None:
        if inspect.getattr_static(env, name, _ABSENT) is not _ABSENT:
            return getattr(env, name)
        env = env.base_env if isinstance(env, TransformedEnv) else None
    return None


def env_statistics(env) -> dict[str, Any]:
    """What an env learns while it runs (running normalisation statistics): saved in checkpoints, copied
    (frozen) to the eval env. Envs that learn nothing need not define ``statistics()``; rlplug's gym env
    defines ``statistics()``, ``load_statistics(state)`` and ``set_training(flag)``."""
    statistics = env_capability(env, protocols.Env.statistics)
    return statistics() if statistics else {}


def as_evaluation_env(env, statistics: dict[str, Any]) -> None:
    """``env`` made ready to evaluate: the training env's ``statistics`` (if any) loaded, then training turned
    off where the env says what that is (``set_training(False)``): statistics frozen, training-only reward
    shaping off, so evaluation counts the env's own episodes and rewards."""
    if statistics:
        env.load_statistics(statistics)
    set_training = env_capability(env, protocols.Env.set_training)
    if set_training:
        set_training(False)


def close_env(env) -> None:
    """``env`` closed, once (a closed TorchRL env refuses a second close)."""
    if env is not None and not getattr(env, "is_closed", False):
        env.close()
