"""``rlplug check-env RECIPE``: the recipe's env built exactly as a run builds it (its ``[env]`` table with
``num_envs``, transforms and normalisation, on ``run.device``, the process seeded as a run seeds it), then
checked by :func:`rlplug.core.env_check.check_env` against the time limit the recipe or the env claims."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlplug.core.env_check import EnvReport, check_env, claimed_time_limit
from rlplug.core.env_members import close_env
from rlplug.core.envs import build_env, env_label
from rlplug.core.process import prepare_process, seed_everything
from rlplug.recipe import Recipe, load

#: The env components whose ``id`` is a gymnasium id with that id's own time limit unless the recipe sets one.
GYMNASIUM_IDS = ("rlplug:gym", "rlplug:torch-classic")


def recipe_time_limit(component: Any) -> tuple[int, str] | None:
    """The time limit a recipe's env table claims: its ``max_episode_steps``, else, for rlplug's gymnasium envs,
    the id's own in gymnasium's registry; None where it claims none (the env may still claim one itself)."""
    steps = component.params.get("max_episode_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return steps, f"env.max_episode_steps = {steps}"
    env_id = component.params.get("id")
    if component.spec.qualified_name in GYMNASIUM_IDS and isinstance(env_id, str):
        import gymnasium

        try:
            registered = gymnasium.spec(env_id).max_episode_steps
        except gymnasium.error.Error:
            return None
        if registered:
            return int(registered), f"gymnasium's registration of {env_id}"
    return None


def check_recipe_env(recipe: Recipe | str | Path, overrides: list[str] | tuple[str, ...] = (), *,
                     steps: int = 1000, seed: int | None = None) -> EnvReport:
    """The env of ``recipe`` (a loaded recipe, or a file with ``--set`` style ``overrides``) built as a run
    builds it and checked over ``steps`` random steps of every copy from ``seed`` (default ``run.seed``)."""
    if not isinstance(recipe, Recipe):
        recipe = load(recipe, overrides)
    settings = recipe.run
    seed = settings.seed if seed is None else seed
    prepare_process(settings.num_threads)
    seed_everything(seed)
    env = build_env(recipe.env, device=settings.device)
    try:
        component = recipe.env
        name = f"{env_label(component)} ({component.spec.qualified_name})"
        limit = recipe_time_limit(component) or claimed_time_limit(env)
        return check_env(env, steps=steps, seed=seed, time_limit=limit, name=name)
    finally:
        close_env(env)
