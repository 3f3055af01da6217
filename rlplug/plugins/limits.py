"""Upper bounds on config values that are legal in form but would exhaust the machine (time or memory), each with
the reason it protects, for ``Annotated[int, Range(ge=1), Limit(10_000, "...")]``; and the machine's memory that
sizes are checked against. Torch-free.

A :class:`Limit` reads as a :class:`rlplug.registry.schema.Range` to ``rlplug show`` (its ``le``), and refuses a
larger value with its reason, through a recipe, ``--set``, ``rlplug set`` and the Python API alike."""

from __future__ import annotations

import os
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


def available_memory() -> int:
    """The memory, in bytes, this machine can give a new allocation now without swapping (``MemAvailable``:
    free memory and the caches it may drop), or its physical memory where the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def process_memory() -> int:
    """This process's resident memory in bytes (its libraries, envs and networks loaded): about what another
    process doing its work (a Ray worker) takes."""
    try:
        with open("/proc/self/statm", encoding="ascii") as file:
            return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
