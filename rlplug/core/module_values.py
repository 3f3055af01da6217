"""A module's schedule values kept where a policy's weights carry them."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class BufferedValue:
    """A number on an ``nn.Module`` (an exploration schedule's epsilon, phase or position) held in a non-persistent
    0-d buffer named ``buffer`` and read as a Python number. Buffers travel with a policy's weights (the ray
    runner pushes its workers those); a plain attribute stays at its first value on every copy. Non-persistent:
    checkpoints keep what they kept."""

    def __init__(self, buffer: str, dtype: torch.dtype):
        self.buffer, self.dtype = buffer, dtype

    def __get__(self, module: nn.Module | None, owner: type | None = None) -> Any:
        if module is None:
            return self
        return getattr(module, self.buffer).item()

    def __set__(self, module: nn.Module, value: Any) -> None:
        if hasattr(module, self.buffer):
            getattr(module, self.buffer).fill_(value)
        else:
            module.register_buffer(self.buffer, torch.tensor(value, dtype=self.dtype), persistent=False)
