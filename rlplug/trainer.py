"""The training loop: build a validated recipe, collect, update, evaluate, log, save.

Everything that can fail because of the user's input is checked before the run directory exists, so a
bad recipe leaves nothing behind; once training starts, whatever happens, the loggers are closed and
``summary.json`` says how the run ended.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w
import torch
from torchrl.envs import EnvBase

from rlplug.collect import Collector, evaluate
from rlplug.errors import UserError
from rlplug.recipe import Recipe


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def default_run_dir(recipe_path: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{recipe_path.stem}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def check_run_dir(run_dir: Path) -> None:
    """A run never writes over another run's files."""
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise UserError(f"--out {run_dir}: the directory exists and is not empty; choose a new one")


@dataclass
class Run:
    """A recipe built and ready to train into ``run_dir``."""

    recipe: Recipe
    run_dir: Path
    env: EnvBase
    eval_env: EnvBase
    algorithm: Any
    collector: Collector

    @classmethod
    def build(cls, recipe: Recipe, run_dir: Path) -> "Run":
        check_run_dir(run_dir)
        settings = recipe.run
        torch.set_num_threads(settings.num_threads)
        seed_everything(settings.seed)
        torch.distributions.Distribution.set_default_validate_args(False)  # argument checks cost more than sampling
        env = recipe.env.build(device=settings.device)
        eval_env = build_eval_env(recipe)
        algorithm = recipe.algorithm.build(
            observation_spec=env.observation_spec, action_spec=env.action_spec, device=settings.device,
            seed=settings.seed, total_frames=settings.total_frames,
        )
        collector = Collector(env, algorithm.policy, algorithm.frames_per_batch, seed=settings.seed)
        return cls(recipe, run_dir, env, eval_env, algorithm, collector)

    def train(self) -> dict[str, Any]:
        recipe, settings = self.recipe, self.recipe.run
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "recipe.toml").write_text(tomli_w.dumps(recipe.resolved()))
        loggers = [logger.build(run_dir=self.run_dir, total_frames=settings.total_frames) for logger in recipe.loggers]
        started = time.perf_counter()
        frames, next_eval = 0, recipe.eval.every_frames or None
        summary: dict[str, Any] = {"status": "failed"}
        eval_returns: list[float] = []
        try:
            while frames < settings.total_frames:
                batch = self.collector.collect()
                frames += batch.numel()
                metrics = self.algorithm.update(batch)
                elapsed = time.perf_counter() - started
                recent = self.collector.tracker.recent_return()
                metrics = {"fps": frames / elapsed, "episodes": self.collector.tracker.episodes,
                           **({"episode_return": recent} if recent is not None else {}), **metrics}
                _log(loggers, metrics, frames)
                if next_eval is not None and frames >= next_eval and frames < settings.total_frames:
                    next_eval += recipe.eval.every_frames
                    eval_returns = self.evaluate(loggers, frames)
            eval_returns = self.evaluate(loggers, frames)
            self.save_checkpoint(frames)
            summary = {"status": "finished"}
        except KeyboardInterrupt:
            summary = {"status": "interrupted"}
            raise
        finally:
            summary.update(
                frames=frames, episodes=self.collector.tracker.episodes,
                eval_return_mean=float(np.mean(eval_returns)) if eval_returns else None,
                eval_return_std=float(np.std(eval_returns)) if eval_returns else None,
                train_return_recent=self.collector.tracker.recent_return(),
                wall_time_s=round(time.perf_counter() - started, 3), seed=settings.seed,
                run_dir=str(self.run_dir),
            )
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            for logger in loggers:
                logger.close(summary)
        return summary

    def evaluate(self, loggers: list, frames: int) -> list[float]:
        settings = self.recipe.run
        returns = evaluate(self.eval_env, self.algorithm.policy, self.recipe.eval.episodes, seed=settings.seed + 10_000)
        _log(loggers, {"eval_return_mean": float(np.mean(returns)), "eval_return_std": float(np.std(returns))}, frames)
        return returns

    def save_checkpoint(self, frames: int) -> None:
        state = {"algorithm": self.algorithm.state_dict(), "frames": frames, "recipe": self.recipe.resolved(),
                 "saved_at": datetime.now(timezone.utc).isoformat()}
        torch.save(state, self.run_dir / "checkpoint.pt")


def build_eval_env(recipe: Recipe) -> EnvBase:
    """A separate env instance for evaluation; one copy per episode where the env can say how many."""
    env = recipe.env
    if "num_envs" in env.params:
        env = type(env)(env.spec, {**env.params, "num_envs": recipe.eval.episodes}, env.path)
    return env.build(device=recipe.run.device)


def _log(loggers: list, metrics: dict[str, float], frames: int) -> None:
    for logger in loggers:
        logger.log(metrics, frames)
