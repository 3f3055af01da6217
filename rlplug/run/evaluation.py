"""Evaluation: the deterministic policy on an env of its own, with the training env's statistics frozen."""

from __future__ import annotations

import torch
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.core.collect import road_for
from rlplug.core.envs import build_env
from rlplug.core.episodes import EpisodeTracker
from rlplug.core.rollout import rollout
from rlplug.plugins.envs import MANY_ENVS
from rlplug.recipe import Recipe


def build_eval_env(recipe: Recipe, episodes: int | None = None) -> EnvBase:
    """A separate env instance for evaluation; one copy per episode (``episodes``, by default the recipe's
    ``eval.episodes``) where the env can say how many, up to the most copies rlplug makes in one process without
    a warning: more episodes are shared out among them."""
    copies = min(episodes or recipe.eval.episodes, MANY_ENVS)
    return build_env(recipe.env.with_copies(copies), device=recipe.run.device)


@torch.no_grad()
def evaluate(env: EnvBase, policy, episodes: int, seed: int) -> list[float]:
    """Returns of the deterministic policy over ``episodes`` episodes, from the same start states each time:
    each env's first episodes, shared out evenly (an env's quick second episode never stands in for another's
    long first one)."""
    envs = max(1, env.batch_size.numel())
    tracker = EpisodeTracker(envs, keep=None, quota=episodes)
    road = road_for(env, policy, seed, deterministic=True)

    def count(t, state, acted, transition) -> None:
        rewards, dones = road.outcome(transition)
        tracker.add(rewards.reshape(envs, 1), dones.reshape(envs, 1))

    with set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout(road, road.start(seed), until=lambda: tracker.episodes >= episodes, record=count)
    return list(tracker.recent)
