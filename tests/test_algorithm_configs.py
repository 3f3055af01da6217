"""An algorithm's config dataclass is its recipe table: what factory_for makes of its fields."""

from __future__ import annotations

import dataclasses
import inspect

from rlplug.plugins.algorithms.common import Count, factory_for
from rlplug.registry.schema import Schema


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    needed: int
    hidden: list[int] = dataclasses.field(default_factory=lambda: [32, 32])
    epochs: Count = 3


def test_a_default_factory_is_a_default_of_the_recipe_key_not_a_required_key():
    factory = factory_for(ToyConfig, lambda: dict)
    parameters = inspect.signature(factory).parameters
    assert parameters["hidden"].default == [32, 32]
    assert parameters["epochs"].default == 3
    assert parameters["needed"].default is inspect.Parameter.empty
    schema = Schema.of(factory)
    assert not schema.params["hidden"].required and schema.params["needed"].required
