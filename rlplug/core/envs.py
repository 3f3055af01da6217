"""Building a run's envs: the recipe's env, its ``[[env.transforms]]`` and the one ``observation`` entry the
networks read."""

from __future__ import annotations

from rlplug.core.masks import with_action_mask
from rlplug.core.observations import one_observation, with_network_entries
from rlplug.core.transformed import build_transformed


def env_label(component) -> str:
    """How messages name a recipe's env: its gymnasium id where its table has one, else the component."""
    env_id = component.params.get("id")
    return str(env_id) if env_id else f"'{component.spec.name}'"


def build_env(component, **context):
    """The recipe's env built, with one ``observation`` entry for the networks wherever it declares several
    (:func:`rlplug.core.observations.one_observation`): every env of a run, training, evaluation and
    workers', is built here, so all see the same entries. An env's ``action_mask`` entry is read first
    (:func:`rlplug.core.masks.with_action_mask`), so the networks' entries leave it out; an asymmetric
    actor-critic's entries (``[algorithm.policy]`` and ``[algorithm.critic] in_keys``, which the recipe gives the
    env) are gathered next (:func:`rlplug.core.observations.with_network_entries`)."""
    env = with_action_mask(build_transformed(component, **context), getattr(component, "action_mask", "auto"))
    env = with_network_entries(env, getattr(component, "policy_in_keys", ()), getattr(component, "critic_in_keys", ()))
    return one_observation(env)
