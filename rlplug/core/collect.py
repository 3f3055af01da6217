"""Collecting ``[*env_batch, time]`` batches with a policy.

Two roads give the same batch layout (TorchRL's: root ``observation``, ``action``, the log-probability,
and ``next`` with ``observation``, ``reward``, ``done``, ``terminated``, ``truncated``):

- the array road, when the env offers the array step of :class:`rlplug.registry.protocols.Env`
  (``supports_tensor_steps``, ``reset_arrays``, ``step_arrays``: rlplug's ``gym`` env, or any plugin's) and
  the policy has a shape :class:`rlplug.core.acting.ArrayActor` can act for (a ProbabilisticActor; a deterministic actor
  followed by exploration stages): numpy arrays into per-batch buffers, no TensorDict per step;
- the TensorDict road for any other TorchRL env and policy: ``env.step_and_maybe_reset(policy(state))``.

An env that fails on either road (raises in a step, or gives observations that are not finite or not of
its spec's shape) ends the collection with :class:`EnvFailed`, one line naming the env and, where the
observations show it, the copy; the run then stops as when workers elsewhere are lost, with a checkpoint of
its last update, and goes on with ``resume``.

A recurrent policy (:mod:`rlplug.core.recurrent`) takes the TensorDict road on the env
:func:`~rlplug.core.recurrent.with_recurrent_state` wraps, which carries its hidden state from step to step and
marks each episode's first step (``is_init``), where the state restarts.
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.core.acting import ActorView, ArrayActor
from rlplug.core.env_members import env_capability
from rlplug.core.episodes import EpisodeTracker
from rlplug.core.recurrent import is_recurrent, with_recurrent_state
from rlplug.core.transformed import env_rewards
from rlplug.errors import UserError, WorkersLost, one_line
from rlplug.registry import protocols


class EnvFailed(WorkersLost):
    """The env failed while experience was collected: it raised in a step, or gave observations that are not
    finite or not of its spec's shape. The learner's state is whole, so the run stops as when workers are
    lost (:class:`rlplug.errors.WorkersLost`): a checkpoint of the last update, then ``resume``."""


def observation_problem(observation, spec, copies: bool) -> str | None:
    """What is wrong with observations (a tensor, an array, or a TensorDict of entries) against the env's
    ``observation`` spec (None: their shape is not checked): entries of another shape, or not finite (naming
    the copies, along the first dim, where ``copies``); None when nothing is."""
    if isinstance(observation, TensorDictBase):
        for name in observation.keys():
            entry = spec[name] if spec is not None and name in spec.keys() else None
            problem = observation_problem(observation.get(name), entry, copies)
            if problem:
                return f"'{name}': {problem}"
        return None
    value = torch.as_tensor(observation)
    if spec is not None and tuple(value.shape) != tuple(spec.shape):
        return f"an observation of shape {list(value.shape)} where its spec says {list(spec.shape)}"
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        shown = ""
        if copies and value.ndim > 1:
            broken = (~torch.isfinite(value)).reshape(value.shape[0], -1).any(-1).nonzero().flatten().tolist()
            shown = f" in copy {', '.join(map(str, broken))}"
        return f"observations that are not finite (NaN or infinity){shown}"
    return None


def array_road_open(env: EnvBase, policy) -> bool:
    """Whether the env offers the array step now (the optional members of :class:`rlplug.registry.protocols.Env`)
    and the policy keeps no state between steps (a recurrent one goes through TensorDicts that carry it)."""
    offered = bool(env_capability(env, protocols.Env.supports_tensor_steps)) and all(
        env_capability(env, member) is not None for member in (protocols.Env.reset_arrays, protocols.Env.step_arrays))
    return offered and not is_recurrent(policy)


def array_actor_for(env: EnvBase, policy, seed: int) -> ArrayActor | None:
    """The actor to collect with on the array road, or None where only the TensorDict road goes."""
    if not array_road_open(env, policy):
        return None
    return ArrayActor.for_policy(policy, env.device or "cpu", seed)


def actor_view_for(env: EnvBase, policy) -> ActorView | None:
    """The actor view to collect with on the array road, or None where only the TensorDict road goes."""
    if not array_road_open(env, policy):
        return None
    try:
        return ActorView.of(policy)
    except TypeError:
        return None


class Collector:
    """Steps ``env`` with ``policy`` and returns batches of ``frames_per_batch`` frames."""

    def __init__(self, env: EnvBase, policy, frames_per_batch: int, seed: int, array_road: bool = True,
                 name: str = "the env"):
        self.env, self.policy, self.seed, self.name = env, policy, seed, name
        self.envs = max(1, env.batch_size.numel())
        if frames_per_batch % self.envs:
            raise UserError(f"frames_per_batch ({frames_per_batch}) must be a multiple of the env's "
                            f"{self.envs} parallel envs", path="algorithm.frames_per_batch")
        self.steps = frames_per_batch // self.envs
        self.time_dim = len(env.batch_size)
        if is_recurrent(policy):
            self.env = with_recurrent_state(env, policy)
        self.array_actor = array_actor_for(env, policy, seed) if array_road else None
        #: env.step_arrays, looked up once: through a TransformedEnv each lookup costs a __getattr__ chain
        self.step_arrays = env_capability(env, protocols.Env.step_arrays) if self.array_actor else None
        #: where array-road batches go once built (None: they stay on the CPU, where numpy made them)
        self.batch_device = env.device if env.device is not None and torch.device(env.device).type != "cpu" else None
        self.tracker = EpisodeTracker(self.envs)
        #: where the envs go on from: a TensorDict on the TensorDict road, the observations' numpy array on the
        #: array road; None: reset at the next collection
        self.state: TensorDictBase | np.ndarray | None = None

    def restart(self, seed: int) -> None:
        """Every env starts a new episode from ``seed`` at the next collection (where a checkpoint is taken,
        so that a resumed run goes on exactly as the uninterrupted one). The cut episodes are not counted."""
        self.seed, self.state = seed, None
        self.tracker.running[:] = 0.0

    @torch.no_grad()
    def collect(self) -> TensorDictBase:
        with set_exploration_type(ExplorationType.RANDOM):
            batch = self._collect_arrays() if self.array_actor else self._collect_tensordicts()
        self.record(batch)
        return batch

    def record(self, batch: TensorDictBase) -> None:
        """The batch's rewards and ends counted into :attr:`tracker`."""
        rewards = env_rewards(batch).reshape(self.envs, self.steps).cpu().numpy()
        dones = batch.get(("next", "done")).reshape(self.envs, self.steps).cpu().numpy()
        self.tracker.add(rewards, dones)

    def failure(self, error: BaseException, when: str) -> EnvFailed:
        """The one line saying that the env failed ``when``, from what it raised."""
        return EnvFailed(f"{self.name} failed {when}: {type(error).__name__}: {one_line(' '.join(str(error).split()))}",
                         path="env")

    def check_observation(self, observation, when: str, *, batch: bool = False) -> None:
        """:class:`EnvFailed` where ``observation`` is not what the env's spec promises (see
        :func:`observation_problem`); ``batch``: a batch's, with a time dim, whose shape is not compared."""
        spec = None if batch else self.env.observation_spec.get("observation", None)
        problem = observation_problem(observation, spec, copies=len(self.env.batch_size) == 1)
        if problem:
            raise EnvFailed(f"{self.name} gave {problem} {when}", path="env")

    def _collect_tensordicts(self) -> TensorDictBase:
        if self.state is None:
            self.env.set_seed(self.seed)
            try:
                self.state = self.env.reset()
            except UserError:
                raise
            except Exception as error:
                raise self.failure(error, "in a reset") from error
        if isinstance(self.state, np.ndarray):
            raise RuntimeError("the collector's state is the array road's: the TensorDict road cannot go on from it")
        state: TensorDictBase = self.state
        steps = []
        for t in range(self.steps):
            try:
                acted = self.policy(state)
            except Exception:  # the policy's input may be what failed: say so where it is the env's
                self.check_observation(state.get("observation", None), f"before step {t} of a batch")
                raise
            try:
                step, state = self.env.step_and_maybe_reset(acted)
            except UserError:
                raise
            except Exception as error:
                raise self.failure(error, f"in step {t} of a batch") from error
            self.state = state
            steps.append(step)
        try:
            batch: TensorDictBase = torch.stack(steps, dim=self.time_dim)  # TensorDicts stack into a TensorDict
        except (RuntimeError, ValueError) as error:  # steps of different shapes: the env changed what it gives
            raise self.failure(error, "to give steps of one shape") from error
        self.check_observation(batch.get(("next", "observation"), None), "in a batch", batch=True)
        return batch

    def _collect_arrays(self) -> TensorDictBase:
        """The array road: numpy buffers filled step by step, turned into tensors once per batch."""
        actor, env, steps, envs = self.array_actor, self.env, self.steps, self.envs
        if actor is None or self.step_arrays is None:
            raise RuntimeError("the array road needs an array actor and the env's step_arrays")
        act, step = actor.act, self.step_arrays
        if self.state is None:
            try:
                self.state = env_capability(env, protocols.Env.reset_arrays)(seed=self.seed)
            except UserError:
                raise
            except Exception as error:
                raise self.failure(error, "in a reset") from error
            actor.seed(self.seed)
        observation = self.state
        buffers: list[np.ndarray | None] = []
        for t in range(steps):
            try:
                action, log_prob = act(observation)
            except Exception:  # the policy's input may be what failed: say so where it is the env's
                self.check_observation(observation, f"before step {t} of a batch")
                raise
            try:  # try costs nothing until something raises
                next_observation, reward, terminated, truncated, following = step(action)
                values = (observation, action, log_prob, next_observation, reward, terminated, truncated)
                if not buffers:  # sized by the first step: [envs, time, ...] of each value's own dtype
                    buffers = [None if v is None else np.empty((envs, steps, *v.shape[1:]), dtype=v.dtype)
                               for v in values]
                for buffer, value in zip(buffers, values):
                    if buffer is not None:
                        buffer[:, t] = value
            except UserError:
                raise
            except Exception as error:
                raise self.failure(error, f"in step {t} of a batch") from error
            observation = following
        self.state = observation
        self.check_observation(buffers[COLUMNS.index("next_obs")], "in a batch", batch=True)

        batch = array_batch(actor, env, dict(zip(COLUMNS, buffers)), envs, steps)
        return batch if self.batch_device is None else batch.to(self.batch_device)


#: What the array road records at each step, in the order of its buffers.
COLUMNS = ("obs", "action", "log_prob", "next_obs", "reward", "terminated", "truncated")


def array_batch(actor: ArrayActor, env: EnvBase, buffers: dict[str, np.ndarray | None], envs: int,
                steps: int) -> TensorDictBase:
    """The ``[envs, steps]`` batch in TorchRL's layout from the array road's buffers (:data:`COLUMNS`)."""
    tensor = {key: torch.from_numpy(buffer) for key, buffer in buffers.items() if buffer is not None}
    action = tensor["action"]
    if actor.one_hot:  # the actor's layout, as its log-probabilities expect
        action = torch.nn.functional.one_hot(action, int(env.action_spec.space.n))
    terminated, truncated = tensor["terminated"].unsqueeze(-1), tensor["truncated"].unsqueeze(-1)
    batch = TensorDict(
        {actor.observation_key: tensor["obs"], actor.action_key: action,
         "next": {actor.observation_key: tensor["next_obs"], "reward": tensor["reward"].unsqueeze(-1),
                  "terminated": terminated, "truncated": truncated, "done": terminated | truncated}},
        batch_size=[envs, steps],
    )
    if actor.log_prob_key is not None:
        batch.set(actor.log_prob_key, tensor["log_prob"])
    return batch
