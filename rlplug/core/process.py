"""Set-up every process that trains or collects makes once: threads, seeds, quiet logs, unchecked distributions.
The training process and each Ray worker call :func:`prepare_process`."""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import torch


def set_compute_threads(count: int) -> None:
    """Use ``count`` threads for torch's kernels and for numpy's BLAS. For small networks on a few cores one
    thread is fastest, and BLAS threads left to their default spin on every core there is (BENCHMARKS.md)."""
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(count)
    threadpool_limits(count, user_api="blas")


def physical_memory() -> int:
    """This machine's memory in bytes: what sizes a recipe asks for are checked against before allocating."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def quiet_torchrl() -> None:
    """TorchRL logs INFO lines (spec checks) to stdout by default; warnings only, unless RL_LOGGING_LEVEL says."""
    if "RL_LOGGING_LEVEL" not in os.environ:
        logging.getLogger("torchrl").setLevel(logging.WARNING)


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's global generators, from one seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def prepare_process(threads: int) -> None:
    """Threads, quiet TorchRL, and distributions without argument checks (they cost more than sampling)."""
    set_compute_threads(threads)
    quiet_torchrl()
    torch.distributions.Distribution.set_default_validate_args(False)
