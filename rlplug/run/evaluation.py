"""Evaluation: the deterministic policy on an env of its own, with the training env's statistics frozen."""

from __future__ import annotations

import torch
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.core.collect import array_actor_for
from rlplug.core.envs import build_env
from rlplug.core.episodes import EpisodeTracker
from rlplug.core.recurrent import is_recurrent, with_recurrent_state
from rlplug.core.transformed import env_rewards
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
    actor = array_actor_for(env, policy, seed)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        if actor:
            act = actor.act
            observation = env.reset_arrays(seed=seed)
            while tracker.episodes < episodes:
                step = env.step_arrays(act(observation, deterministic=True)[0])
                _, reward, terminated, truncated, observation = step  # any 5-tuple (protocols.Env.step_arrays)
                tracker.add(reward.reshape(envs, 1), (terminated | truncated).reshape(envs, 1))
        else:
            if is_recurrent(policy):
                env = with_recurrent_state(env, policy)
            env.set_seed(seed)
            state = env.reset()
            while tracker.episodes < episodes:
                step, state = env.step_and_maybe_reset(policy(state))
                tracker.add(env_rewards(step).reshape(envs, 1).cpu().numpy(),
                            step.get(("next", "done")).reshape(envs, 1).cpu().numpy())
    return list(tracker.recent)
