"""Cost of one replay-buffer call as a step-by-step off-policy loop makes them: store one transition, sample
256, for rlplug's ``uniform`` buffer and for TorchRL's own ``ReplayBuffer`` over the same kind of storage,
alternating in rounds (the machine is shared: read the ratios).

    python benchmarks/replay_calls.py [--rounds 5] [--calls 2000]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time

os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")  # before TorchRL is imported: no INFO lines in the table

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data import LazyTensorStorage, RandomSampler  # noqa: E402
from torchrl.data import ReplayBuffer as TorchRLReplayBuffer  # noqa: E402

import rlplug  # noqa: E402

CAPACITY = 200_000


def transition() -> TensorDict:
    """One Pendulum transition, as the off-policy loop stores it."""
    return TensorDict({"observation": torch.randn(1, 3), "action": torch.randn(1, 1),
                       "next": {"observation": torch.randn(1, 3), "reward": torch.randn(1, 1),
                                "terminated": torch.zeros(1, 1, dtype=torch.bool)}}, batch_size=[1])


def per_call_us(function, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as run_dir:
        buffers = {
            "rlplug": rlplug.make("replay_buffer", "uniform", capacity=CAPACITY, seed=0, device="cpu", run_dir=run_dir),
            "torchrl": TorchRLReplayBuffer(storage=LazyTensorStorage(CAPACITY), sampler=RandomSampler(),
                                           generator=torch.Generator().manual_seed(0)),
        }
        data = transition()
        for buffer in buffers.values():
            for _ in range(1000):
                buffer.extend(data)
        times: dict[str, dict[str, list[float]]] = {name: {"extend": [], "sample": []} for name in buffers}
        for _ in range(args.rounds):
            for name, buffer in buffers.items():
                times[name]["extend"].append(per_call_us(functools.partial(buffer.extend, data), args.calls))
                times[name]["sample"].append(per_call_us(functools.partial(buffer.sample, 256), args.calls))
    print("| call | rlplug us | torchrl us | rlplug / torchrl |")
    print("|---|---|---|---|")
    for call in ("extend", "sample"):
        ours, theirs = (statistics.median(times[name][call]) for name in ("rlplug", "torchrl"))
        label = "extend (1 transition)" if call == "extend" else "sample (256)"
        print(f"| {label} | {ours:.0f} | {theirs:.0f} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    main()
