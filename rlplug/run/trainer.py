"""The training loop: build a validated recipe, collect, update, evaluate, log, save.

Everything that can fail because of the user's input is checked before the run directory exists, so a
bad recipe leaves nothing behind; once training starts, whatever happens, the loggers are closed and
``summary.json`` says how the run ended."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w
import torch

from rlplug.core.env_members import as_evaluation_env, close_env, env_statistics
from rlplug.core.envs import build_env
from rlplug.core.heads import action_bounds
from rlplug.core.process import prepare_process, quiet_torchrl, seed_everything
from rlplug.core.training import (
    NonFiniteError,
    all_finite,
    broken_metric,
    compile_update,
    end_updates_when,
    stop_updates,
    storages_of,
)
from rlplug.errors import UserError, reported
from rlplug.recipe import EVAL_SEED_OFFSET, Recipe, read_toml, validate
from rlplug.registry import protocols
from rlplug.registry.protocols import capability, checked_metrics, conform
from rlplug.run import changes, schedule
from rlplug.run.callbacks import Callbacks
from rlplug.run.checkpoints import check_statistics, load_checkpoint, rng_state, sealed, set_rng_state, tensors_finite
from rlplug.run.directory import Claim, ensure_writable, own_folder, write_atomically
from rlplug.run.evaluation import build_eval_env, check_eval_env, evaluate
from rlplug.run.resuming import resumed_recipe
from rlplug.run.schedule import TrainingDiverged, episode_seed

quiet_torchrl()


@dataclass
class Run:
    """A recipe built and ready to train into ``run_dir``; :meth:`train` may be called several times."""

    recipe: Recipe
    run_dir: Path
    #: the training envs (a TorchRL ``EnvBase`` or a plugin's env following the protocol)
    env: protocols.Env
    eval_env: protocols.Env
    algorithm: protocols.Algorithm
    #: what the recipe's runner gives: collect(), tracker, restart(seed), sync_weights(), shutdown()
    collector: protocols.Collector
    frames: int = 0
    iterations: int = 0
    train_seconds: float = 0.0
    eval_returns: list[float] = field(default_factory=list)
    stop_reason: str | None = None
    video_env: protocols.Env | None = None
    #: this run's hold on ``run_dir``, given up by :meth:`close` or when the run is dropped
    claim: Claim | None = field(default=None, repr=False)
    #: the recipe keys a resume changed (``--set``), for the user to see
    changed: list[str] = field(default_factory=list)
    #: the loggers of the training under way (:meth:`train`), and whether they all started
    loggers: list[protocols.Logger] = field(default_factory=list, repr=False)
    loggers_started: bool = field(default=False, repr=False)
    #: the recipe's ``[[callbacks]]``, built, and values logged for the loggers to come (``Agent.log``)
    callbacks: Callbacks = field(default_factory=Callbacks, repr=False)
    _parameter_storages: list | None = field(default=None, repr=False)
    #: the algorithm's parameters changed since the last iteration, for its metrics row (:mod:`rlplug.run.changes`)
    parameter_rows: dict[str, float] = field(default_factory=dict, repr=False)
    #: the resolved recipe recipe.toml was last seen or written to hold
    _recipe_on_disk: dict | None = field(default=None, repr=False)
    #: whether :attr:`eval_env` is the caller's (``Agent.train(eval_env=...)``), left open by :meth:`close`
    eval_env_borrowed: bool = field(default=False, repr=False)
    #: the checkpoint this run started from (``--init-from``), kept in its summary and checkpoints
    init_from: dict[str, Any] | None = None
    #: when the training under way started (``time.perf_counter()``): its seconds so far count in checkpoints
    training_since: float | None = field(default=None, repr=False)

    @classmethod
    def build(cls, recipe: Recipe, run_dir: Path, *, resuming: bool = False) -> Run:
        """The recipe built into ``run_dir``, claimed for this run first (:class:`Claim`: a second run on it is
        refused); a new run that fails to build leaves no directory behind."""
        ensure_writable(run_dir)
        claim = Claim(run_dir, new=not resuming)
        try:
            return cls._build(recipe, run_dir, claim)
        except BaseException:
            claim.release(abandon=True)
            raise

    @classmethod
    def _build(cls, recipe: Recipe, run_dir: Path, claim: Claim) -> Run:
        settings = recipe.run
        prepare_process(settings.num_threads)
        seed_everything(settings.seed)
        with contextlib.ExitStack() as opened:  # envs with worker processes are closed if a later part fails
            env = build_env(recipe.env, device=settings.device)
            opened.callback(close_env, env)
            eval_env = build_eval_env(recipe)
            opened.callback(close_env, eval_env)
            if recipe.eval.env is not None:
                check_eval_env(env, eval_env, "eval.env")
            transitions = None
            if recipe.dataset is not None:  # offline: the dataset is all it learns from (rlplug.run.offline)
                from rlplug.run.offline import offline_collector, read_dataset

                transitions = read_dataset(recipe, env)
            algorithm = recipe.algorithm.build(
                observation_spec=env.observation_spec, action_spec=env.action_spec, device=settings.device,
                seed=settings.seed, total_frames=settings.total_frames, run_dir=run_dir,
                eval_episodes=recipe.eval.episodes, eval_every_frames=recipe.eval.every_frames,
            )
            if settings.compile:
                compile_update(algorithm, recipe.algorithm.title)
            runner = recipe.runner.build(device=settings.device, seed=settings.seed)
            callbacks = Callbacks.built(recipe, run_dir)
            video_env = None
            if recipe.eval.video:  # opened now: an env that cannot render is a clear error before any training
                from rlplug.run.video import open_video_env

                video_env = open_video_env(recipe, {})
                opened.callback(close_env, video_env)
            if transitions is not None:
                collector = conform(protocols.Collector, offline_collector(recipe, algorithm, transitions),
                                    "the offline collector")
            else:
                # Last, as it may start workers elsewhere (the ray runner): every other check has passed by now.
                collector = conform(protocols.Collector, runner.collector(env, algorithm.policy,
                    algorithm.frames_per_batch, seed=settings.seed, recipe=recipe, algorithm=algorithm),
                    f"{recipe.runner.title}'s collector()")
            opened.pop_all()
        return cls(recipe, run_dir, env, eval_env, algorithm, collector, video_env=video_env, claim=claim,
                   callbacks=callbacks)

    def train(self, max_frames: int | None = None, max_episodes: int | None = None, max_iters: int | None = None,
              eval_every: int | None = None, callbacks: Sequence[Any] = ()) -> dict[str, Any]:
        """Train to the recipe's ``total_frames``, or until the first limit given (counted from this call), on the
        one schedule of every run (:func:`rlplug.run.schedule.train`: evaluations every ``eval_every`` frames,
        default the recipe's ``eval.every_frames``, checkpoints, stop requests, lost workers). ``summary.json`` is
        written however the call ends once its loggers have started (a refused resume leaves the directory as it
        was); returns the summary. ``callbacks`` (built ones) are told of this training, after the recipe's."""
        tracker = self.collector.tracker
        stop_episodes = tracker.episodes + max_episodes if max_episodes else None
        return schedule.train(self, max_frames=max_frames, max_iters=max_iters, eval_every=eval_every,
                              more=lambda: stop_episodes is None or tracker.episodes < stop_episodes,
                              callbacks=self.callbacks.start(self, callbacks))

    def prepare(self) -> None:
        ensure_writable(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.write_recipe()
        self.loggers, self.loggers_started = [], False
        self.training_since = time.perf_counter()

    def start_loggers(self) -> None:
        settings = self.recipe.run
        for logger in self.recipe.loggers:  # one at a time: one that fails to start still gets the others closed
            self.loggers.append(logger.build(run_dir=self.run_dir, total_frames=settings.total_frames,
                                             frames=self.frames, networks=self.networks(),
                                             log_every_frames=settings.log_every_frames))
        self.loggers_started = True  # before then (a resume's metrics.csv refused), summary.json stays as it was

    def iterate(self, started: float, frames_before: int) -> dict[str, float]:
        tracker = self.collector.tracker
        batch = self.collector.collect()
        previous, self.frames = self.frames, self.frames + batch.numel()
        self.iterations += 1
        metrics = self.guarded_update(batch)
        self.collector.sync_weights()
        if not schedule.log_due(previous, self.frames, self.recipe.run.log_every_frames):
            return metrics  # callbacks hear of every update; the loggers only at their cadence
        recent = tracker.recent_return()
        runner_metrics = capability(self.collector, protocols.Collector.metrics)
        metrics = {"fps": (self.frames - frames_before) / (time.perf_counter() - started),
                   "episodes": tracker.episodes, **({"episode_return": recent} if recent is not None else {}),
                   **(runner_metrics() if runner_metrics else {}), **metrics}
        for logger in self.loggers:
            logger.log(metrics, self.frames)
        return metrics

    def evaluation(self) -> list[float]:
        return self.evaluate(self.loggers)

    def restart(self) -> None:
        self.collector.restart(seed=episode_seed(self.recipe.run.seed, self.frames))

    def end(self, outcome: dict[str, Any], failing: bool, seconds: float) -> None:
        self.train_seconds += seconds
        self.training_since = None
        with reported(True, "the runner did not shut down cleanly"):
            # workers elsewhere stop whatever way training ends (a later train() starts them again)
            self.collector.shutdown()
        outcome.update(self.summary())
        with reported(failing, "summary.json was not written"):  # on a full disk, say
            if self.loggers_started:
                write_atomically(self.run_dir / "summary.json", (json.dumps(outcome, indent=2) + "\n").encode())
        for logger in self.loggers:
            with reported(failing, "a logger did not close cleanly"):
                logger.close(outcome)

    def write_recipe(self, *, checkpointed: bool = False) -> None:
        """``recipe.toml``: the recipe of the latest checkpoint, or of a run yet to write one. Written when it is
        missing, and on a checkpoint where the recipe changed (``resume --set``) and the file says otherwise; a
        file that says the same (the user's, comments and all) is left as it is. A new run whose recipe cannot
        be written (a full disk) gives its directory up, so the same ``--out`` works once space is back."""
        path = self.run_dir / "recipe.toml"
        resolved = self.recipe.resolved()
        if path.is_file() and (not checkpointed or self._recipe_on_disk == resolved):
            return
        if path.is_file():
            try:
                self._recipe_on_disk = validate(read_toml(path), file=str(path)).resolved()
            except UserError:  # no longer a recipe: replaced by the run's
                self._recipe_on_disk = None
            if self._recipe_on_disk == resolved:
                return
        try:
            write_atomically(path, tomli_w.dumps(resolved).encode())
        except OSError:
            if self.frames == 0 and self.claim is not None and self.claim.new:
                self.close(abandon=True)
            raise
        self._recipe_on_disk = resolved

    @classmethod
    def resume(cls, run_dir: Path, overrides: Sequence[str] = (), *, allow_unverified: bool = False) -> Run:
        """The run in ``run_dir``, built from its checkpoint's recipe and state, ready to train on; ``overrides``
        (``--set``) change what trained weights allow (:mod:`rlplug.run.resuming`), and :attr:`changed` names the
        keys they changed. A run killed before its first checkpoint starts over from frame 0 with its recipe.
        Either way, the parameter changes ``parameters.jsonl`` records after the checkpoint are made again
        (:func:`rlplug.run.changes.made_again`)."""
        checkpoint, recipe_file = run_dir / "checkpoint.pt", run_dir / "recipe.toml"
        if checkpoint.exists():
            resumed, state = cls.from_checkpoint(checkpoint, run_dir, overrides=overrides, resuming=True,
                                                 allow_unverified=allow_unverified)
            resumed.make_recorded_changes(state.get("parameter_records"), state["frames"])
            return resumed
        if not recipe_file.is_file():
            what = "no run directory" if not run_dir.is_dir() else "neither checkpoint.pt nor recipe.toml in it"
            raise UserError(f"{run_dir}: {what}; resume takes the directory of a run that started training (one "
                            f"that wrote nothing can be started again with rlplug run RECIPE --out {run_dir})")
        recipe, changed = resumed_recipe(read_toml(recipe_file), list(overrides), source=str(recipe_file),
                                         directory_recipe=None)
        run = cls.build(recipe, run_dir, resuming=True)
        run.changed = changed
        run.make_recorded_changes(0, 0)
        return run

    def make_recorded_changes(self, held: int | None, frame: int) -> None:
        """The changes recorded beyond the ``held`` first made again; one the algorithm cannot take closes the run."""
        try:
            changes.made_again(self, held, frame)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_checkpoint(cls, path: Path, run_dir: Path, *, changes: dict[str, Any] | None = None,
                        overrides: Sequence[str] = (), resuming: bool = False,
                        allow_unverified: bool = False) -> tuple[Run, dict[str, Any]]:
        """The run a checkpoint holds, built from the checkpoint's own recipe into ``run_dir`` and loaded with its
        state (the one way a run is rebuilt: ``rlplug resume``, ``rlplug eval`` and :meth:`rlplug.Agent.load`);
        ``changes`` replace top-level recipe tables' keys first (``{"eval": {"episodes": 5}}``); ``resuming``: in
        its own directory, with ``overrides`` and the directory's recipe.toml checked (:func:`resumed_recipe`).

        Returns ``(run, state)``. A file that loads as tensors but does not fit its own recipe (tampered, or
        truncated by hand), or holds non-finite parameters, is refused with one line, never half-used.
        """
        state = load_checkpoint(path, allow_unverified=allow_unverified)
        data = copy.deepcopy(state["recipe"])
        for table, values in (changes or {}).items():
            current = data.get(table, {})
            if not isinstance(current, dict):
                raise UserError(f"{path}: not a usable rlplug checkpoint (its recipe's {table} is not a table)")
            data[table] = {**current, **values} if "use" not in values else dict(values)
        changed: list[str] = []
        if resuming:
            recipe, changed = resumed_recipe(data, list(overrides), source=str(path),
                                             directory_recipe=run_dir / "recipe.toml")
        else:
            recipe = validate(data, file=str(path))
        run = cls.build(recipe, run_dir, resuming=resuming)
        run.changed = changed
        try:
            check_statistics(state["env"], run.env_statistics())
            run.load_state_dict(state)  # its numbers were all found finite when it was read (load_checkpoint)
        except UserError as error:
            run.close(abandon=True)
            raise UserError(f"{path}: {error}") from error
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as error:
            run.close(abandon=True)
            detail = " ".join(f"{type(error).__name__}: {error}".split())[:200]
            raise UserError(f"{path}: not a usable rlplug checkpoint, its contents do not fit its recipe "
                            f"({detail})") from error
        return run, state

    def close(self, *, abandon: bool = False) -> None:
        """Stop the runner's workers, close the envs (worker processes too) and give up the run directory (a run
        that will not train on); ``abandon``: a new run's directory is removed again (:meth:`Claim.release`)."""
        try:
            self.collector.shutdown()
        finally:
            for env in (self.env, None if self.eval_env_borrowed else self.eval_env, self.video_env):
                close_env(env)
            if self.claim is not None:  # a Run made by hand holds no claim
                self.claim.release(abandon=abandon)

    def use_eval_env(self, env: protocols.Env, *, borrowed: bool) -> None:
        """Evaluate on ``env`` from now on (the one before closed, if this run built it)."""
        if not self.eval_env_borrowed:
            close_env(self.eval_env)
        self.eval_env, self.eval_env_borrowed = env, borrowed

    def env_statistics(self) -> dict[str, Any]:
        """The training envs' statistics: the collector's where its envs live elsewhere (ray workers)."""
        statistics = capability(self.collector, protocols.Collector.statistics)
        return statistics() if statistics else env_statistics(self.env)

    def networks(self) -> dict[str, torch.nn.Module]:
        """The algorithm's networks by name, for loggers that record weights."""
        networks = capability(self.algorithm, protocols.Algorithm.networks)
        return networks() if networks else {"policy": self.algorithm.policy}

    def request_stop(self, reason: str) -> None:
        """Stop after the current gradient step, with a checkpoint (safe to call from a signal handler)."""
        self.stop_reason = reason
        stop_updates()

    def parameter_storages(self) -> list[torch.Tensor]:
        """What the NaN check reads: the algorithm's parameters by storage (see :func:`storages_of`), found
        once (loading a checkpoint copies into the same tensors)."""
        if self._parameter_storages is None:
            parameters = (capability(self.algorithm, protocols.Algorithm.parameters)
                          or self.algorithm.policy.parameters())
            self._parameter_storages = storages_of(list(parameters))
        return self._parameter_storages

    def guarded_update(self, batch) -> dict[str, float]:
        """The algorithm's update, stopped with a clear error when a loss, gradient or parameter turns
        non-finite; the last checkpoint on disk is the last good one."""
        reward = schedule.reward_problem(batch, self.recipe)
        if reward is not None:
            raise TrainingDiverged(self.divergence(reward, "the env gave it, not the update: check the env's reward "
                                                           "(the learning rate is not the cause)"))
        try:
            # a runner may do the update itself (gradient workers: theirs averaged, then applied here)
            update = capability(self.collector, protocols.Collector.update)
            end_updates_when(changes.RequestWatch(self.run_dir))  # an rlplug set request ends it between steps
            try:
                metrics = update(self.algorithm, batch) if update else self.algorithm.update(batch)
            finally:
                end_updates_when(None)
            metrics = checked_metrics(metrics, self.recipe.algorithm.title)
            broken = broken_metric(metrics)
            if broken is None and not all_finite(self.parameter_storages()):
                broken = "a network parameter"
        except NonFiniteError as error:
            broken = error.quantity
        if broken is None:
            return metrics
        raise TrainingDiverged(self.divergence(broken))

    def divergence(self, broken: str, advice: str = "try a lower algorithm.lr or set algorithm.max_grad_norm") -> str:
        """The line saying that ``broken`` (a quantity) turned non-finite now, what is kept and what to do."""
        latest = self.run_dir / "checkpoint.pt"
        kept = f"the last good checkpoint is {latest}" if latest.exists() else "no checkpoint was written yet"
        return (f"training diverged: {broken} is not finite at iteration {self.iterations} (frame {self.frames}); "
                f"{kept}; {advice}")

    def checkpoint(self) -> Path:
        """Write ``checkpoint.pt`` (the latest) and ``checkpoints/frames-N.pt`` (the last K), atomically."""
        data = self.checkpoint_bytes()
        kept = own_folder(self.run_dir / "checkpoints")  # never a link: the run prunes what is in it
        write_atomically(kept / f"frames-{self.frames:012d}.pt", data)
        ours = [path for path in sorted(kept.glob("frames-*.pt")) if not path.is_symlink()]
        for old in ours[:-self.recipe.run.keep_checkpoints]:
            old.unlink()
        latest = self.run_dir / "checkpoint.pt"
        write_atomically(latest, data)
        self.write_recipe(checkpointed=True)
        return latest

    def checkpoint_bytes(self) -> bytes:
        """The checkpoint file's contents; refused while anything it would hold is NaN or infinite, so that every
        checkpoint on disk is one training can go on from."""
        state = self.state_dict()
        if not self.finite(state):
            raise TrainingDiverged(f"no checkpoint written at frame {self.frames}: the network parameters, optimiser "
                                   f"state or normalisation statistics are not all finite (NaN or infinity)")
        data = io.BytesIO()
        torch.save(state, data)
        return data.getvalue()

    def finite(self, state: dict[str, Any]) -> bool:
        """Whether the networks' parameters and all ``state`` (this run's: optimiser, env statistics) are finite."""
        return all_finite(self.parameter_storages()) and tensors_finite(state)

    def summary(self) -> dict[str, Any]:
        returns = self.eval_returns
        return {
            "frames": self.frames, "episodes": self.collector.tracker.episodes, "iterations": self.iterations,
            "eval_return_mean": float(np.mean(returns)) if returns else None,
            "eval_return_std": float(np.std(returns)) if returns else None,
            "train_return_recent": self.collector.tracker.recent_return(),
            "wall_time_s": round(self.train_seconds, 3), "seed": self.recipe.run.seed, "run_dir": str(self.run_dir),
            **({"init_from": self.init_from} if self.init_from else {}),
        }

    def evaluate(self, loggers: Sequence[Any] = ()) -> list[float]:
        """The deterministic policy on the eval env, with the train env's statistics (frozen), if it has any."""
        statistics = self.env_statistics()
        as_evaluation_env(self.eval_env, statistics)
        self.eval_returns = evaluate(self.eval_env, self.algorithm.policy, self.recipe.eval.episodes,
                                     seed=self.recipe.run.seed + EVAL_SEED_OFFSET)
        for logger in loggers:
            logger.log({"eval_return_mean": float(np.mean(self.eval_returns)),
                        "eval_return_std": float(np.std(self.eval_returns))}, self.frames)
        if self.video_env is not None:
            self.film_evaluation(loggers, statistics)
        return self.eval_returns

    def film_evaluation(self, loggers: Sequence[Any], statistics: dict[str, Any]) -> Path:
        """One deterministic episode, filmed, from the evaluation's first start state; handed to loggers."""
        from rlplug.run.video import env_name, record_video

        as_evaluation_env(self.video_env, statistics)
        path = self.run_dir / "videos" / f"frames-{self.frames:012d}.mp4"
        record_video(self.video_env, self.algorithm.policy, path, env_id=env_name(self.recipe), episodes=1,
                     seed=self.recipe.run.seed + EVAL_SEED_OFFSET)
        for logger in loggers:
            log_video = capability(logger, protocols.Logger.log_video)
            if log_video:
                log_video(path, self.frames)
        return path

    def parameter_changes(self) -> dict[str, Any]:
        """The algorithm's changes since it was built (``rlplug set``), for the checkpoint; none where it takes none."""
        made = capability(self.algorithm, protocols.Algorithm.parameter_changes)
        return dict(made()) if made is not None else {}

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint holds: plain tensors and numbers, loadable with ``weights_only=True``, and
        their digest."""
        fetch = capability(self.collector, protocols.Collector.before_checkpoint)
        if fetch:
            fetch(self.algorithm)
        return sealed({"recipe": self.recipe.resolved(), "algorithm": self.algorithm.state_dict(),
                       "parameters": self.parameter_changes(),
                       "parameter_records": changes.recorded(self.run_dir),  # the lines of parameters.jsonl held
                       "env": self.env_statistics(),
                       **self.action_bounds_entry(),
                       "frames": self.frames, "iterations": self.iterations,
                       "episodes": self.collector.tracker.episodes, "train_seconds": self.seconds_so_far(),
                       # the recent return goes on where a resume starts (summary.json's train_return_recent)
                       "recent_returns": [float(r) for r in getattr(self.collector.tracker, "recent", ())],
                       "rng": rng_state(), "saved_at": datetime.now(UTC).isoformat(),
                       **({"init_from": self.init_from} if self.init_from else {})})

    def action_bounds_entry(self) -> dict[str, Any]:
        """The env's continuous action bounds as a checkpoint keeps them (``action_bounds``: low, high), so that a
        run started from it (``--init-from``) can refuse an env acting in another range; none for discrete or
        unbounded actions."""
        bounds = action_bounds(self.env.observation_spec, self.env.action_spec)
        return {} if bounds is None else {"action_bounds": {"low": bounds[0].cpu(), "high": bounds[1].cpu()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint: the same parameters, optimiser, statistics, counters and random
        states, and every env starting a new episode from the seed that the uninterrupted run used there."""
        for name, value in state.get("parameters", {}).items():  # changed during the run (rlplug set)
            changes.update_parameter(self.algorithm, name, value)
        self.algorithm.load_state_dict(state["algorithm"])
        self.collector.sync_weights()  # workers elsewhere act with the loaded weights from their next rollout
        if state.get("env"):
            self.load_env_statistics(state["env"])
        self.init_from = state.get("init_from")
        self.frames, self.iterations = state["frames"], state["iterations"]
        self.collector.tracker.episodes = state["episodes"]
        recent = getattr(self.collector.tracker, "recent", None)
        if recent is not None:
            recent.clear()
            recent.extend(state.get("recent_returns", ()))
        self.train_seconds = state.get("train_seconds", 0.0)
        set_rng_state(state["rng"])
        self.collector.restart(seed=episode_seed(self.recipe.run.seed, self.frames))

    def load_env_statistics(self, statistics: dict[str, Any]) -> None:
        """The training envs' statistics, the collector's too where its envs live elsewhere."""
        self.env.load_statistics(statistics)
        load = capability(self.collector, protocols.Collector.load_statistics)
        if load:
            load(statistics)

    def seconds_so_far(self) -> float:
        """Seconds trained, the training under way's included (a resume goes on counting from a checkpoint)."""
        return self.train_seconds + (time.perf_counter() - self.training_since if self.training_since else 0.0)

    def save_checkpoint(self, path: Path) -> None:
        write_atomically(path, self.checkpoint_bytes())
