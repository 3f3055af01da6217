"""Parameters changed while a run goes on (pytorchrl's ``update_algorithm_parameter``), for every algorithm on
the kit (rlplug's and plugins'), in one place.

An algorithm's config stays a frozen dataclass: a change is a ``dataclasses.replace`` of it, whose new value
the algorithm reads at its next update (``lr``, ``epochs``, ``tau``...), and, where a built object holds its
own copy (the loss's coefficients, the noise's sigma, the learners' rates), the value pushed into that object.
What each name reaches is the small table of its family (:data:`ON_POLICY`, :data:`OFF_POLICY`), which the
family's config names as its ``live_parameters`` class attribute (a subclass may extend it). Every change
is recorded on the algorithm (:func:`changes`), so a checkpoint keeps it and a rebuilt run applies it again
(:func:`restore`) before loading its state.

A name is checked by the recipe's own rules (the config field's annotation, or the noise component's); a name
that is not a parameter, or one fixed once the algorithm is built (its networks and their sizes, the loss, the
replay buffer, the batch collected), is refused in one line that lists the names that can change. Torch-free
at import: ``rlplug set`` checks a request against the stored recipe without loading torch.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from rlplug.errors import ParameterError, UserError, did_you_mean
from rlplug.registry.components import Component
from rlplug.registry.schema import Range, convert

#: the attribute of an algorithm holding its changes (name -> value, in the order made)
CHANGES = "changed_parameters"
#: the keys of a noise component that change during a run (the sigma its schedule starts from, and ends at)
NOISE_KEYS = {"sigma": "initial_sigma", "final_sigma": "final_sigma"}


def read_only(algorithm: Any, value: Any) -> None:
    """Nothing to push: the algorithm reads the config's value at each update."""


@dataclass(frozen=True)
class Entry:
    """One name that may change: the config fields it replaces (its own name where empty), the annotation of a
    name that is no field (``alpha``), how the live objects take the new value and how the current one is read
    (default: the config's)."""

    push: Callable[[Any, Any], None] = read_only
    fields: tuple[str, ...] = ()
    annotation: Any = None
    current: Callable[[Any], Any] | None = None
    #: for names that are no field: whether an algorithm of this config has it
    offered: Callable[[type], bool] = lambda config_class: True


def loss_attribute(*names: str) -> Callable[[Any, Any], None]:
    """Set the first of ``names`` the algorithm's loss has (rlplug's own name first, then TorchRL's)."""

    def push(algorithm: Any, value: Any) -> None:
        loss = algorithm.loss_module
        name = next((n for n in names if hasattr(loss, n)), None)
        if name is None:
            raise UserError(f"the loss {type(loss).__name__} keeps no {' or '.join(names)}, so this cannot change "
                            f"during the run; change it in the loss's table for a new run")
        held = getattr(loss, name)
        if hasattr(held, "fill_") and value is not None:  # a buffer (TorchRL's coefficients): in place
            import torch

            with torch.no_grad():
                held.fill_(float(value))
        else:
            setattr(loss, name, value)

    return push


def ppo_clip_start(algorithm: Any, value: float) -> None:
    """PPO's clip range: the start of its schedule (annealed or constant), set in the loss at the next update."""
    algorithm.clip_start = float(value)


def learner_rates(algorithm: Any, value: Any) -> None:
    """The off-policy learners' base rates, from the changed config; each schedule follows at the next update."""
    algorithm.learners.learning_rates = algorithm.learning_rates()


def learner_clip(algorithm: Any, value: float | None) -> None:
    algorithm.learners.max_grad_norm = value


def greedy_epsilon(algorithm: Any, value: float) -> None:
    """DQN's exploration probability, from the changed schedule, at once (the next collection uses it)."""
    algorithm.greedy.epsilon = algorithm.epsilon


def entropy_coefficient(algorithm: Any, value: float) -> None:
    """SAC's (CrossQ's, REDQ's) alpha now; where it is learned, it goes on learning from there."""
    import torch

    with torch.no_grad():
        algorithm.loss_module.log_alpha.fill_(math.log(value))


def current_alpha(algorithm: Any) -> float:
    return float(algorithm.loss_module.log_alpha.detach().exp())


#: the on-policy family (ppo, ppo-kl, a2c, vpg, surrogate, impala): names that change, and what each reaches
ON_POLICY: dict[str, Entry] = {
    "lr": Entry(), "max_grad_norm": Entry(), "epochs": Entry(), "anneal_clip": Entry(),
    "entropy_coef": Entry(loss_attribute("entropy_coef", "entropy_coeff")),
    "value_coef": Entry(loss_attribute("value_coef", "critic_coeff")),
    "normalize_advantages": Entry(loss_attribute("normalize_advantage")),
    "kl_target": Entry(loss_attribute("kl_target", "dtarg")),
    "clip_epsilon": Entry(ppo_clip_start),
}
#: the off-policy family (ddpg, td3, sac, crossq, redq, dqn)
OFF_POLICY: dict[str, Entry] = {
    "lr": Entry(learner_rates), "entropy_lr": Entry(learner_rates), "max_grad_norm": Entry(learner_clip),
    "gradient_steps": Entry(), "learning_starts": Entry(), "tau": Entry(), "policy_delay": Entry(),
    "reward_scale": Entry(), "reward_offset": Entry(), "reward_clip": Entry(), "target_update_interval": Entry(),
    "gamma": Entry(loss_attribute("gamma")),
    "target_entropy": Entry(loss_attribute("target_entropy")),
    "epsilon": Entry(greedy_epsilon, fields=("epsilon_start", "epsilon_end"), current=lambda a: a.epsilon),
    "epsilon_start": Entry(greedy_epsilon), "epsilon_end": Entry(greedy_epsilon),
    "exploration_fraction": Entry(greedy_epsilon),
    "alpha": Entry(entropy_coefficient, annotation=Annotated[float, Range(gt=0.0)], current=current_alpha,
                   offered=lambda config_class: "learn_entropy_coef" in field_names(config_class)),
}


def table(config_class: type) -> dict[str, Entry]:
    """What may change for an algorithm of ``config_class``: its ``live_parameters`` class attribute (a family's
    config sets its table, :data:`ON_POLICY` or :data:`OFF_POLICY`; a subclass may add entries of its own)."""
    return dict(getattr(config_class, "live_parameters", {}))


class LiveParameters:
    """What of an algorithm may change during a run, read from its config class alone (torch-free: ``rlplug set``
    checks a request against the stored recipe without building anything). :func:`factory_for` hands one to
    every algorithm factory as its ``live_parameters`` (:class:`rlplug.registry.protocols.LiveParameters`)."""

    def __init__(self, config_class: type):
        self.config_class = config_class

    def names(self, values: Mapping[str, Any]) -> list[str]:
        return offered(self.config_class, values)

    def annotation(self, values: Mapping[str, Any], name: str) -> Any:
        return annotation_of(self.config_class, values, name)

    def check(self, values: Mapping[str, Any], name: str, value: Any) -> Any:
        return checked(self.config_class, values, name, value)


def field_names(config_class: type) -> set[str]:
    return {f.name for f in dataclasses.fields(config_class)} if dataclasses.is_dataclass(config_class) else set()


def offered(config_class: type, values: Mapping[str, Any]) -> list[str]:
    """The names that can change for an algorithm of ``config_class`` whose recipe values are ``values``."""
    fields = field_names(config_class)
    names = [name for name, entry in table(config_class).items()
             if (all(f in fields for f in entry.fields or (name,)) if entry.annotation is None
                 else entry.offered(config_class))]
    noise = values.get("exploration_noise")
    if isinstance(noise, Component):
        names += [f"exploration_noise.{key}" for key in NOISE_KEYS if key in noise.spec.schema.params]
    return names


def annotation_of(config_class: type, values: Mapping[str, Any], name: str) -> Any:
    """The annotation ``name``'s value is checked against; a refusal naming what can change where it has none."""
    names = offered(config_class, values)
    if name not in names:
        can = ", ".join(names) or "none (this algorithm's parameters are fixed for a run)"
        if name in field_names(config_class) or name.split(".")[0] in field_names(config_class):
            why = ("is fixed once the algorithm is built (its networks and their sizes, the loss, the replay "
                   "buffer, the batch collected); start a new run to change it")
        else:
            why = f"is not a parameter of this algorithm{did_you_mean(name, names)}"
        raise ParameterError(f"'{name}' {why}; names that can change during a run: {can}", path=f"algorithm.{name}")
    if name.startswith("exploration_noise."):
        key = name.split(".", 1)[1]
        return values["exploration_noise"].spec.schema.params[key].annotation
    entry = table(config_class)[name]
    if entry.annotation is not None:
        return entry.annotation
    hints = typing.get_type_hints(config_class, include_extras=True)
    return hints[(entry.fields or (name,))[0]]


def checked(config_class: type, values: Mapping[str, Any], name: str, value: Any) -> Any:
    """``value`` for ``name`` checked by the recipe's rules and converted, or one line naming ``algorithm.NAME``."""
    annotation = annotation_of(config_class, values, name)
    try:
        return convert(value, annotation, path=name)
    except UserError as error:
        raise error.located(prefix="algorithm") from None


def built_in(config: Any) -> bool:
    """Whether ``config`` is a kit algorithm's (a config instance of a family with a table)."""
    return dataclasses.is_dataclass(config) and not isinstance(config, type) and bool(table(type(config)))


def config_values(config: Any) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def update(algorithm: Any, name: str, value: Any) -> tuple[Any, Any]:
    """Change ``name`` to ``value`` in ``algorithm`` (a built-in one), for its next update; returns the value
    before and the value now (converted). Recorded in :func:`changes`. A refused change leaves it as it was."""
    config: Any = getattr(algorithm, "config", None)
    if not built_in(config):
        raise UserError(f"{type(algorithm).__name__} has no parameters that change during a run (its config has no "
                        f"live_parameters)", path=f"algorithm.{name}")
    values = config_values(config)
    new = checked(type(config), values, name, value)
    if name.startswith("exploration_noise."):
        key = name.split(".", 1)[1]
        noise = values["exploration_noise"]
        old = noise.params.get(key)
        replaced = dataclasses.replace(config, exploration_noise=noise.with_params(**{key: new}))
        push: Callable[[Any, Any], None] = noise_push(key)
    else:
        entry = table(type(config))[name]
        old = entry.current(algorithm) if entry.current else values[name]
        fields = entry.fields or ((name,) if name in values else ())
        replaced = dataclasses.replace(config, **{field: new for field in fields})
        push = entry.push
    algorithm.config = replaced
    try:
        push(algorithm, new)
    except UserError as error:  # what the built objects cannot take: named by its key
        algorithm.config = config
        raise UserError(error.message, path=error.path or f"algorithm.{name}") from None
    except BaseException:
        algorithm.config = config
        raise
    setattr(algorithm, CHANGES, {**changes(algorithm), name: new})
    return old, new


def noise_push(key: str) -> Callable[[Any, Any], None]:
    def push(algorithm: Any, value: Any) -> None:
        attribute = NOISE_KEYS[key]
        if algorithm.noise is None or not hasattr(algorithm.noise, attribute):
            raise UserError(f"the exploration noise {type(algorithm.noise).__name__} keeps no {attribute}, so "
                            f"exploration_noise.{key} cannot change during the run", path="algorithm.exploration_noise")
        setattr(algorithm.noise, attribute, None if value is None else float(value))

    return push


def changes(algorithm: Any) -> dict[str, Any]:
    """The changes made to ``algorithm`` since it was built (name -> value, in order): what a checkpoint keeps."""
    return dict(getattr(algorithm, CHANGES, {}))


def restore(algorithm: Any, saved: Mapping[str, Any]) -> None:
    """Apply a checkpoint's changes again (before its state loads); a checkpoint written before any has none."""
    for name, value in saved.items():
        update(algorithm, name, value)


class ChangesDuringRun:
    """The algorithm's side of :class:`LiveParameters`, mixed into both families (the protocol's
    ``update_algorithm_parameter`` and ``parameter_changes``)."""

    def update_algorithm_parameter(self, name: str, value: Any) -> tuple[Any, Any]:
        """pytorchrl's: change ``name`` of this algorithm's table (``lr``...) from the next update on; the value
        before and the value now."""
        return update(self, name, value)

    def parameter_changes(self) -> dict[str, Any]:
        """The changes made since the algorithm was built, in order: what a checkpoint keeps."""
        return changes(self)
