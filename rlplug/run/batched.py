"""Seeds trained together: ``rlplug run RECIPE --seeds 0-7 --batched`` and ``Agent.from_recipe(..., seeds=...,
batched=True)``.

Each seed is a :class:`SeedRun`, a :class:`~rlplug.run.trainer.Run` of its own recipe (``run.seed`` set), built
as a run of that seed alone builds it (networks initialised from its seed, envs seeded from it) in its own
``seed-N/`` directory, whose checkpoints ``rlplug eval``, ``rlplug resume`` and ``Agent.load`` read like any
run's. :class:`BatchedRun` drives them on the schedule of every run (:func:`rlplug.run.schedule.train`): one
collection for all (:class:`CollectorsTogether`), one update for all (the algorithm's ``batched_update``), then,
per seed, what a run alone does: metrics to its loggers, evaluations, checkpoints, ``summary.json``. A seed
whose loss, gradient norm or parameters turn non-finite stops alone (status ``diverged``, its last good
checkpoint kept) and the others go on. ``batched.json`` in the parent directory (the seeds, and what the command
line asked) marks it for ``rlplug resume``.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlplug.core.acting import policy_stages
from rlplug.core.collect import Collector, array_road_open
from rlplug.core.collect_together import CollectorsTogether
from rlplug.core.recurrent import is_recurrent
from rlplug.core.stacked import RETRY
from rlplug.core.training import broken_metric, stop_updates
from rlplug.errors import UserError, reported
from rlplug.recipe import Recipe
from rlplug.registry import protocols
from rlplug.registry.protocols import capability, checked_metrics, conform
from rlplug.run import schedule
from rlplug.run.directory import BATCHED_MARKER as MARKER
from rlplug.run.directory import ensure_writable, write_atomically
from rlplug.run.schedule import episode_seed
from rlplug.run.trainer import Run

#: The logger written once for all seeds (in the parent directory, with the means over seeds), not per seed.
SHARED_LOGGERS = ("rlplug:console",)


class SeedRun(Run):
    """One seed's run in a batched run. Its parameters are views of the stack of every seed's, so what is
    checked for NaN and what its checkpoints hold are its own values, copied out of the stack."""

    def parameter_storages(self) -> list[torch.Tensor]:
        parameters = capability(self.algorithm, protocols.Algorithm.parameters) or self.algorithm.policy.parameters()
        return [p.detach() for p in parameters]

    def state_dict(self) -> dict[str, Any]:
        return copied(super().state_dict())


def seed_run(run: Run) -> SeedRun:
    """What ``SeedRun.build`` and ``SeedRun.resume`` return (``Run``'s class methods build ``cls``), as a SeedRun."""
    if not isinstance(run, SeedRun):
        raise TypeError(f"expected a SeedRun, got a {type(run).__name__}")
    return run


def copied(state: Any) -> Any:
    """``state`` with its tensors moved out of the stack: ``torch.save`` of a view writes its whole storage
    (every seed's). Tensors sharing a storage (a flat parameter's views) share one compact copy, the span of
    that storage they use, so a seed's checkpoint is the size of a run's alone."""
    spans: dict[tuple, tuple[int, int]] = {}
    copies: dict[tuple, torch.Tensor] = {}

    def key(tensor: torch.Tensor) -> tuple:
        return tensor.untyped_storage().data_ptr(), tensor.dtype

    def measure(tensor: torch.Tensor) -> None:
        offset = int(tensor.storage_offset())
        last = offset + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
        low, high = spans.get(key(tensor), (offset, last + 1))
        spans[key(tensor)] = (min(low, offset), max(high, last + 1))

    def rebuild(tensor: torch.Tensor) -> torch.Tensor:
        low, high = spans[key(tensor)]
        if key(tensor) not in copies:
            span = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
            copies[key(tensor)] = span.set_(tensor.untyped_storage(), low, (high - low,), (1,)).clone()
        return copies[key(tensor)].as_strided(tensor.shape, tensor.stride(), tensor.storage_offset() - low)

    def walk(value: Any, action) -> Any:
        if isinstance(value, torch.Tensor):
            return action(value.detach()) if value.numel() else value.clone()
        if isinstance(value, dict):  # state dicts' OrderedDicts stay so (the digest names each type)
            result = copy.copy(value)
            for name, item in value.items():
                result[name] = walk(item, action)
            return result
        if isinstance(value, (list, tuple)):
            return type(value)(walk(item, action) for item in value)
        return value

    walk(state, measure)
    return walk(state, rebuild)


def refuse_unbatchable_recipe(recipe: Recipe) -> None:
    """What can be told from the recipe alone, before anything is built."""
    if recipe.run.compile:
        raise UserError(f"--batched calls the seeds' losses under torch.vmap, which run.compile does not compile; "
                        f"set run.compile = false, or {RETRY}", path="run.compile")
    if recipe.callbacks:
        raise UserError(f"callbacks are told of one run's updates and evaluations, not of seeds trained together; "
                        f"{RETRY}", path="callbacks")
    runner = recipe.runner.spec.qualified_name
    if runner != "rlplug:local":
        raise UserError(f"--batched trains every seed in this process with one update for all; the "
                        f"'{recipe.runner.spec.name}' runner cannot: {RETRY}, or use the local runner",
                        path="runner.use")


def refuse_unbatchable_run(run: Run) -> None:
    """What the first seed's built run tells: recurrent networks, an algorithm or env that cannot be batched."""
    title = run.recipe.algorithm.title
    if run.recipe.dataset is not None:
        raise UserError(f"an offline run ([dataset]) collects nothing for the seeds to step together; {RETRY}",
                        path="dataset")
    if is_recurrent(run.algorithm.policy):
        raise UserError(f"recurrent networks carry a hidden state per env through collection, which --batched "
                        f"does not stack; {RETRY}", path="algorithm.policy")
    if getattr(getattr(run.algorithm, "config", None), "use_sde", False):
        raise UserError(f"gSDE's exploration matrices are held by each seed's acting actor between steps, which "
                        f"the stacked actor does not keep per seed; {RETRY}", path="algorithm.use_sde")
    if capability(run.algorithm, protocols.Algorithm.batched_update) is None:
        raise UserError(f"{title} does not declare batched_update, so its seeds cannot be trained together; "
                        f"{RETRY}", path="algorithm.use")
    collector = run.collector
    if isinstance(collector, Collector) and collector.array_actor is None \
            and array_road_open(collector.env, collector.policy):  # the env offers it, the policy has no actor
        lacking = [type(stage).__name__ for stage in policy_stages(collector.policy)[1:]
                   if capability(stage, protocols.Noise.act_on) is None]
        why = (f"{', '.join(lacking)} after its network has no act_on" if lacking else
               "its network is neither one TensorDictModule nor a ProbabilisticActor reading one observation")
        raise UserError(f"--batched acts for every seed with one array actor, and {title}'s policy here has no "
                        f"array actor ({why}); {RETRY}", path="algorithm")
    if not CollectorsTogether.can_take(collector):
        raise UserError(f"--batched steps the seeds' envs on the array road, which this env does not offer (a "
                        f"TorchRL env, or env.transforms); {RETRY}", path="env")


@dataclass
class BatchedRun:
    """Every seed's :class:`SeedRun` (``runs``) and what they share; :meth:`train` may be called several times."""

    runs: list[SeedRun]
    out: Path
    together: protocols.BatchedUpdate
    collector: CollectorsTogether
    #: the runs still training (a diverged one leaves)
    active: list[SeedRun] = field(default_factory=list)
    stop_reason: str | None = None
    #: seed -> the line saying why it stopped
    diverged: dict[int, str] = field(default_factory=dict)
    #: the training under way: the seeds it started with, their loggers (by ``id``) and those shared by all
    training: list[SeedRun] = field(default_factory=list)
    loggers: dict[int, list[protocols.Logger]] = field(default_factory=dict)
    shared: list[protocols.Logger] = field(default_factory=list)
    #: the return the seeds' aggregate measures its optimality gap to (None: the env's reward threshold)
    gap_threshold: float | None = None

    @property
    def run_dir(self) -> Path:
        return self.out

    @property
    def recipe(self) -> Recipe:
        """The first seed's recipe: every seed's but for ``run.seed``."""
        return self.runs[0].recipe

    @property
    def frames(self) -> int:
        return max(run.frames for run in self.runs)

    @property
    def iterations(self) -> int:
        return max(run.iterations for run in self.active or self.runs)

    @property
    def seeds(self) -> list[int]:
        return [run.recipe.run.seed for run in self.runs]

    @classmethod
    def build(cls, recipes: list[Recipe], out: Path, note: dict[str, Any] | None = None) -> BatchedRun:
        """Every seed's run built into ``out/seed-N`` (each claimed; all given up again if one fails), then
        stacked; ``note`` (what the command line asked) is kept in ``batched.json`` for resume."""
        refuse_unbatchable_recipe(recipes[0])
        runs: list[SeedRun] = []
        try:
            for recipe in recipes:
                runs.append(seed_run(SeedRun.build(recipe, out / f"seed-{recipe.run.seed}")))
                if len(runs) == 1:  # what one seed shows holds for all: refused before the others are built
                    refuse_unbatchable_run(runs[0])
            batched = cls.start(runs, out)
            marker = {"seeds": [recipe.run.seed for recipe in recipes], **(note or {})}
            write_atomically(out / MARKER, (json.dumps(marker, indent=2) + "\n").encode())
            return batched
        except BaseException:
            for run in runs:
                run.close(abandon=True)
            raise

    @classmethod
    def resume(cls, out: Path, overrides: Sequence[str] = ()) -> tuple[BatchedRun | None, dict[str, Any]]:
        """The seeds of ``out`` rebuilt from their latest checkpoints (:meth:`Run.resume`), a diverged seed left
        stopped; returns it (None when every seed diverged) and ``batched.json``."""
        try:
            note = json.loads((out / MARKER).read_text())
            seeds = [int(seed) for seed in note["seeds"]]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UserError(f"{out / MARKER}: not the record of seeds trained together ({error})") from None
        runs: list[SeedRun] = []
        try:
            for seed in seeds:
                directory = out / f"seed-{seed}"
                if status_of(directory) == "diverged":
                    continue
                runs.append(seed_run(SeedRun.resume(directory, list(overrides))))
            if not runs:
                return None, note
            frames = sorted({run.frames for run in runs})
            if len(frames) > 1:
                raise UserError(f"{out}: the seeds' checkpoints are at different frames ({frames}), so they cannot "
                                f"go on together; resume each seed-N directory on its own")
            refuse_unbatchable_run(runs[0])
            return cls.start(runs, out), note
        except BaseException:
            for run in runs:
                run.close()
            raise

    @classmethod
    def start(cls, runs: list[SeedRun], out: Path) -> BatchedRun:
        first = runs[0]
        together = conform(protocols.BatchedUpdate, first.algorithm.batched_update(
            [run.algorithm for run in runs], [run.recipe.run.seed for run in runs]),
            f"{first.recipe.algorithm.title}'s batched_update()")
        # the envs start as each seed's own run starts them (a resumed run's were restarted by Run.resume)
        together.restart([restart_seed(run) if run.frames else run.recipe.run.seed for run in runs])
        return cls(runs, out, together, CollectorsTogether([own_collector(run) for run in runs], together.actor()),
                   active=list(runs))

    def restart(self) -> None:
        """Every active seed's envs and random stream start again from the seed its frame count gives (at a
        checkpoint, as ``Run.train``: a resumed run goes on as the uninterrupted one)."""
        for run in self.active:
            run.collector.restart(seed=restart_seed(run))
        self.together.restart([restart_seed(run) for run in self.active])

    def request_stop(self, reason: str) -> None:
        """Stop after the current gradient step, with a checkpoint of every seed (safe in a signal handler)."""
        self.stop_reason = reason
        stop_updates()

    def close(self) -> None:
        for run in self.runs:
            run.close()

    def train(self, max_frames: int | None = None, max_iters: int | None = None) -> dict[str, Any]:
        """Train every active seed to the recipe's ``total_frames`` or the first limit given, on the schedule of
        every run (:func:`rlplug.run.schedule.train`); returns ``status`` (of the whole) and each seed's summary."""
        if not self.active:
            return {"status": "diverged", "seeds": {}}
        outcome = schedule.train(self, max_frames=max_frames, max_iters=max_iters, more=lambda: bool(self.active))
        return {**outcome, "seeds": {run.recipe.run.seed: json.loads((run.run_dir / "summary.json").read_text())
                                     for run in self.training}}

    def prepare(self) -> None:
        self.training, self.loggers, self.shared = list(self.active), {}, []
        for run in self.training:
            ensure_writable(run.run_dir)
            run.write_recipe()

    def start_loggers(self) -> None:
        settings = self.recipe.run
        for run in self.training:
            self.loggers[id(run)] = [logger.build(run_dir=run.run_dir, total_frames=settings.total_frames,
                                                  frames=run.frames, networks=run.networks(),
                                                  log_every_frames=settings.log_every_frames)
                                     for logger in self.recipe.loggers
                                     if logger.spec.qualified_name not in SHARED_LOGGERS]
        self.shared = [logger.build(run_dir=self.out, total_frames=settings.total_frames, frames=self.frames,
                                    networks={}, log_every_frames=settings.log_every_frames)
                       for logger in self.recipe.loggers if logger.spec.qualified_name in SHARED_LOGGERS]

    def iterate(self, started: float, frames_before: int) -> None:
        """One collection and one update for every active seed; a seed whose numbers broke leaves."""
        batches = self.collector.collect()
        previous = self.active[0].frames
        for run, batch in zip(self.active, batches):
            run.frames += batch.numel()
            run.iterations += 1
        frames = self.active[0].frames
        due = schedule.log_due(previous, frames, self.recipe.run.log_every_frames)
        results = self.together.update(batches)
        finite = self.together.finite()
        fps = (frames - frames_before) / (time.perf_counter() - started)
        title = self.recipe.algorithm.title
        kept, logged = [], []
        for index, (run, metrics, fine) in enumerate(zip(self.active, results, finite)):
            metrics = checked_metrics(metrics, title)
            broken = broken_metric(metrics) or (None if fine else "a network parameter")
            if broken is not None:
                self.diverge(run, broken, self.loggers.pop(id(run)))
                continue
            kept.append(index)
            tracker = run.collector.tracker
            recent = tracker.recent_return()
            metrics = {"fps": fps, "episodes": tracker.episodes,
                       **({"episode_return": recent} if recent is not None else {}), **metrics}
            for logger in self.loggers[id(run)] if due else ():
                logger.log(metrics, frames)
            logged.append(metrics)
        if logged and due:
            means = {key: float(np.mean([m[key] for m in logged if key in m])) for key in logged[0]}
            for logger in self.shared:
                logger.log({**means, "fps": fps * len(logged)}, frames)
        if len(kept) < len(self.active):
            self.active = [self.active[i] for i in kept]
            self.together.keep(kept)
            if self.active:
                self.collector.keep(kept, self.together.actor())

    def end(self, outcome: dict[str, Any], failing: bool, seconds: float) -> None:
        for run in self.training:
            run.train_seconds += seconds
            if id(run) in self.loggers:  # not yet finished by a divergence
                finish(run, dict(outcome), self.loggers.pop(id(run)), failing)
        returns = [run.eval_returns for run in self.training]
        for logger in self.shared:
            with reported(failing, "a logger did not close cleanly"):
                logger.close({"status": outcome["status"], "seeds": len(self.training), "frames": self.frames,
                              "eval_return_mean": mean_of([float(np.mean(r)) for r in returns if r]),
                              "wall_time_s": round(seconds, 3), "run_dir": str(self.out)})

    def diverge(self, run: SeedRun, broken: str, loggers: list) -> None:
        """``run`` stops here: its summary says so, its loggers close, the last checkpoint on disk stays."""
        line = run.divergence(broken)
        self.diverged[run.recipe.run.seed] = line
        others = "; the other seeds go on" if len(self.active) > 1 else ""
        print(f"rlplug: seed {run.recipe.run.seed}: {line}{others}", file=sys.stderr, flush=True)
        finish(run, {"status": "diverged"}, loggers, failing=False)

    def evaluation(self) -> None:
        returns = [float(np.mean(run.evaluate(self.loggers[id(run)]))) for run in self.active]
        if returns:
            for logger in self.shared:
                logger.log({"eval_return_mean": float(np.mean(returns)), "eval_return_std": float(np.std(returns))},
                           self.active[0].frames)

    def checkpoint(self) -> None:
        """Every active seed's checkpoint, its optimiser state first brought up to date from the stack."""
        if self.active:
            self.together.sync()
        for run in self.active:
            run.checkpoint()


def finish(run: Run, summary: dict[str, Any], loggers: list, failing: bool) -> None:
    """``summary.json`` of ``run`` written and its loggers closed, as :meth:`Run.train` ends."""
    summary = {**summary, **run.summary()}
    with reported(failing, "summary.json was not written"):
        write_atomically(run.run_dir / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
    for logger in loggers:
        with reported(failing, "a logger did not close cleanly"):
            logger.close(summary)


def own_collector(run: Run) -> Collector:
    """The run's collector as rlplug's own, which stepping together takes (:func:`refuse_unbatchable_run` has
    refused any other before)."""
    if not isinstance(run.collector, Collector):
        raise TypeError(f"seeds trained together step rlplug's own collector, not a {type(run.collector).__name__}")
    return run.collector


def restart_seed(run: Run) -> int:
    return episode_seed(run.recipe.run.seed, run.frames)


def status_of(run_dir: Path) -> str | None:
    """The status its ``summary.json`` records, if any."""
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def mean_of(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None
