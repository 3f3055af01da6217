"""Collecting ``[*env_batch, time]`` batches with a policy, and evaluating the deterministic policy.

Two roads give the same batch layout (TorchRL's: root ``observation``, ``action``, the log-probability,
and ``next`` with ``observation``, ``reward``, ``done``, ``terminated``, ``truncated``):

- the tensor road, when the env has ``step_tensors`` (:class:`rlplug.envs.VectorGymEnv`) and the policy has
  the usual actor shape (:class:`rlplug.acting.ActorView`): plain tensors into preallocated buffers, no
  TensorDict per step;
- the TensorDict road for any other TorchRL env and policy: ``env.step_and_maybe_reset(policy(state))``.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.acting import ActorView
from rlplug.errors import UserError

RECENT_EPISODES = 20


def actor_view_for(env: EnvBase, policy) -> ActorView | None:
    """The actor view to collect with on the tensor road, or None where only the TensorDict road goes."""
    if not getattr(env, "supports_tensor_steps", False):
        return None
    try:
        return ActorView.of(policy)
    except TypeError:
        return None


class EpisodeTracker:
    """Episode returns as steps come in, for the 'recent return' people watch while training."""

    def __init__(self, envs: int, keep: int | None = RECENT_EPISODES):
        self.running = np.zeros(envs)
        self.recent: deque[float] = deque(maxlen=keep)
        self.episodes = 0

    def add(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        """``rewards`` and ``dones`` shaped ``[envs, time]``."""
        for t in range(rewards.shape[1]):
            self.running += rewards[:, t]
            for env_index in np.flatnonzero(dones[:, t]):
                self.recent.append(float(self.running[env_index]))
                self.running[env_index] = 0.0
                self.episodes += 1

    def recent_return(self) -> float | None:
        return float(np.mean(self.recent)) if self.recent else None


class Collector:
    """Steps ``env`` with ``policy`` and returns batches of ``frames_per_batch`` frames."""

    def __init__(self, env: EnvBase, policy, frames_per_batch: int, seed: int, tensor_road: bool = True):
        self.env, self.policy, self.seed = env, policy, seed
        self.envs = max(1, env.batch_size.numel())
        if frames_per_batch % self.envs:
            raise UserError(f"frames_per_batch ({frames_per_batch}) must be a multiple of the env's "
                            f"{self.envs} parallel envs", path="algorithm.frames_per_batch")
        self.steps = frames_per_batch // self.envs
        self.time_dim = len(env.batch_size)
        self.actor = actor_view_for(env, policy) if tensor_road else None
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
            batch = self._collect_tensors() if self.actor else self._collect_tensordicts()
        rewards = batch.get(("next", "reward")).reshape(self.envs, self.steps).cpu().numpy()
        dones = batch.get(("next", "done")).reshape(self.envs, self.steps).cpu().numpy()
        self.tracker.add(rewards, dones)
        return batch

    def _collect_tensordicts(self) -> TensorDictBase:
        if self.state is None:
            self.env.set_seed(self.seed)
            self.state = self.env.reset()
        steps = []
        for _ in range(self.steps):
            step, self.state = self.env.step_and_maybe_reset(self.policy(self.state))
            steps.append(step)
        return torch.stack(steps, dim=self.time_dim)

    def _collect_tensors(self) -> TensorDictBase:
        actor, env, steps = self.actor, self.env, self.steps
        if self.state is None:
            self.state = env.reset_tensors(seed=self.seed)
        observation = self.state
        columns: dict[str, list[torch.Tensor]] = {k: [] for k in ("obs", "action", "log_prob", "next_obs",
                                                                   "reward", "terminated", "truncated")}
        act, step = actor.act, env.step_tensors  # looked up once: env may be a TransformedEnv forwarding them
        # Inference mode is cheaper per op than no_grad; the stacks below, outside it, are ordinary tensors.
        with torch.inference_mode():
            for _ in range(steps):
                action, log_prob = act(observation)
                transition = step(action)
                for key, value in (("obs", observation), ("action", action), ("log_prob", log_prob),
                                   ("next_obs", transition.next_observation), ("reward", transition.reward),
                                   ("terminated", transition.terminated), ("truncated", transition.truncated)):
                    columns[key].append(value)
                observation = transition.observation
        self.state = observation

        def stacked(key: str, feature: bool = False) -> torch.Tensor:
            tensor = torch.stack(columns[key], dim=1)  # [envs, time, ...]
            return tensor.unsqueeze(-1) if feature else tensor

        terminated, truncated = stacked("terminated", True), stacked("truncated", True)
        return TensorDict(
            {actor.observation_key: stacked("obs"), actor.action_key: stacked("action"),
             actor.log_prob_key: stacked("log_prob"),
             "next": {actor.observation_key: stacked("next_obs"), "reward": stacked("reward", True),
                      "terminated": terminated, "truncated": truncated, "done": terminated | truncated}},
            batch_size=[self.envs, steps], device=env.device,
        )


@torch.no_grad()
def evaluate(env: EnvBase, policy, episodes: int, seed: int) -> list[float]:
    """Returns of the deterministic policy over ``episodes`` episodes, from the same start states each time."""
    envs = max(1, env.batch_size.numel())
    tracker = EpisodeTracker(envs, keep=None)
    actor = actor_view_for(env, policy)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        if actor:
            observation = env.reset_tensors(seed=seed)
            while tracker.episodes < episodes:
                action, _ = actor.act(observation, deterministic=True)
                transition = env.step_tensors(action)
                done = transition.terminated | transition.truncated
                tracker.add(transition.reward.reshape(envs, 1).cpu().numpy(), done.reshape(envs, 1).cpu().numpy())
                observation = transition.observation
        else:
            env.set_seed(seed)
            state = env.reset()
            while tracker.episodes < episodes:
                step, state = env.step_and_maybe_reset(policy(state))
                tracker.add(step.get(("next", "reward")).reshape(envs, 1).cpu().numpy(),
                            step.get(("next", "done")).reshape(envs, 1).cpu().numpy())
    return list(tracker.recent)[:episodes]
