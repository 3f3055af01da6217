"""The one rollout: an env stepped with a policy, for a number of steps or until the caller says stop.

Every use steps here: the collector (both roads), several seeds' collectors stepped together, evaluation
and video. What differs between them is passed in, not written as another loop: the *road* (how to act and
step: :class:`ArrayRoad` on numpy arrays, :class:`TensorDictRoad` on TensorDicts, or a use's own with the
same three methods) and ``record``, called after each step with what it gave (a batch's buffers, episode
returns, frames). :func:`rlplug.core.collect.road_for` picks the road for an env and a policy.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from typing import Any, Protocol

import numpy as np

from rlplug.core.acting import ArrayActor
from rlplug.core.env_members import env_capability
from rlplug.core.transformed import env_rewards
from rlplug.errors import UserError
from rlplug.registry import protocols


class Road(Protocol):
    """How a rollout acts and steps. ``state`` is where the envs go on from (a numpy observation, a
    TensorDict); ``acted`` is what :meth:`act` gave; a ``transition`` is what one step gave."""

    def start(self, seed: int) -> Any:
        """Every env reset, seeded with ``seed``: the first state."""

    def act(self, state: Any) -> Any: ...

    def step(self, acted: Any) -> tuple[Any, Any]:
        """The transition and the state the envs go on from (a new episode's first where one ended)."""

    def outcome(self, transition: Any) -> tuple[np.ndarray, np.ndarray]:
        """The env's own rewards and whether each env's episode ended, flat numpy arrays ``[envs]``."""


class ArrayRoad:
    """The array road: ``actor`` acting on numpy observations, the env's ``reset_arrays`` and ``step_arrays``
    (:class:`rlplug.registry.protocols.Env`, looked up once: through a ``TransformedEnv`` each lookup costs a
    ``__getattr__`` chain). ``acted`` is the actor's ``(action, log_prob)``; a transition is the 5-tuple of
    :meth:`rlplug.registry.protocols.Env.step_arrays`."""

    def __init__(self, env, actor: ArrayActor, deterministic: bool = False, step_arrays: Callable | None = None):
        """``step_arrays``: a step of the same format to take instead of the env's (several envs as one)."""
        self.env, self.actor, self.deterministic = env, actor, deterministic
        self.reset_arrays = env_capability(env, protocols.Env.reset_arrays)
        self.step_arrays = step_arrays or env_capability(env, protocols.Env.step_arrays)

    def start(self, seed: int) -> np.ndarray:
        observation = self.reset_arrays(seed=seed)
        self.actor.seed(seed)
        return observation

    def act(self, observation: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return self.actor.act(observation, self.deterministic)

    def step(self, acted: tuple[np.ndarray, Any]) -> tuple[Any, np.ndarray]:
        transition = self.step_arrays(acted[0])
        return transition, transition[4]  # any 5-tuple (protocols.Env.step_arrays): where the envs go on from

    def outcome(self, transition: Any) -> tuple[np.ndarray, np.ndarray]:
        return np.reshape(transition[1], -1), np.reshape(transition[2] | transition[3], -1)


class TensorDictRoad:
    """TorchRL's road for any env and policy: ``policy(state)``, then ``env.step_and_maybe_reset``; a transition
    is the step's TensorDict."""

    def __init__(self, env, policy):
        self.env, self.policy = env, policy

    def start(self, seed: int) -> Any:
        self.env.set_seed(seed)
        forget_last_step(self.env)
        return self.env.reset()

    def act(self, state: Any) -> Any:
        return self.policy(state)

    def step(self, acted: Any) -> tuple[Any, Any]:
        return self.env.step_and_maybe_reset(acted)

    def outcome(self, transition: Any) -> tuple[np.ndarray, np.ndarray]:
        return (env_rewards(transition).reshape(-1).cpu().numpy(),
                transition.get(("next", "done")).reshape(-1).cpu().numpy())


def forget_last_step(env) -> None:
    """Every copy of ``env`` starts anew at :meth:`TensorDictRoad.start`: TorchRL's gym wrapper (its
    ``VecGymEnvTransform``) remembers which copies ended in the last step and takes a reset without masks for a
    reset of those copies alone, handing every copy that step's observations instead of new episodes from the
    seed just set (an evaluation after one that stopped with some copies' episodes ended would not start from
    the same states). What it remembers is dropped: the public road, a reset given every copy's ``_reset`` mask,
    fails in TorchRL 0.14.1 on an env not stepped yet (the transform compares the mask to ``None``)."""
    from torchrl.envs.transforms import Compose, TransformedEnv, VecGymEnvTransform

    while isinstance(env, TransformedEnv):
        transforms = env.transform if isinstance(env.transform, Compose) else [env.transform]
        for transform in transforms:
            if isinstance(transform, VecGymEnvTransform):
                transform._memo.update(done=None, saved_next=None)
        env = env.base_env


def rollout(road: Road, state: Any, *, steps: int | None = None, until: Callable[[], bool] | None = None,
            record: Callable[[int, Any, Any, Any], None] | None = None,
            failure: Callable[[BaseException, str], BaseException] | None = None,
            check: Callable[[Any, str], None] | None = None) -> Any:
    """Step from ``state`` ``steps`` times, or until ``until()`` (asked before each step) is true; the state
    the envs go on from.

    ``record(t, state, acted, transition)`` is called after step ``t``. ``failure(error, when)`` turns what
    a step (or ``record``) raised into the exception to raise instead (a :class:`UserError` passes as it
    is); ``check(state, when)`` is asked about the state the policy failed on, before its error goes on,
    so that an env's bad observations are named as the env's."""
    for t in range(steps) if steps is not None else count():
        if until is not None and until():
            break
        try:
            acted = road.act(state)
        except Exception:  # the policy's input may be what failed: say so where it is the env's
            if check is not None:
                check(state, f"before step {t} of a batch")
            raise
        try:  # try costs nothing until something raises
            transition, following = road.step(acted)
            if record is not None:
                record(t, state, acted, transition)
        except UserError:
            raise
        except Exception as error:
            if failure is None:
                raise
            raise failure(error, f"in step {t} of a batch") from error
        state = following
    return state


class StepBuffers:
    """The array road's steps kept in numpy buffers ``[*lead, steps, ...]``, one per value of :data:`COLUMNS`
    (None for a value that is None, a policy's missing log-probability), each of its value's own dtype,
    sized by the first step: a rollout's ``record``."""

    def __init__(self, lead: tuple[int, ...], steps: int):
        self.lead, self.steps = lead, steps
        self.at = (slice(None),) * len(lead)  # buffer[self.at + (t,)]: step t of every leading row
        self.buffers: list[np.ndarray | None] = []

    def __call__(self, t: int, observation: np.ndarray, acted: tuple, transition: Any) -> None:
        values = (observation, *acted, *transition[:4])
        if not self.buffers:
            lead = len(self.lead)
            self.buffers = [None if v is None else np.empty((*self.lead, self.steps, *v.shape[lead:]), dtype=v.dtype)
                            for v in values]
        index = self.at + (t,)
        for buffer, value in zip(self.buffers, values):
            if buffer is not None:
                buffer[index] = value

    def columns(self) -> dict[str, np.ndarray | None]:
        return dict(zip(COLUMNS, self.buffers))


#: What the array road records at each step, in the order of its buffers.
COLUMNS = ("obs", "action", "log_prob", "next_obs", "reward", "terminated", "truncated")
