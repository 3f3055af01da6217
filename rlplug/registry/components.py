"""Validated, not yet built components, and the annotations that ask for them.

A factory parameter annotated with one of the classes below takes a nested component: in a recipe, a
table with a ``use`` key (or just its name as a string). The factory receives it validated but unbuilt,
and builds it when it has the context it needs, e.g. ``policy.build(observation_spec=..., action_spec=...,
role="policy")``: the env must exist before a network can be sized from its specs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self

from rlplug.errors import UserError

if TYPE_CHECKING:
    from rlplug.registry.registry import ComponentSpec


@dataclass(frozen=True)
class Component:
    """A component chosen and checked by a recipe (or ``rlplug.make``), ready to build."""

    kind: ClassVar[str] = "component"
    #: keys of its table that rlplug handles itself rather than the factory: name -> annotation
    own_keys: ClassVar[dict[str, Any]] = {}

    spec: ComponentSpec
    params: Mapping[str, Any] = field(default_factory=dict)
    path: str = ""

    def build(self, **context: Any) -> Any:
        """Call the factory with the validated parameters and the context names it asks for; what it returns
        is checked against its kind's protocol (:mod:`rlplug.registry.protocols`).

        A factory that raises anything but a :class:`UserError` (which already says what the user can do) is
        reported in one line naming the component and its plugin; ``RLPLUG_DEBUG=1`` shows the traceback.
        """
        from rlplug.registry.protocols import PROTOCOLS, conform

        wanted = {name: value for name, value in context.items() if name in self.spec.schema.context}
        try:
            built = self.spec.factory(**self.params, **wanted)
        except UserError:
            raise
        except Exception as error:  # a plugin's bug, or what it could not build here: named, in one line
            raise ComponentFailure(f"{self.title} failed while being built: {type(error).__name__}: {error}",
                                   original=error) from error
        protocol = PROTOCOLS.get(self.kind)
        return built if protocol is None else conform(protocol, built, self.title)

    @property
    def title(self) -> str:
        """The component and who provides it, for messages: ``network 'mlp' (plugin rlplug 0.1.0)``."""
        return f"{self.kind} '{self.spec.name}' (plugin {self.spec.plugin} {self.spec.version})"

    def with_params(self, **changes: Any) -> Self:
        """The same component with some parameters replaced (values the caller knows to be valid)."""
        return replace(self, params={**self.params, **changes})

    def resolved(self) -> dict[str, Any]:
        """The table this component stands for, with every default filled in and the name qualified."""
        table: dict[str, Any] = {"use": self.spec.qualified_name}
        for name, value in self.params.items():
            table[name] = as_data(value)
        return table


def as_data(value: Any, *, for_display: bool = False) -> Any:
    """``value`` as recipe data: components as their tables, dataclasses as tables, tuples as lists.
    ``for_display``: None entries of tables dropped (TOML has no null) and anything TOML cannot hold shown as
    its repr."""
    if isinstance(value, Component):
        value = value.resolved()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [as_data(v, for_display=for_display) for v in value]
    if isinstance(value, Mapping):
        return {str(k) if for_display else k: as_data(v, for_display=for_display) for k, v in value.items()
                if not (for_display and v is None)}
    if for_display and not (value is None or isinstance(value, (bool, int, float, str))):
        return repr(value)
    return value


class ComponentFailure(UserError):
    """A component's factory raised while building it."""


@dataclass(frozen=True)
class Env(Component):
    """An env and the ``[[env.transforms]]`` around it: any env plugin's table takes that key, which rlplug
    applies (in order, through TorchRL's ``TransformedEnv``) to every env it builds from the recipe.
    ``build()`` calls the env's factory alone; :func:`rlplug.core.transformed.build_transformed` adds the
    transforms (the registry knows no TorchRL)."""

    kind = "env"
    transforms: tuple[Transform, ...] = ()
    #: what is done with the env's ``action_mask`` entry (:mod:`rlplug.core.masks`): "auto" applies it where the
    #: env has one; "applied" requires one; "observed" requires one and feeds it to the networks too
    action_mask: str = "auto"
    #: the entries an asymmetric actor-critic's networks read, gathered wherever the env is built (the policy's
    #: into ``observation``, the critic's into ``critic_observation``): set by the recipe from
    #: ``[algorithm.policy] in_keys`` and ``[algorithm.critic] in_keys``, not keys of the env's table
    policy_in_keys: tuple[str, ...] = ()
    critic_in_keys: tuple[str, ...] = ()

    def with_copies(self, count: int) -> Env:
        """The same env with ``count`` copies where it takes ``num_envs``, else itself."""
        return self.with_params(num_envs=count) if "num_envs" in self.params else self

    def resolved(self) -> dict[str, Any]:
        table = super().resolved()
        if self.transforms:
            table["transforms"] = [transform.resolved() for transform in self.transforms]
        if self.action_mask != "auto":
            table["action_mask"] = self.action_mask
        return table


class Algorithm(Component):
    kind = "algorithm"


class Estimator(Component):
    kind = "estimator"


class Logger(Component):
    kind = "logger"


@dataclass(frozen=True)
class Network(Component):
    """A network; its table's ``in_keys`` (read by rlplug, the factory never sees it) names the env's entries it
    reads, for an asymmetric actor-critic: ``[algorithm.critic] in_keys = ["state"]``, and the policy's own
    ``[algorithm.policy] in_keys = ["observation"]`` where the env's observation holds both."""

    kind = "network"
    #: the env's entries this network reads (``[algorithm.policy]`` and ``[algorithm.critic]`` only): names as the
    #: env declares them (``state``, ``params.g``), a Dict observation's entries by their own names
    in_keys: tuple[str, ...] = ()

    def resolved(self) -> dict[str, Any]:
        table = super().resolved()
        if self.in_keys:
            table["in_keys"] = list(self.in_keys)
        return table


class ReplayBuffer(Component):
    kind = "replay_buffer"


class Noise(Component):
    kind = "noise"


class Preprocessor(Component):
    kind = "preprocessor"


class Runner(Component):
    kind = "runner"


class Loss(Component):
    kind = "loss"

    def build(self, **context: Any) -> Any:
        """The loss moved to the algorithm's device: its buffers (a clip range, a KL coefficient, action bounds)
        are made where its factory made them, and a clip range left on the CPU fails a CUDA run's first update."""
        loss = super().build(**context)
        device = context.get("device")
        return loss.to(device) if device is not None else loss


class Transform(Component):
    kind = "transform"


class Callback(Component):
    kind = "callback"


@dataclass(frozen=True)
class IntrinsicRule:
    """A bound on a key rlplug reads itself (``schema.Range``'s role: ``schema`` imports this module)."""

    low: float
    high: float | None = None

    def check(self, value: Any) -> str | None:
        if value < self.low or (self.high is not None and value >= self.high):
            span = f">= {self.low:g}" + (f" and < {self.high:g}" if self.high is not None else "")
            return f"must be {span}, got {value!r}"
        return None


#: how the intrinsic reward's weight moves over the run: the learning rates' schedules (to 0 over
#: run.total_frames) and Seo et al.'s exponential decay, ``coef * (1 - decay) ** frames``
IntrinsicSchedule = Literal["constant", "linear", "cosine", "exponential"]


@dataclass(frozen=True)
class Intrinsic(Component):
    """An intrinsic reward and how much of it the algorithm adds: ``coef``, ``schedule`` and ``decay`` are keys of
    every ``[algorithm.intrinsic]`` table, read by rlplug (the factory never sees them), so any plugin's reward is
    weighted and scheduled the same way."""

    kind = "intrinsic"
    #: the weight of the intrinsic reward (beta): reward = env reward + coef_t * intrinsic
    coef: float = 1.0
    #: how coef moves: 'constant', 'linear' or 'cosine' to 0 over run.total_frames, or 'exponential':
    #: coef * (1 - decay) ** frames
    schedule: str = "constant"
    #: the exponential schedule's decay per frame collected (kappa); 0 for the other schedules
    decay: float = 0.0

    def resolved(self) -> dict[str, Any]:
        return {**super().resolved(), "coef": self.coef, "schedule": self.schedule, "decay": self.decay}


class Dataset(Component):
    kind = "dataset"


#: an env table's ``transforms`` and ``action_mask`` belong to rlplug, not to the env's factory
Env.own_keys = {"transforms": list[Transform], "action_mask": Literal["auto", "applied", "observed"]}
Network.own_keys = {"in_keys": list[str]}
Intrinsic.own_keys = {"coef": Annotated[float, IntrinsicRule(0.0)],
                      "schedule": IntrinsicSchedule,
                      "decay": Annotated[float, IntrinsicRule(0.0, 1.0)]}


#: kind name -> annotation class, for the kinds that hooks register.
COMPONENT_TYPES: dict[str, type[Component]] = {
    c.kind: c for c in (Env, Algorithm, Estimator, Logger, Network, ReplayBuffer, Noise, Preprocessor, Runner,
                         Loss, Transform, Callback, Intrinsic, Dataset)
}
