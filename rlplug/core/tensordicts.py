"""TensorDicts built on the hot paths from tensors rlplug itself has just made.

``TensorDict(...)`` checks every value's shape and device against the batch size, which costs several times
the construction itself (BENCHMARKS.md); a step-by-step off-policy loop builds three per env step (the
collected step, the stored transition, the replay sample), where the shapes are right by construction.
:func:`trusted` builds them without those checks (tensordict's own ``_new_unsafe``), and falls back to the
checked constructor where that private entry point is missing.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

_new_unsafe = getattr(TensorDict, "_new_unsafe", None)


def trusted(nested: dict[Any, Any], batch_size: list[int] | torch.Size,
            device: torch.device | str | None = None) -> TensorDict:
    """A TensorDict of ``nested`` (dicts become sub-TensorDicts) whose values the caller guarantees start
    with ``batch_size`` and live on ``device`` (when given)."""
    if _new_unsafe is None:
        return TensorDict(nested, batch_size=batch_size, device=device)
    source = {key: trusted(value, batch_size, device) if isinstance(value, dict) else value
              for key, value in nested.items()}
    return _new_unsafe(source, batch_size=torch.Size(batch_size), device=None if device is None else torch.device(device))
