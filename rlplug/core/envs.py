"""What rlplug reads of an env beyond TorchRL's ``EnvBase``: the optional members of
:class:`rlplug.registry.protocols.Env` that keep running statistics."""

from __future__ import annotations

from typing import Any

from rlplug.registry import protocols
from rlplug.registry.protocols import capability


def env_statistics(env) -> dict[str, Any]:
    """What an env learns while it runs (running normalisation statistics): saved in checkpoints, copied
    (frozen) to the eval env. Envs that learn nothing need not define ``statistics()``; rlplug's gym env
    defines ``statistics()``, ``load_statistics(state)`` and ``set_training(flag)``."""
    statistics = capability(env, protocols.Env.statistics)
    return statistics() if statistics else {}


def build_env(component, **context):
    """The recipe's env built, with one ``observation`` entry for the networks wherever it declares several
    (:func:`rlplug.core.observations.one_observation`): every env of a run, training, evaluation and
    workers', is built here, so all see the same entries."""
    from rlplug.core.observations import one_observation

    return one_observation(component.build(**context))


def as_evaluation_env(env, statistics: dict[str, Any]) -> None:
    """``env`` made ready to evaluate: the training env's ``statistics`` (if any) loaded, then training turned
    off where the env says what that is (``set_training(False)``): statistics frozen, training-only reward
    shaping off, so evaluation counts the env's own episodes and rewards."""
    if statistics:
        env.load_statistics(statistics)
    # a TorchRL batched env not started yet (is_closed) recurses on any attribute it lacks; what it holds
    # (TorchRL's own envs, e.g. DMControlEnv copies) has no training switch to turn off
    set_training = None if getattr(env, "is_closed", False) else capability(env, protocols.Env.set_training)
    if set_training:
        set_training(False)


def close_env(env) -> None:
    """``env`` closed, once (a closed TorchRL env refuses a second close)."""
    if env is not None and not getattr(env, "is_closed", False):
        env.close()
