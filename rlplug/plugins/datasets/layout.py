"""A dataset's transitions fitted to an env's specs: checked (observations and actions of the env's shapes, the
same kind of actions) and discrete actions laid out as the spec lays them (one-hot or an index). Shared by offline
runs (:mod:`rlplug.run.offline`) and a replay buffer's ``prefill``."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rlplug.core.heads import action_bounds
from rlplug.errors import UserError, numbers
from rlplug.networks import observation_key
from rlplug.plugins.datasets.minari_format import RESCALE_KEYS


def laid_out(transitions: TensorDictBase, observation_spec, action_spec, path: str, *,
             rescaled: bool = False) -> TensorDictBase:
    """``transitions`` fitted to one env's specs (``observation_spec``'s batch dims are the env's copies); one
    line at ``path`` where they do not fit. ``rescaled``: their actions were mapped onto [-1, 1], so the env must
    act there (inside wider bounds they would fit and mean other actions)."""
    dims = len(observation_spec.shape)
    observation_shape = tuple(observation_spec[observation_key(observation_spec)].shape[dims:])
    recorded = tuple(transitions.get("observation").shape[1:])
    if recorded != observation_shape:
        raise UserError(f"the dataset's observations are of shape {list(recorded)} and the env's of "
                        f"{list(observation_shape)}: it was recorded on another env (or other observation options)",
                        path=path)
    action = transitions.get("action")
    discrete = action_spec.domain == "discrete"
    if discrete != (not action.is_floating_point()):
        kinds = ("discrete", "continuous")
        raise UserError(f"the dataset's actions are {kinds[action.is_floating_point()]} and the env's are "
                        f"{kinds[not discrete]}: it was recorded on another env", path=path)
    action_shape = tuple(action_spec.shape[dims:])
    if discrete:
        count = int(action_spec.space.n)
        if action.ndim != 1 or int(action.max()) >= count or int(action.min()) < 0:
            raise UserError(f"the dataset's actions are not indices of the env's {count} actions: it was recorded "
                            f"on another env", path=path)
        if "OneHot" in type(action_spec).__name__:
            action = torch.nn.functional.one_hot(action, count).to(action_spec.dtype)
        else:
            action = action.reshape(len(action), *action_shape).to(action_spec.dtype)
    elif tuple(action.shape[1:]) != action_shape:
        raise UserError(f"the dataset's actions are of shape {list(action.shape[1:])} and the env's of "
                        f"{list(action_shape)}: it was recorded on another env", path=path)
    elif rescaled:
        refuse_env_not_in_unit_range(observation_spec, action_spec, RESCALE_KEYS[path])
    else:
        refuse_actions_out_of_bounds(action, observation_spec, action_spec, path)
    transitions.set("action", action)
    return transitions


def refuse_actions_out_of_bounds(action: torch.Tensor, observation_spec, action_spec, path: str) -> None:
    """Continuous actions beyond the env's bounds (by more than 0.1% of the range: rounding) were recorded in
    another action range, e.g. Pendulum's [-2, 2] for an env wrapped to act in [-1, 1]: one line at ``path``."""
    bounds = action_bounds(observation_spec, action_spec)
    if bounds is None or not len(action):
        return
    low, high = (bound.to(action) for bound in bounds)
    slack = 1e-3 * (high - low)
    if bool(((action < low - slack) | (action > high + slack)).any()):
        unit = bool((low == -1).all() and (high == 1).all())
        remedy = (f"{RESCALE_KEYS[path]} = true maps them onto [-1, 1]" if unit and path in RESCALE_KEYS else
                  "record it on this env, wrappers and all")
        raise UserError(f"the dataset's actions reach {numbers(action.amin(0))} to {numbers(action.amax(0))} and "
                        f"the env's bounds are {numbers(low)} to {numbers(high)}: they were recorded in another action "
                        f"range; {remedy}", path=path)


def refuse_env_not_in_unit_range(observation_spec, action_spec, key: str) -> None:
    """An env whose continuous actions are not bounded by [-1, 1], for data rescaled onto [-1, 1]: one line at
    ``key``."""
    bounds = action_bounds(observation_spec, action_spec)
    if bounds is not None and all(torch.allclose(bound, torch.full_like(bound, value))
                                  for bound, value in zip(bounds, (-1.0, 1.0))):
        return
    acts = "in unbounded actions" if bounds is None else f"in {numbers(bounds[0])} to {numbers(bounds[1])}"
    raise UserError(f"the dataset's actions are mapped onto [-1, 1] and the env acts {acts}: give the env "
                    f"gymnasium's RescaleAction (env.wrappers: {{name = \"RescaleAction\", kwargs = {{min_action = "
                    f"-1.0, max_action = 1.0}}}}), or leave this out", path=key)
