"""Validated, not yet built components, and the annotations that ask for them.

A factory parameter annotated with one of the classes below takes a nested component: in a recipe, a
table with a ``use`` key (or just its name as a string). The factory receives it validated but unbuilt,
and builds it when it has the context it needs, e.g. ``policy.build(observation_spec=..., action_spec=...,
role="policy")``: the env must exist before a network can be sized from its specs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from rlplug.registry.registry import ComponentSpec


@dataclass(frozen=True)
class Component:
    """A component chosen and checked by a recipe (or ``rlplug.make``), ready to build."""

    kind: ClassVar[str] = "component"

    spec: "ComponentSpec"
    params: Mapping[str, Any] = field(default_factory=dict)
    path: str = ""

    def build(self, **context: Any) -> Any:
        """Call the factory with the validated parameters and the context names it asks for."""
        wanted = {name: value for name, value in context.items() if name in self.spec.schema.context}
        return self.spec.factory(**self.params, **wanted)

    def resolved(self) -> dict[str, Any]:
        """The table this component stands for, with every default filled in and the name qualified."""
        table: dict[str, Any] = {"use": self.spec.qualified_name}
        for name, value in self.params.items():
            table[name] = _resolved_value(value)
        return table


def _resolved_value(value: Any) -> Any:
    if isinstance(value, Component):
        return value.resolved()
    if isinstance(value, (list, tuple)):
        return [_resolved_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _resolved_value(v) for k, v in value.items()}
    if hasattr(value, "__dataclass_fields__"):
        return {k: _resolved_value(getattr(value, k)) for k in value.__dataclass_fields__}
    return value


class Env(Component):
    kind = "env"


class Algorithm(Component):
    kind = "algorithm"


class Estimator(Component):
    kind = "estimator"


class Logger(Component):
    kind = "logger"


class Network(Component):
    kind = "network"


class ReplayBuffer(Component):
    kind = "replay_buffer"


class Noise(Component):
    kind = "noise"


class Preprocessor(Component):
    kind = "preprocessor"


class Runner(Component):
    kind = "runner"


#: kind name -> annotation class, for the kinds that hooks register.
COMPONENT_TYPES: dict[str, type[Component]] = {
    c.kind: c for c in (Env, Algorithm, Estimator, Logger, Network, ReplayBuffer, Noise, Preprocessor, Runner)
}
