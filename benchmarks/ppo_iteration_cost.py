"""What one iteration of the canonical CartPole PPO costs in torch operator calls and in Python calls.

One iteration is one collected batch (32 steps of 8 CartPoles) and one update (20 epochs of one 256-frame
minibatch). Counted on the real run built from ``recipes/cartpole-ppo.toml`` after a few warm-up iterations:

- **aten ops**: operator calls torch's profiler records (``aten::*`` events), all of them and those called from
  Python directly (no aten op above them: each of the others is dispatched from inside one of these); on the
  CPU each computing op is a kernel call, so fewer of them is less fixed per-call cost;
- **Python calls**: ``cProfile``'s total function calls (Python functions and built-ins);
- **thread CPU ms**: the median ``time.thread_time`` of an update and of a collection over ``--repeats`` more
  iterations (noisy on a shared host; the counts are not).

The eager floor (``benchmarks/peers/eager_ppo_cartpole.py``) is counted beside it, per whole iteration: its
training loop is one function, so its iteration is the difference between training for 6 batches and for 2,
divided by 4 (what building the envs and networks costs cancels out).

With ``--seeds N`` it also times the update of N seeds trained together (``--batched``: one vmapped call a
minibatch) and how much of it the matrix products and ``tanh`` (forward and backward) take alone, the kernels
every seed's arithmetic needs whatever calls them: that share, over one seed's whole iteration, is the least a
batched iteration can cost against one seed on this machine.

    python benchmarks/ppo_iteration_cost.py
    python benchmarks/ppo_iteration_cost.py --set algorithm.loss='{use="ClipPPOLoss"}'   # any recipe override
    python benchmarks/ppo_iteration_cost.py --seeds 8 --no-eager
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

torch.set_num_threads(1)  # as the run sets it

from torch.profiler import ProfilerActivity, profile  # noqa: E402

import rlplug  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPE = REPO_ROOT / "recipes" / "cartpole-ppo.toml"


def aten_counts(work) -> tuple[int, int]:
    """(every aten op, the aten ops with no aten op above them) that ``work()`` calls."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work()
    aten = [event for event in prof.events() if event.name.startswith("aten::")]

    def top_level(event) -> bool:
        parent = event.cpu_parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                return False
            parent = parent.cpu_parent
        return True

    return len(aten), sum(top_level(event) for event in aten)


#: the kernels of a 64-64 tanh MLP's forward and backward (self CPU time in torch's profiler)
ARITHMETIC = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::tanh", "aten::tanh_backward")


def arithmetic_share(work) -> float:
    """The share of ``work()``'s self CPU time (in torch's profiler) that :data:`ARITHMETIC`'s kernels take."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work()
    rows = prof.key_averages()
    return sum(row.self_cpu_time_total for row in rows if row.key in ARITHMETIC) / sum(
        row.self_cpu_time_total for row in rows)


def python_calls(work) -> int:
    profiler = cProfile.Profile()
    profiler.runcall(work)
    return pstats.Stats(profiler).total_calls  # type: ignore[attr-defined]


def thread_ms(work, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        work()
        times.append((time.thread_time() - start) * 1000)
    return statistics.median(times)


def overrides(pairs: list[str]) -> dict:
    """``--set KEY=VALUE`` pairs as the dotted overrides ``Agent.from_recipe`` takes (values read as TOML)."""
    import tomllib

    return {key: tomllib.loads(f"v = {value}")["v"] for key, _, value in (pair.partition("=") for pair in pairs)}


def eager_iteration(warmup: int) -> tuple[int, int, int, float]:
    """The eager floor's (aten ops, aten ops from Python, Python calls, thread CPU ms) per iteration."""
    import importlib.util

    path = REPO_ROOT / "benchmarks" / "peers" / "eager_ppo_cartpole.py"
    spec = importlib.util.spec_from_file_location("eager_ppo_cartpole", path)
    assert spec is not None and spec.loader is not None
    eager = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(eager)
    frames = eager.NUM_ENVS * eager.STEPS

    def training(batches: int):
        return lambda: eager.train(0, frames * batches)

    for _ in range(warmup):
        training(1)()
    few, many = training(2), training(6)
    every = (aten_counts(many)[0] - aten_counts(few)[0]) // 4
    top = (aten_counts(many)[1] - aten_counts(few)[1]) // 4
    calls = (python_calls(many) - python_calls(few)) // 4
    ms = (thread_ms(many, 3) - thread_ms(few, 3)) / 4
    return every, top, calls, ms


def bare_networks_ms(seeds: int, repeats: int, epochs: int = 20, batch: int = 256) -> float:
    """Thread CPU ms of what no implementation can skip: ``epochs`` forward and backward passes of ``seeds``
    stacked 4-64-64-2 and 4-64-64-1 tanh MLPs on ``batch`` rows (one ``baddbmm`` a layer), in plain torch, with
    no loss, optimiser or env: the canonical update's network arithmetic for that many seeds."""
    torch.manual_seed(0)
    observations = torch.randn(seeds, batch, 4)
    networks = [[(torch.randn(seeds, 1, size, requires_grad=True), torch.randn(seeds, fan_in, size, requires_grad=True))
                 for fan_in, size in ((4, 64), (64, 64), (64, out))] for out in (2, 1)]

    def update() -> None:
        for _ in range(epochs):
            total = torch.zeros(())
            for layers in networks:
                hidden = observations
                for index, (bias, weight) in enumerate(layers):
                    hidden = torch.baddbmm(bias, hidden, weight)
                    hidden = torch.tanh(hidden) if index < len(layers) - 1 else hidden
                total = total + hidden.sum()
            total.backward()

    update()
    return thread_ms(update, repeats)


def batched_rows(args, tmp: Path, one_seed_ms: float) -> None:
    """The update of ``args.seeds`` seeds together: thread CPU ms, the ms of its arithmetic alone (the floor), and
    both over one seed's whole iteration (``one_seed_ms``: its collection and update)."""
    agents = [rlplug.Agent.from_recipe(RECIPE, out=tmp / f"seed-{seed}", loggers=[],
                                       **{"eval.every_frames": 0, "run.seed": seed, **overrides(args.sets)})
              for seed in range(args.seeds)]
    algorithms = [agent.run.algorithm for agent in agents]
    together = algorithms[0].batched_update(algorithms, list(range(args.seeds)))
    batches = [agent.run.collector.collect() for agent in agents]

    def update() -> None:
        together.update([batch.clone() for batch in batches])

    for _ in range(args.warmup):
        update()
    ms = thread_ms(update, max(3, args.repeats // 4))
    floor = ms * arithmetic_share(update)
    print(f"\n{args.seeds} seeds together, one update: {ms:.2f} thread CPU ms, of which matrix products and tanh "
          f"{floor:.2f} ms")
    print(f"one seed's whole iteration (collection and update): {one_seed_ms:.2f} ms; the {args.seeds} seeds' update "
          f"is {ms / one_seed_ms:.2f}x it, their arithmetic alone {floor / one_seed_ms:.2f}x")
    bare = bare_networks_ms(args.seeds, max(3, args.repeats // 4))
    print(f"plain torch, the {args.seeds} seeds' networks alone (20 stacked forward and backward passes, no loss, "
          f"optimiser or env): {bare:.2f} ms, {bare / one_seed_ms:.2f}x one seed's whole iteration")
    for agent in agents:
        agent.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=3, help="iterations before counting")
    parser.add_argument("--repeats", type=int, default=20, help="iterations timed for the thread CPU ms")
    parser.add_argument("--no-eager", action="store_true", help="count rlplug alone")
    parser.add_argument("--seeds", type=int, default=0, metavar="N",
                        help="also time the update of N seeds trained together (--batched) and its arithmetic")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe override, as rlplug run --set")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rlplug-cost-") as tmp:
        agent = rlplug.Agent.from_recipe(RECIPE, out=Path(tmp) / "run", loggers=[],
                                         **{"eval.every_frames": 0, **overrides(args.sets)})
        run = agent.run
        collect, update = run.collector.collect, run.algorithm.update
        for _ in range(args.warmup):
            update(collect())
        batch = collect()
        # update() writes its estimates into the batch it is given: each measurement gets its own copy
        rows = [("collect (32 steps of 8 envs)", collect),
                ("update (all epochs of one batch)", lambda: update(batch.clone()))]
        print(f"{'':38s}{'aten ops':>10s}{'from Python':>13s}{'Python calls':>14s}{'thread CPU ms':>15s}")
        for name, work in rows:
            every, top = aten_counts(work)
            calls = python_calls(work)
            ms = thread_ms(work, args.repeats)
            print(f"{name:38s}{every:10d}{top:13d}{calls:14d}{ms:15.2f}")
        if args.seeds:
            whole = thread_ms(lambda: update(collect()), args.repeats)
            batched_rows(args, Path(tmp), whole)
        agent.close()
    if not args.no_eager:
        every, top, calls, ms = eager_iteration(args.warmup)
        print(f"{'eager floor, one whole iteration':38s}{every:10d}{top:13d}{calls:14d}{ms:15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
