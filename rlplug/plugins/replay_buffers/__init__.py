"""Replay buffers for off-policy algorithms: uniform and prioritised, in memory or memory-mapped on disk.

Both are rings of TensorDict columns that the buffer writes and samples itself, with TorchRL's ``SliceSampler`` for
sequences (see :mod:`rlplug.plugins.replay_buffers.buffers` for the interface and what a checkpoint holds of them).
"""

from __future__ import annotations

from typing import Annotated, Literal

from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Check, Range

Capacity = Annotated[int, Range(ge=1)]
Fraction = Annotated[float, Range(ge=0.0, le=1.0)]
#: 'memory': tensors on the run's device, saved whole in checkpoints; 'memmap': files under RUN_DIR/replay
Storage = Literal["memory", "memmap"]


def prefill_problem(path: str) -> str | None:
    """What is wrong with a ``prefill`` dataset, read from its metadata alone (torch-free)."""
    from pathlib import Path

    from rlplug.errors import UserError
    from rlplug.plugins.datasets.minari_format import read_metadata

    try:
        read_metadata(Path(path), "prefill")
    except UserError as error:
        return error.message
    return None


#: a Minari dataset's directory (the --out of rlplug record) whose transitions the buffer holds from the start
Prefill = Annotated[str, Check(prefill_problem)]


def make_uniform(
    #: the most transitions kept; the oldest are overwritten first
    capacity: Capacity = 1_000_000,
    #: 'memory' (tensors on the run's device, saved whole in checkpoints) or 'memmap' (files under
    #: RUN_DIR/replay, for buffers larger than memory; checkpoints keep only the cursor and RNG)
    storage: Storage = "memory",
    #: a Minari dataset's directory (the --out of rlplug record) whose transitions the buffer holds from the start,
    #: rewards as recorded (an offline run's data seeding an online one; unset: none)
    prefill: Prefill | None = None,
    #: the prefill's continuous actions mapped from the dataset's recorded bounds onto [-1, 1], as
    #: dataset.rescale_actions maps them, for an env acting in [-1, 1] (gymnasium's RescaleAction)
    prefill_rescale_actions: bool = False,
    run_dir=None,
    device="cpu",
    seed=0,
    observation_spec=None,
    action_spec=None,
):
    """A ring of transitions sampled uniformly with replacement (seeded by the run's seed)."""
    from rlplug.plugins.replay_buffers.buffers import ReplayBuffer

    buffer = ReplayBuffer(capacity, storage=storage, run_dir=run_dir, device=device, seed=seed,
                          transition_bytes=_transition_bytes(observation_spec, action_spec))
    return prefilled(buffer, prefill, prefill_rescale_actions, observation_spec, action_spec, device)


def make_prioritized(
    #: the most transitions kept; the oldest are overwritten first
    capacity: Capacity = 1_000_000,
    #: how strongly priorities shape sampling: P(i) ~ p_i^alpha (0: uniform)
    alpha: Fraction = 0.6,
    #: importance-weight exponent at the start: w_i ~ (N P(i))^-beta (1: full correction)
    beta: Fraction = 0.4,
    #: beta at the end of the run, reached linearly over run.total_frames
    beta_final: Fraction = 1.0,
    #: added to |priority|, so that every transition can be sampled
    eps: Annotated[float, Range(gt=0.0)] = 1e-6,
    #: 'memory' (tensors on the run's device, saved whole in checkpoints) or 'memmap' (files under
    #: RUN_DIR/replay, for buffers larger than memory; checkpoints keep only the cursor, RNG and priorities)
    storage: Storage = "memory",
    #: a Minari dataset's directory (the --out of rlplug record) whose transitions the buffer holds from the start,
    #: rewards as recorded, at the highest priority (unset: none)
    prefill: Prefill | None = None,
    #: the prefill's continuous actions mapped from the dataset's recorded bounds onto [-1, 1], as
    #: dataset.rescale_actions maps them, for an env acting in [-1, 1] (gymnasium's RescaleAction)
    prefill_rescale_actions: bool = False,
    run_dir=None,
    device="cpu",
    seed=0,
    total_frames=None,
    observation_spec=None,
    action_spec=None,
):
    """Prioritised replay (Schaul et al. 2016): sampled by priority^alpha, with importance weights.

    Samples carry ``index`` and ``weight``; the algorithm gives new priorities (``|td_error|``) with
    ``update_priority(index, priority)``. Sampling costs O(capacity) (a cumulative sum in plain torch).
    """
    from rlplug.plugins.replay_buffers.prioritized import PrioritizedReplayBuffer

    buffer = PrioritizedReplayBuffer(capacity, alpha=alpha, beta=beta, beta_final=beta_final, eps=eps,
                                     total_frames=total_frames, storage=storage, run_dir=run_dir, device=device,
                                     seed=seed, transition_bytes=_transition_bytes(observation_spec, action_spec))
    return prefilled(buffer, prefill, prefill_rescale_actions, observation_spec, action_spec, device)


def prefilled(buffer, prefill: str | None, rescale_actions: bool, observation_spec, action_spec, device: str):
    """``buffer`` holding the transitions of the dataset at ``prefill`` (fitted to the env's specs), if any."""
    from rlplug.errors import UserError
    from rlplug.plugins.datasets.minari_format import RESCALE_KEYS, MinariData

    key = "algorithm.replay_buffer.prefill"
    if prefill is None:
        if rescale_actions:
            raise UserError("there is no prefill dataset to rescale: set prefill too, or leave this out",
                            path=RESCALE_KEYS[key])
        return buffer
    from pathlib import Path

    from rlplug.plugins.datasets.layout import laid_out

    if observation_spec is None or action_spec is None:
        raise UserError("prefill fits the dataset to the env's specs, which this buffer was not given", path=key)
    data = MinariData(Path(prefill), key, rescale_actions=rescale_actions, rescale_key=RESCALE_KEYS[key])
    transitions = laid_out(data.transitions(device), observation_spec, action_spec, key,
                           rescaled=data.rescaled_from is not None)
    buffer.extend(transitions.select("observation", "action", ("next", "observation"), ("next", "reward"),
                                     ("next", "terminated")))
    return buffer


def _transition_bytes(observation_spec, action_spec) -> int:
    """What one transition takes, where the env's specs are given (an algorithm builds the buffer with them)."""
    if observation_spec is None or action_spec is None:
        return 0
    from rlplug.plugins.replay_buffers.sizing import transition_bytes

    return transition_bytes(observation_spec, action_spec)


@hookimpl
def rlplug_register_replay_buffers(register):
    register("uniform", make_uniform)
    register("prioritized", make_prioritized, aliases=("prioritised", "per"))
