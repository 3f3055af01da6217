"""Collecting ``[*env_batch, time]`` batches with a policy.

Two roads give the same batch layout (TorchRL's: root ``observation``, ``action``, the log-probability,
and ``next`` with ``observation``, ``reward``, ``done``, ``terminated``, ``truncated``):

- the array road, when the env offers the array step of :class:`rlplug.registry.protocols.Env`
  (``supports_tensor_steps``, ``reset_arrays``, ``step_arrays``: rlplug's ``gym`` env, or any plugin's) and
  the policy has a shape :class:`rlplug.core.acting.ArrayActor` can act for (a ProbabilisticActor; a deterministic actor
  followed by exploration stages): numpy arrays into per-batch buffers, no TensorDict per step;
- the TensorDict road for any other TorchRL env and policy: ``env.step_and_maybe_reset(policy(state))``.

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
from rlplug.core.episodes import EpisodeTracker
from rlplug.errors import UserError
from rlplug.core.recurrent import is_recurrent, with_recurrent_state
from rlplug.core.transformed import env_rewards
from rlplug.core.env_members import env_capability
from rlplug.registry import protocols

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

    def __init__(self, env: EnvBase, policy, frames_per_batch: int, seed: int, array_road: bool = True):
        self.env, self.policy, self.seed = env, policy, seed
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
        self.state: TensorDictBase | torch.Tensor | None = None

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

    def _collect_tensordicts(self) -> TensorDictBase:
        if self.state is None:
            self.env.set_seed(self.seed)
            self.state = self.env.reset()
        steps = []
        for _ in range(self.steps):
            step, self.state = self.env.step_and_maybe_reset(self.policy(self.state))
            steps.append(step)
        return torch.stack(steps, dim=self.time_dim)

    def _collect_arrays(self) -> TensorDictBase:
        """The array road: numpy buffers filled step by step, turned into tensors once per batch."""
        actor, env, steps, envs = self.array_actor, self.env, self.steps, self.envs
        act, step = actor.act, self.step_arrays
        if self.state is None:
            self.state = env_capability(env, protocols.Env.reset_arrays)(seed=self.seed)
            actor.seed(self.seed)
        observation = self.state
        buffers: list[np.ndarray | None] = []
        for t in range(steps):
            action, log_prob = act(observation)
            next_observation, reward, terminated, truncated, following = step(action)
            values = (observation, action, log_prob, next_observation, reward, terminated, truncated)
            if not buffers:  # sized by the first step: [envs, time, ...] of each value's own dtype
                buffers = [None if v is None else np.empty((envs, steps, *v.shape[1:]), dtype=v.dtype)
                           for v in values]
            for buffer, value in zip(buffers, values):
                if buffer is not None:
                    buffer[:, t] = value
            observation = following
        self.state = observation

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
