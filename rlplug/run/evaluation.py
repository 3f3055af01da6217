"""Evaluation: the deterministic policy on an env of its own (``[eval.env]``, or one like ``[env]``), with the
training env's statistics frozen."""

from __future__ import annotations

from typing import Any

import torch
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.core.collect import road_for
from rlplug.core.env_members import env_capability, env_statistics
from rlplug.core.envs import build_env
from rlplug.core.episodes import EpisodeTracker
from rlplug.core.heads import observation_key
from rlplug.core.rollout import rollout
from rlplug.errors import UserError
from rlplug.plugins.envs import MANY_ENVS
from rlplug.recipe import Recipe
from rlplug.registry import protocols


def build_eval_env(recipe: Recipe, episodes: int | None = None) -> EnvBase:
    """A separate env instance for evaluation, of ``[eval.env]`` where the recipe has one, else of ``[env]``; one
    copy per episode (``episodes``, by default the recipe's ``eval.episodes``) where the env can say how many, up
    to the most copies rlplug makes in one process without a warning: more episodes are shared out among them."""
    copies = min(episodes or recipe.eval.episodes, MANY_ENVS)
    return build_env((recipe.eval.env or recipe.env).with_copies(copies), device=recipe.run.device)


def leaf_specs(env, kind: str) -> dict[str, tuple[list[int], Any]]:
    """What the policy reads of ``env`` (``kind`` "observation": the entry networks read, see
    :func:`observation_key`) or writes (``kind`` "action"), by entry name: each shape without the env's batch
    dimensions, and its dtype."""
    dims = len(env.batch_size)
    if kind == "action":
        return {"action": (list(env.action_spec.shape[dims:]), env.action_spec.dtype)}
    key = observation_key(env.observation_spec)
    spec = env.observation_spec[key]
    if not hasattr(spec, "keys"):
        return {key: (list(spec.shape[dims:]), spec.dtype)}
    return {".".join((key, name) if isinstance(name, str) else (key, *name)): (list(leaf.shape[dims:]), leaf.dtype)
            for name, leaf in spec.items(True, True)}


def check_eval_env(train_env, eval_env, what: str) -> None:
    """A ``UserError`` naming the first observation or action entry where ``eval_env`` (called ``what``) differs
    from the training env: the policy could not act there, nor the training env's statistics apply."""
    for kind in ("observation", "action"):
        trained = leaf_specs(train_env, kind)
        try:
            evaluated = leaf_specs(eval_env, kind)
        except ValueError as error:  # no single observation entry
            raise UserError(str(error), path=what) from None
        for name in sorted(set(trained) | set(evaluated)):
            if trained.get(name) != evaluated.get(name):
                shown = [f"{shape} {dtype}" if shape is not None else "none"
                         for shape, dtype in (trained.get(name, (None, None)), evaluated.get(name, (None, None)))]
                raise UserError(f"its {kind} entry '{name}' is {shown[1]}, the training "
                                f"env's is {shown[0]}; an eval env must take the policy's observations and actions "
                                f"(another max_episode_steps or kwargs, not another task)", path=what)


def borrowed_eval_env(train_env, env):
    """``env``, a built env handed to :meth:`rlplug.Agent.train` (``eval_env=``), checked: an env that takes
    the policy's observations and actions, and the training env's statistics where there are any."""
    if not isinstance(env, EnvBase) and not all(hasattr(env, name) for name in
                                                ("observation_spec", "action_spec", "batch_size", "reset")):
        raise UserError(f"eval_env={type(env).__name__}: expected an env table ({{'use': 'gym', 'id': ...}}) or a "
                        f"built env (a TorchRL EnvBase)")
    check_eval_env(train_env, env, "eval_env")
    if env_statistics(train_env) and env_capability(env, protocols.Env.load_statistics) is None:
        raise UserError("eval_env: the training env normalises observations, and this env cannot take its "
                        "statistics (no load_statistics); give an env table ({'use': 'gym', ...}) instead")
    return env


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
