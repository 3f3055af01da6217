"""Frames per second of stepping many CartPole copies with random actions: rlplug's ``torch-classic`` env against
gymnasium's vector envs. No learning, no policy: the cost of the env alone, as a collector pays it.

    python benchmarks/torch_classic.py                          # 256 copies, 500 steps a side, 3 rounds
    python benchmarks/torch_classic.py --envs 1024 --device cuda --rounds 5

Sides (each times ``--steps`` steps of all ``--envs`` copies, random actions drawn in the side's own way):

- ``torch-classic``: TorchRL's ``step_and_maybe_reset`` on the env (TensorDicts, autoreset), what the
  collector's TensorDict road calls (on a GPU);
- ``torch-classic arrays``: the env's ``step_arrays`` (numpy in and out, autoreset), what the collector's
  array road calls on the CPU;
- ``torch-classic physics``: the env's own tensor step (``advance``) alone, without TorchRL's TensorDicts:
  what the dynamics cost, the floor of the line above;
- ``gymnasium sync``: ``gymnasium.make_vec(id, vectorization_mode="sync")``, the copies stepped one after
  another in Python (what rlplug's ``gym`` env does);
- ``gymnasium vector``: ``vectorization_mode="vector_entry_point"``, gymnasium's numpy-vectorised CartPole.

Sides alternate within each round so that a busy machine slows all alike; the report gives each side's
median frames/s over the rounds (min-max) and its ratio to ``gymnasium sync``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

import rlplug

ENV_ID = "CartPole-v1"


def torch_classic(envs: int, steps: int, device: str) -> float:
    env = rlplug.make("env", "torch-classic", id=ENV_ID, num_envs=envs, device=device)
    env.set_seed(0)
    state = env.reset()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        action = torch.nn.functional.one_hot(torch.randint(2, (envs,), device=device), 2)
        _, state = env.step_and_maybe_reset(state.set("action", action))
    synchronize(device)
    return time.perf_counter() - start


def torch_classic_arrays(envs: int, steps: int, device: str) -> float:
    env = rlplug.make("env", "torch-classic", id=ENV_ID, num_envs=envs)
    env.reset_arrays(seed=0)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(steps):
        env.step_arrays(rng.integers(2, size=envs))
    return time.perf_counter() - start


def torch_classic_physics(envs: int, steps: int, device: str) -> float:
    env = rlplug.make("env", "torch-classic", id=ENV_ID, num_envs=envs, device=device)
    env.set_seed(0)
    env.reset()
    state = env.state
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        state, _, terminated = env.advance(state, torch.randint(2, (envs,), device=device))
        if bool(terminated.any()):  # as the roads restart: only where a copy ended
            state = torch.where(terminated.unsqueeze(-1), env.start(envs), state)
    synchronize(device)
    return time.perf_counter() - start


def gymnasium_side(mode: str):
    def run(envs: int, steps: int, device: str) -> float:
        vector = gym.make_vec(ENV_ID, num_envs=envs, vectorization_mode=mode)
        vector.reset(seed=0)
        rng = np.random.default_rng(0)
        start = time.perf_counter()
        for _ in range(steps):
            vector.step(rng.integers(2, size=envs))
        elapsed = time.perf_counter() - start
        vector.close()
        return elapsed

    return run


def synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


SIDES = {
    "gymnasium sync": gymnasium_side("sync"),
    "gymnasium vector": gymnasium_side("vector_entry_point"),
    "torch-classic": torch_classic,
    "torch-classic arrays": torch_classic_arrays,
    "torch-classic physics": torch_classic_physics,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="the torch-classic sides' device (arrays: the CPU's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (rlplug's run.num_threads default)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(args.rounds):
        for side, run in SIDES.items():
            rates[side].append(args.envs * args.steps / run(args.envs, args.steps, args.device))
    print(f"{ENV_ID}, {args.envs} copies, {args.steps} steps, random actions, {args.rounds} rounds; "
          f"torch {torch.__version__} ({args.device}, {args.threads} thread(s)), gymnasium {gym.__version__}, "
          f"{platform.processor() or platform.machine()}")
    base = statistics.median(rates["gymnasium sync"])
    print("| side | frames/s (median) | min-max | x gymnasium sync |\n| --- | --- | --- | --- |")
    for side, values in rates.items():
        middle = statistics.median(values)
        print(f"| {side} | {middle:,.0f} | {min(values):,.0f}-{max(values):,.0f} | {middle / base:.1f}x |")


if __name__ == "__main__":
    main()
