"""``python -m rlplug eval RUN_DIR``: a run's checkpoint evaluated again, and optionally filmed.

The run is rebuilt from its checkpoint exactly as :meth:`rlplug.Agent.load` and ``rlplug resume`` rebuild it
(:meth:`rlplug.run.trainer.Run.from_checkpoint`: the checkpoint's own resolved recipe, its parameters and its
env's normalisation statistics), but into a scratch directory: nothing is written into ``RUN_DIR``, which may be
read-only. Evaluation is what the run's own evaluations do: the deterministic policy on a separate env whose
normalisation statistics are the training env's, frozen, from the same start states (``--seed``, by default the
run's seed + ``rlplug.recipe.EVAL_SEED_OFFSET``).

``--video OUT.mp4`` films episodes on one more env (:mod:`rlplug.run.video`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rlplug.errors import UserError
from rlplug.recipe import EVAL_SEED_OFFSET

#: Containers ``--video`` writes (through ffmpeg, H.264).
VIDEO_SUFFIXES = (".mp4",)
#: At most this many returns are listed one by one.
LISTED_RETURNS = 30


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def seed_value(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"expected a seed from 0 to 2**31 - 1, got {value}")
    return value


def add_commands(subparsers) -> None:
    """Adds ``eval``."""
    parser = subparsers.add_parser(
        "eval", help="evaluate a run's checkpoint (deterministic policy) without touching the run; --video films it",
        description="Evaluate a run's checkpoint with the deterministic policy and the env's normalisation "
                    "statistics frozen, as the run's own evaluations do. Nothing is written into RUN_DIR.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    parser.add_argument("--episodes", type=positive_int, metavar="N",
                        help="episodes to evaluate (default: the recipe's eval.episodes)")
    parser.add_argument("--checkpoint", type=Path, metavar="FILE",
                        help="checkpoint to evaluate (default: RUN_DIR/checkpoint.pt; a relative path is also "
                             "looked for inside RUN_DIR, e.g. checkpoints/frames-000000050000.pt)")
    parser.add_argument("--seed", type=seed_value, metavar="S",
                        help=f"seed of the first episode's start state, S + i for the i-th (default: the run's "
                             f"seed + {EVAL_SEED_OFFSET}, the start states of the run's own evaluations)")
    parser.add_argument("--video", type=Path, metavar="OUT.mp4",
                        help="also film episodes with gymnasium's rgb_array rendering into this mp4 file")
    parser.add_argument("--video-episodes", type=positive_int, default=1, metavar="K",
                        help="episodes in the video (default: 1), from the same start states as the first K "
                             "evaluation episodes")
    add_best_option(parser)
    add_unverified_option(parser)
    parser.set_defaults(handler=cmd_eval)


def add_best_option(parser) -> None:
    """``--best``, for the commands that read a checkpoint of a run (eval, export)."""
    parser.add_argument("--best", action="store_true",
                        help="the best evaluated weights, RUN_DIR/best.pt, which the keep-best callback keeps")


def add_unverified_option(parser) -> None:
    """``--allow-unverified``, for the commands that load a checkpoint (eval, export, resume)."""
    parser.add_argument("--allow-unverified", action="store_true",
                        help="load a checkpoint written before checkpoints carried a digest (format 1): nothing can "
                             "check that its data is what was written, so only for a file you trust")


def cmd_eval(args: argparse.Namespace) -> int:
    from rlplug.recipe import eval_episodes_problem

    run_dir: Path = args.run_dir
    if args.episodes is not None and (problem := eval_episodes_problem(args.episodes)):  # eval.episodes' bound
        raise UserError(f"--episodes: {problem}")
    checkpoint = find_checkpoint(run_dir, args.checkpoint, command="eval", best=args.best)
    video = check_video_path(args.video) if args.video is not None else None

    import tempfile

    import numpy as np

    from rlplug.core.env_members import as_evaluation_env, env_statistics
    from rlplug.run.evaluation import evaluate
    from rlplug.run.trainer import Run
    from rlplug.run.video import env_name, open_video_env, record_video

    with tempfile.TemporaryDirectory(prefix="rlplug-eval-") as scratch:
        # evaluation steps one env here: a run trained on Ray needs no workers
        changes: dict = {"runner": {"use": "rlplug:local"}}
        if args.episodes:
            changes["eval"] = {"episodes": args.episodes}
        run, state = Run.from_checkpoint(checkpoint, Path(scratch) / "run", changes=changes,
                                         allow_unverified=args.allow_unverified)
        recipe = run.recipe
        episodes = recipe.eval.episodes
        seed = args.seed if args.seed is not None else recipe.run.seed + EVAL_SEED_OFFSET
        statistics = env_statistics(run.env)
        as_evaluation_env(run.eval_env, statistics)  # exactly Run.evaluate: the training env's statistics, frozen
        what = env_name(recipe)
        # The video env first: a run that cannot be filmed is refused before anything is evaluated.
        video_env = open_video_env(recipe, statistics) if video is not None else None
        try:
            with activity(f"evaluating {episodes} episode{'s' * (episodes != 1)} of {what}"):
                returns = np.asarray(evaluate(run.eval_env, run.algorithm.policy, episodes, seed=seed), dtype=float)
            print(f"checkpoint: {checkpoint} (frame {state.get('frames', '?')})")
            seeds = f"start seeds {seed}..{seed + episodes - 1}" if episodes > 1 else f"start seed {seed}"
            print(f"episodes: {len(returns)} of {what}, deterministic policy, {seeds}"
                  + (", normalisation statistics frozen" if statistics else ""))
            print(f"return: mean {returns.mean():.6g}, std {returns.std():.4g}, min {returns.min():.6g}, "
                  f"max {returns.max():.6g}")
            shown = " ".join(f"{r:.6g}" for r in returns[:LISTED_RETURNS])
            print(f"returns: {shown}{' ...' if len(returns) > LISTED_RETURNS else ''}", flush=True)
            if video_env is not None and video is not None:
                frames, video_returns = record_video(video_env, run.algorithm.policy, video, env_id=what,
                                                     episodes=args.video_episodes, seed=seed)
                many = "s" * (len(video_returns) != 1)
                listed = " ".join(f"{r:.6g}" for r in video_returns)
                print(f"video: {video} ({len(video_returns)} episode{many}, {frames} frames, return{many} {listed})")
        finally:
            if video_env is not None:
                video_env.close()
    return 0


def find_checkpoint(run_dir: Path, given: Path | None, command: str, best: bool = False) -> Path:
    """The checkpoint file ``command`` reads: ``given`` as typed, or inside ``run_dir``; default
    ``checkpoint.pt``, or with ``best`` the keep-best callback's ``best.pt``. A ``run_dir`` that is not a
    directory is the user's one-line error."""
    if not run_dir.is_dir():
        what = "no such directory" if not run_dir.exists() else "not a directory"
        raise UserError(f"{run_dir}: {what}; {command} takes the directory of a run (the --out of rlplug run)")
    if best:
        from rlplug.plugins.callbacks import BEST_CHECKPOINT

        if given is not None:
            raise UserError(f"--best reads {BEST_CHECKPOINT} and --checkpoint names another file: give one of them")
        if not (run_dir / BEST_CHECKPOINT).is_file():
            raise UserError(f"{run_dir}: no {BEST_CHECKPOINT} in it; the keep-best callback writes it at each better "
                            f"evaluation: add [[callbacks]] use = \"keep-best\" to the recipe (or resume with --set "
                            f"'callbacks=[{{use=\"keep-best\"}}]') and evaluate during training (eval.every_frames)")
        return run_dir / BEST_CHECKPOINT
    if given is None:
        checkpoint = run_dir / "checkpoint.pt"
        if not checkpoint.is_file():
            raise UserError(f"{run_dir}: no checkpoint.pt in it; eval takes the directory of a run that wrote a "
                            "checkpoint (or name one with --checkpoint)")
        return checkpoint
    candidates = [given] if given.is_absolute() else [given, run_dir / given]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    where = " (nor inside the run directory)" if not given.is_absolute() else ""
    raise UserError(f"--checkpoint {given}: no such file{where}; the run's checkpoints are {run_dir}/checkpoint.pt "
                    f"and {run_dir}/checkpoints/frames-N.pt")


def check_video_path(path: Path) -> Path:
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise UserError(f"--video {path}: the file must end in {' or '.join(VIDEO_SUFFIXES)}")
    if path.is_dir():
        raise UserError(f"--video {path}: is a directory; name the video file")
    parent = path.parent if str(path.parent) else Path(".")
    existing = next((p for p in [parent, *parent.parents] if p.exists()), Path("."))
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--video {path}: cannot write to {existing}")
    return path


class activity:
    """A transient spinner with ``text`` on a terminal; nothing when the output is piped (the result follows)."""

    def __init__(self, text: str):
        self.text, self.status = text, None

    def __enter__(self):
        if sys.stdout.isatty():
            from rich.console import Console

            self.status = Console(highlight=False).status(self.text)
            self.status.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.status is not None:
            self.status.stop()
