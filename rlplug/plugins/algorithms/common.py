"""What every built-in algorithm's config shares: the option types, and the step from a config dataclass to
the factory the registry reads.

An algorithm is declared once, as a frozen dataclass whose fields are its recipe table (types, defaults and
``#:`` comments for ``rlplug show``); :func:`factory_for` turns it into a factory whose signature is those
fields plus the context names. Torch-free: listing and validating recipes never load the algorithms.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from rlplug.plugins.algorithms.parameters import LiveParameters
from rlplug.registry.components import Component
from rlplug.registry.manager import BUILTIN_PLUGIN
from rlplug.registry.schema import Check, Range

Count = Annotated[int, Range(ge=1)]
Positive = Annotated[float, Range(gt=0.0)]
NonNegative = Annotated[float, Range(ge=0.0)]
Fraction = Annotated[float, Range(ge=0.0, le=1.0)]
Frames = Annotated[int, Range(ge=0)]
#: The largest learning rate a recipe may give: a step this large already throws the weights far off.
MAX_LR = 10.0


def rate_problem(lr: float) -> str | None:
    if lr > MAX_LR:
        return f"a learning rate must be in (0, {MAX_LR:g}], got {lr!r}: a larger step throws the weights off at once"
    return None


#: a learning rate: positive, at most :data:`MAX_LR`
Rate = Annotated[float, Range(gt=0.0), Check(rate_problem)]
def sample_freq_problem(value: int) -> str | None:
    """What is wrong with ``sde_sample_freq``: -1 or a positive number of steps."""
    if value == 0 or value < -1:
        return (f"must be a number of env steps >= 1 between new exploration matrices, or -1 for one at the start "
                f"of each batch only, got {value}")
    return None


#: gSDE's steps between new exploration matrices: >= 1, or -1 (only at the start of each batch)
SampleFreq = Annotated[int, Check(sample_freq_problem)]
OPTIMIZERS = Literal["adam", "adamw", "sgd", "rmsprop"]
SCHEDULES = Literal["constant", "linear", "cosine"]

ComponentT = TypeVar("ComponentT", bound=Component)


def named(kind: type[ComponentT], name: str) -> ComponentT:
    """The default of a config field typed as a component ``kind``: the component rlplug registers as ``name``.

    The default is the qualified name (``rlplug:sac-loss``): a package registering a component of the same bare
    name makes the bare name ambiguous, and a recipe that never wrote the key must not fail for it. The schema
    turns the name into a validated ``kind`` component before the config is made, so an algorithm reading the
    field always finds a ``kind``. A name already qualified (``"myplugin:my-loss"``) is kept as it is.
    """
    return typing.cast(ComponentT, name if ":" in name else f"{BUILTIN_PLUGIN}:{name}")


@functools.cache
def loss_fits(algorithm: str) -> Callable[[Any], str | None]:
    """The check of an algorithm's ``loss`` key, used as ``Annotated[Loss, Check(loss_fits("ppo"))]``: the loss
    component must serve ``algorithm`` (a loss factory says which algorithms it serves with a ``serves``
    attribute; one that says nothing is taken on trust). One function per algorithm, named ``fits_<algorithm>``
    (``rlplug show`` prints that name)."""

    def problem(loss: Any) -> str | None:
        serves = getattr(loss.spec.factory, "serves", None)
        if serves is None or algorithm in serves:
            return None
        from rlplug.registry import get_registry

        fitting = [spec.name for spec in get_registry().specs["loss"]
                   if algorithm in getattr(spec.factory, "serves", (algorithm,))]
        return (f"loss '{loss.spec.name}' is for {', '.join(serves)}, not {algorithm}; losses for {algorithm}: "
                f"{', '.join(fitting)}")

    problem.__name__ = f"fits_{algorithm.replace('-', '_')}"
    return problem


#: The context every algorithm is built with; those in ``CONTEXT_DEFAULTS`` may be left out. The run's ``[eval]``
#: table (``eval_episodes``, ``eval_every_frames``) is what pytorchrl's ``num_test_episodes`` and ``test_every``
#: report (:mod:`rlplug.plugins.algorithms.acting`); built outside a run, they are None.
CONTEXT = ("observation_spec", "action_spec", "device", "total_frames", "eval_episodes", "eval_every_frames")
CONTEXT_DEFAULTS: dict[str, Any] = {"device": "cpu", "eval_episodes": None, "eval_every_frames": None}
#: More context for the off-policy family: the replay buffer samples from a generator seeded by ``seed``, and
#: memory-mapped storage writes its files under ``run_dir``; both have defaults so that code may build one
#: without a run.
REPLAY_CONTEXT = {"seed": 0, "run_dir": None}


def field_default(field: dataclasses.Field) -> Any:
    """A config field's default as the schema reads it: its ``default``, or a value of its ``default_factory``,
    or none (a required key)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty


def factory_for(config_class: type, algorithm: Callable[[], type],
                optional_context: dict[str, Any] | None = None) -> Callable[..., Any]:
    """A registrable factory whose signature is the config's fields (the recipe table) plus the context.

    ``algorithm`` returns the algorithm's class, importing it: it is called only when built, so listing and
    validating never import torch (a typed function with a local import, which mypy checks); the class is
    called as ``Class(config, **context)``. ``optional_context`` adds context names with defaults.
    """
    optional_context = optional_context or {}
    hints = typing.get_type_hints(config_class, include_extras=True)
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter(name, keyword, default=default) for name, default in optional_context.items()]
    parameters += [inspect.Parameter(name, keyword) for name in CONTEXT if name not in CONTEXT_DEFAULTS]
    parameters += [inspect.Parameter(name, keyword, default=default) for name, default in CONTEXT_DEFAULTS.items()]
    for field in dataclasses.fields(config_class):
        default = field_default(field)
        parameters.append(inspect.Parameter(field.name, keyword, default=default, annotation=hints[field.name]))

    def factory(**values: Any) -> Any:
        defaults = {**CONTEXT_DEFAULTS, **optional_context}
        context = {name: values.pop(name, default) for name, default in defaults.items()}
        missing = [name for name in CONTEXT if name not in context and name not in values]
        if missing:
            raise TypeError(f"{factory.__name__} needs the context {', '.join(missing)}")
        context.update({name: values.pop(name) for name in CONTEXT if name in values})
        return algorithm()(config_class(**values), **context)

    factory.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # signature built at run time
    factory.__doc__ = config_class.__doc__
    factory.__name__ = factory.__qualname__ = f"make_{config_class.__name__.removesuffix('Config').lower()}"
    # where `rlplug show` reads the fields' comments
    factory.config_class = config_class  # type: ignore[attr-defined]  # function attribute set at run time
    # what `rlplug set` may change, read by the run layer through the protocol (registry.protocols.LiveParameters)
    factory.live_parameters = LiveParameters(config_class)  # type: ignore[attr-defined]  # as config_class
    return factory
