"""How much a replay buffer would hold, checked before anything is allocated: a capacity that cannot fit where
the buffer keeps its transitions (the memory available now, a GPU's free memory, or the disk for 'memmap') is one
line, not an allocation error, nor a machine swapping (and deaf to Ctrl-C) as the ring fills."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from rlplug.errors import UserError
from rlplug.plugins.limits import available_memory


def transition_bytes(observation_spec, action_spec) -> int:
    """About how many bytes one stored transition takes: its observation twice (now and next), its action, a
    float reward and two flags. The specs are the env's, batched over its copies."""
    env_dims = observation_spec.ndim

    def one_copy(spec) -> int:
        leaves = spec.values(include_nested=True, leaves_only=True) if hasattr(spec, "values") else [spec]
        return sum(leaf.shape[env_dims:].numel() * leaf.dtype.itemsize for leaf in leaves)

    return 2 * one_copy(observation_spec) + one_copy(action_spec) + 4 + 2


def check_fits(capacity: int, slot_bytes: int, storage: str, device: str | torch.device,
               run_dir: str | Path | None) -> None:
    """A :class:`UserError` where ``capacity`` slots of ``slot_bytes`` cannot fit where the buffer keeps them
    (the memory available now, not the machine's total, which other processes share; the device's free memory;
    or the disk under ``run_dir`` for 'memmap'): refused before anything is allocated."""
    needed = capacity * slot_bytes
    if storage == "memmap":
        if run_dir is None:
            return
        where = Path(run_dir).absolute()
        while not where.exists():  # the run directory may not exist yet
            where = where.parent
        available, what = shutil.disk_usage(where).free, f"free disk space under {where}"
    elif torch.device(device).type == "cuda":
        available, what = torch.cuda.mem_get_info(torch.device(device))[0], f"free memory of {device}"
    else:
        available, what = available_memory(), "memory available on this machine"
    if needed > available:
        raise UserError(f"{capacity} transitions of about {slot_bytes} bytes need {needed / 2**30:.3g} GiB, more than "
                        f"the {available / 2**30:.3g} GiB {what}; lower the capacity",
                        path="algorithm.replay_buffer.capacity")
