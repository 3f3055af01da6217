"""Collecting ``[*env_batch, time]`` batches with a policy.

Two roads give the same batch layout (TorchRL's: root ``observation``, ``action``, the log-probability,
and ``next`` with ``observation``, ``reward``, ``done``, ``terminated``, ``truncated``):

- the array road, when the env offers the array step of :class:`rlplug.registry.protocols.Env`
  (``supports_tensor_steps``, ``reset_arrays``, ``step_arrays``: rlplug's ``gym`` env, or any plugin's) and
  the policy has a shape :class:`rlplug.core.acting.ArrayActor` can act for (a ProbabilisticActor; a deterministic actor
  followed by exploration stages): numpy arrays into per-batch buffers, no TensorDict per step;
- the TensorDict road for any other TorchRL env and policy: ``env.step_and_maybe_reset(policy(state))``.

Both are stepped by :func:`rlplug.core.rollout.rollout` (evaluation, video and the seeds stepped together too);
:func:`road_for` picks the road, and the collector passes in what it keeps of each step.

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

from rlplug.core.acting import ArrayActor
from rlplug.core.env_members import env_capability, env_member
from rlplug.core.episodes import EpisodeTracker
from rlplug.core.recurrent import is_recurrent, with_recurrent_state
from rlplug.core.rollout import ArrayRoad, StepBuffers, TensorDictRoad, rollout
from rlplug.core.transformed import ENV_REWARD, env_rewards
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


def road_for(env: EnvBase, policy, seed: int, *, deterministic: bool = False,
             array_road: bool = True) -> ArrayRoad | TensorDictRoad:
    """The road a :func:`~rlplug.core.rollout.rollout` of ``policy`` on ``env`` takes: the array road where both
    allow it (and ``array_road``), else TorchRL's, on an env carrying a recurrent policy's state."""
    actor = array_actor_for(env, policy, seed) if array_road else None
    if actor is not None:
        return ArrayRoad(env, actor, deterministic)
    return TensorDictRoad(with_recurrent_state(env, policy) if is_recurrent(policy) else env, policy)


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
        self.road = road_for(env, policy, seed, array_road=array_road)
        self.env = self.road.env  # a recurrent policy's: carrying its state
        self.array_actor = self.road.actor if isinstance(self.road, ArrayRoad) else None
        #: the env's step_arrays on the array road (what stepping together calls), else None
        self.step_arrays = self.road.step_arrays if isinstance(self.road, ArrayRoad) else None
        #: where array-road batches go once built (None: they stay on the CPU, where numpy made them)
        self.batch_device = env.device if env.device is not None and torch.device(env.device).type != "cpu" else None
        self.tracker = EpisodeTracker(self.envs)
        #: the gym env's stage where it scales rewards (normalize_rewards): its unscaled rewards are the batch's
        #: env_reward, counted in episode returns as evaluation counts them
        self.stage = env_member(self.env, "stage")
        if getattr(self.stage, "return_rms", None) is not None:
            self.stage.keep_own_rewards = True
        else:
            self.stage = None
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
        """The batch's rewards and ends counted into :attr:`tracker`: the env's own where its stage scaled them,
        which the batch then holds as ``("next", "env_reward")`` too (seeds stepped together record here as well)."""
        own = self.stage.take_own_rewards() if self.stage is not None else None
        if own is not None and own.shape == (self.steps, self.envs):
            batch.set(("next", ENV_REWARD), torch.from_numpy(own.T.copy()).unsqueeze(-1).to(batch.device))
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

    def start(self) -> TensorDictBase | np.ndarray:
        """Every env reset from :attr:`seed` (a failure in it is :class:`EnvFailed`)."""
        try:
            return self.road.start(self.seed)
        except UserError:
            raise
        except Exception as error:
            raise self.failure(error, "in a reset") from error

    def check_state(self, state, when: str) -> None:
        """:meth:`check_observation` of the state a policy failed on (a TensorDict's ``observation``)."""
        self.check_observation(state.get("observation", None) if isinstance(state, TensorDictBase) else state, when)

    def _collect_tensordicts(self) -> TensorDictBase:
        if self.state is None:
            self.state = self.start()
        if isinstance(self.state, np.ndarray):
            raise RuntimeError("the collector's state is the array road's: the TensorDict road cannot go on from it")
        steps: list[TensorDictBase] = []
        self.state = rollout(self.road, self.state, steps=self.steps,
                             record=lambda t, state, acted, step: steps.append(step),
                             failure=self.failure, check=self.check_state)
        try:
            batch: TensorDictBase = torch.stack(steps, dim=self.time_dim)  # TensorDicts stack into a TensorDict
        except (RuntimeError, ValueError) as error:  # steps of different shapes: the env changed what it gives
            raise self.failure(error, "to give steps of one shape") from error
        self.check_observation(batch.get(("next", "observation"), None), "in a batch", batch=True)
        return batch

    def _collect_arrays(self) -> TensorDictBase:
        """The array road: numpy buffers filled step by step, turned into tensors once per batch."""
        if self.array_actor is None:
            raise RuntimeError("the array road needs an array actor")
        if self.state is None:
            self.state = self.start()
        buffers = StepBuffers((self.envs,), self.steps)
        self.state = rollout(self.road, self.state, steps=self.steps, record=buffers,
                             failure=self.failure, check=self.check_state)
        columns = buffers.columns()
        self.check_observation(columns["next_obs"], "in a batch", batch=True)
        batch = array_batch(self.array_actor, self.env, columns, self.envs, self.steps)
        return batch if self.batch_device is None else batch.to(self.batch_device)


def array_batch(actor: ArrayActor, env: EnvBase, buffers: dict[str, np.ndarray | None], envs: int,
                steps: int) -> TensorDictBase:
    """The ``[envs, steps]`` batch in TorchRL's layout from the array road's buffers
    (:data:`rlplug.core.rollout.COLUMNS`)."""
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
