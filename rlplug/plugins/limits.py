"""Upper bounds on config values that are legal in form but would exhaust the machine (time or memory), each with
the reason it protects, for ``Annotated[int, Range(ge=1), Limit(10_000, "...")]``. Torch-free.

A :class:`Limit` reads as a :class:`rlplug.registry.schema.Range` to ``rlplug show`` (its ``le``), and refuses a
larger value with its reason, through a recipe, ``--set``, ``rlplug set`` and the Python API alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limit:
    """At most ``le``: beyond it, ``why`` (what the value would cost, said to the user)."""

    le: float
    why: str

    def check(self, value: Any) -> str | None:
        if isinstance(value, (int, float)) and value > self.le:
            bound = int(self.le) if float(self.le).is_integer() else self.le
            return f"must be at most {bound}, got {value!r}: {self.why}"
        return None
