"""Frames per second of stepping many copies of an env with random actions: rlplug's ``torch-classic`` env
against gymnasium's vector envs. No learning, no policy: the cost of the env alone, as a collector pays it.

    python benchmarks/torch_classic.py                          # CartPole, 256 copies, 500 steps a side, 3 rounds
    python benchmarks/torch_classic.py --envs 1024 --device cuda --rounds 5
    python benchmarks/torch_classic.py --id MinAtar/Breakout-v1 --envs 64   # against MinAtar's own gym env

Sides (each times ``--steps`` steps of all ``--envs`` copies, random actions drawn in the side's own way):

- ``torch-classic``: TorchRL's ``step_and_maybe_reset`` on the env (TensorDicts, autoreset), what the
  collector's TensorDict road calls (on a GPU);
- ``torch-classic arrays``: the env's ``step_arrays`` (numpy in and out, autoreset), what the collector's
  array road calls on the CPU;
- ``torch-classic physics``: the env's own tensor step (``advance``) alone, without TorchRL's TensorDicts:
  what the dynamics cost, the floor of the line above;
- ``gymnasium sync``: ``gymnasium.make_vec(id, vectorization_mode="sync")``, the copies stepped one after
  another in Python (what rlplug's ``gym`` env does; for MinAtar, MinAtar's own gym env);
- ``gymnasium vector``: ``vectorization_mode="vector_entry_point"``, gymnasium's numpy-vectorised CartPole
  (CartPole only: the other ids have none).

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
from rlplug.plugins.envs import register_env_packages
from rlplug.plugins.envs.torch_classic import where_copies


def torch_classic(env_id: str, envs: int, steps: int, device: str) -> float:
    env = rlplug.make("env", "torch-classic", id=env_id, num_envs=envs, device=device)
    env.set_seed(0)
    state = env.reset()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        action = torch.nn.functional.one_hot(torch.randint(env.actions, (envs,), device=device), env.actions)
        _, state = env.step_and_maybe_reset(state.set("action", action))
    synchronize(device)
    return time.perf_counter() - start


def torch_classic_arrays(env_id: str, envs: int, steps: int, device: str) -> float:
    env = rlplug.make("env", "torch-classic", id=env_id, num_envs=envs)
    env.reset_arrays(seed=0)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(steps):
        env.step_arrays(rng.integers(env.actions, size=envs))
    return time.perf_counter() - start


def torch_classic_physics(env_id: str, envs: int, steps: int, device: str) -> float:
    env = rlplug.make("env", "torch-classic", id=env_id, num_envs=envs, device=device)
    env.set_seed(0)
    env.reset()
    state = env.state
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        state, _, terminated = env.advance(state, torch.randint(env.actions, (envs,), device=device))
        if bool(terminated.any()):  # as the roads restart: only where a copy ended
            state = where_copies(terminated, env.start(envs), state)
    synchronize(device)
    return time.perf_counter() - start


def gymnasium_side(mode: str):
    def run(env_id: str, envs: int, steps: int, device: str) -> float:
        vector = gym.make_vec(env_id, num_envs=envs, vectorization_mode=mode)
        vector.reset(seed=0)
        rng = np.random.default_rng(0)
        actions = int(vector.single_action_space.n)
        start = time.perf_counter()
        for _ in range(steps):
            vector.step(rng.integers(actions, size=envs))
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
    parser.add_argument("--id", default="CartPole-v1", help="a discrete-action id torch-classic has")
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="the torch-classic sides' device (arrays: the CPU's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (rlplug's run.num_threads default)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    register_env_packages(args.id)  # MinAtar registers its gymnasium ids on request
    sides = {side: run for side, run in SIDES.items() if side != "gymnasium vector" or args.id == "CartPole-v1"}
    rates: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(args.rounds):
        for side, run in sides.items():
            rates[side].append(args.envs * args.steps / run(args.id, args.envs, args.steps, args.device))
    print(f"{args.id}, {args.envs} copies, {args.steps} steps, random actions, {args.rounds} rounds; "
          f"torch {torch.__version__} ({args.device}, {args.threads} thread(s)), gymnasium {gym.__version__}, "
          f"{platform.processor() or platform.machine()}")
    base = statistics.median(rates["gymnasium sync"])
    print("| side | frames/s (median) | min-max | x gymnasium sync |\n| --- | --- | --- | --- |")
    for side, values in rates.items():
        middle = statistics.median(values)
        print(f"| {side} | {middle:,.0f} | {min(values):,.0f}-{max(values):,.0f} | {middle / base:.1f}x |")


if __name__ == "__main__":
    main()
