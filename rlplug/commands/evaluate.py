"""``python -m rlplug eval RUN_DIR``: a run's checkpoint evaluated again, and optionally filmed.

The run is rebuilt from its checkpoint exactly as :meth:`rlplug.Agent.load` and ``rlplug resume`` rebuild it
(the checkpoint's own resolved recipe, its parameters and its env's normalisation statistics), but into a
scratch directory: nothing is written into ``RUN_DIR``, which may be read-only. Evaluation is what the run's
own evaluations do: the deterministic policy on a separate env whose normalisation statistics are the
training env's, frozen, from the same start states (``--seed``, by default the run's seed + 10,000).

``--video OUT.mp4`` films episodes on one more env, the recipe's env built with one copy and
``render_mode="rgb_array"`` (every wrapper, time limit and observation transform of the recipe kept), driven
by the same deterministic policy on the same normalised observations. Episode ``i`` of the video starts
from seed ``seed + i``, the start state of the ``i``-th evaluation env, so its return is one of the returns
printed.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from rlplug.errors import UserError

#: The offset of evaluation seeds from the run's seed (what :meth:`rlplug.trainer.Run.evaluate` uses).
EVAL_SEED_OFFSET = 10_000
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
    parser.set_defaults(handler=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    if not run_dir.is_dir():
        what = "no such directory" if not run_dir.exists() else "not a directory"
        raise UserError(f"{run_dir}: {what}; eval takes the directory of a run (the --out of rlplug run)")
    checkpoint = find_checkpoint(run_dir, args.checkpoint)
    video = check_video_path(args.video) if args.video is not None else None

    import tempfile

    import numpy as np

    from rlplug.collect import evaluate
    from rlplug.trainer import env_statistics

    with tempfile.TemporaryDirectory(prefix="rlplug-eval-") as scratch:
        run, state = rebuild_run(checkpoint, args.episodes, Path(scratch) / "run")
        recipe = run.recipe
        episodes = recipe.eval.episodes
        seed = args.seed if args.seed is not None else recipe.run.seed + EVAL_SEED_OFFSET
        statistics = env_statistics(run.env)
        if statistics:  # exactly Run.evaluate: the training env's statistics, frozen
            run.eval_env.load_statistics(statistics)
            run.eval_env.set_training(False)
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
            if video_env is not None:
                frames, video_returns = record_video(video_env, run.algorithm.policy, video, env_id=what,
                                                     episodes=args.video_episodes, seed=seed)
                many = "s" * (len(video_returns) != 1)
                listed = " ".join(f"{r:.6g}" for r in video_returns)
                print(f"video: {video} ({len(video_returns)} episode{many}, {frames} frames, return{many} {listed})")
        finally:
            if video_env is not None:
                video_env.close()
    return 0


def find_checkpoint(run_dir: Path, given: Path | None) -> Path:
    """The checkpoint file to evaluate: ``given`` as typed, or inside ``run_dir``; default ``checkpoint.pt``."""
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


def rebuild_run(checkpoint: Path, episodes: int | None, scratch: Path):
    """The run of ``checkpoint``, built (as ``Agent.load`` builds it) into the unused directory ``scratch``,
    with its parameters and statistics; ``episodes`` replaces the recipe's ``eval.episodes``."""
    from rlplug import recipe as recipes
    from rlplug.trainer import Run, load_checkpoint

    state = load_checkpoint(checkpoint)
    data = state.get("recipe")
    if not isinstance(data, dict):
        raise UserError(f"{checkpoint}: not an rlplug checkpoint (it holds no recipe)")
    data = copy.deepcopy(data)
    if episodes is not None:
        data.setdefault("eval", {})
        if not isinstance(data["eval"], dict):
            raise UserError(f"{checkpoint}: not a usable rlplug checkpoint (its recipe's eval is not a table)")
        data["eval"]["episodes"] = episodes
    data["runner"] = {"use": "local"}  # evaluation steps one env here: a run trained on Ray needs no workers
    recipe = recipes.validate(data, file=str(checkpoint))
    run = Run.build(recipe, scratch)
    try:
        run.load_state_dict(state)
    except UserError as error:
        raise UserError(f"{checkpoint}: {error}") from error
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as error:
        # A file that loads as tensors but whose contents do not fit its own recipe: tampered, or truncated
        # by hand. Refused, never half-used.
        detail = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        raise UserError(f"{checkpoint}: not a usable rlplug checkpoint, its contents do not fit its recipe "
                        f"({detail})") from error
    return run, state


def env_name(recipe) -> str:
    params = recipe.env.params
    return str(params.get("id") or recipe.env.spec.name)


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


# -- video ------------------------------------------------------------------------------------------------


def render_recipe(recipe):
    """The recipe with its env as one copy rendering rgb_array frames that a ``RenderCollection`` keeps
    (the final frame of an episode included, which the same-step autoreset would otherwise replace)."""
    from rlplug import recipe as recipes
    from rlplug.plugins.envs import make_gym

    if recipe.env.spec.factory is not make_gym:
        raise UserError(f"--video films gymnasium envs (env use = \"gym\"); this run's env is "
                        f"'{recipe.env.spec.qualified_name}'")
    data = recipe.resolved()
    env = data["env"]
    env["num_envs"] = 1
    env["kwargs"] = {**env.get("kwargs", {}), "render_mode": "rgb_array"}
    env["wrappers"] = [*env.get("wrappers", []),
                       {"name": "RenderCollection", "kwargs": {"pop_frames": True, "reset_clean": False}}]
    return recipes.validate(data, file="<video env>")


def cannot_render(env_id: str, error: BaseException) -> UserError:
    """The one-line error for an env that cannot give rgb_array frames on this machine."""
    import gymnasium as gym

    from rlplug.envs import one_line

    hint = ""
    if (isinstance(error, gym.error.DependencyNotInstalled) or "pygame" in str(error)) \
            and "pip install" not in str(error):
        hint = " (classic-control envs render with pygame: pip install pygame)"
    return UserError(f"--video: {env_id} cannot render rgb_array frames here: {one_line(str(error))}{hint}")


def open_video_env(recipe, statistics: dict[str, Any]):
    """The recipe's env as one rendering copy, with the training env's statistics frozen in it; anything
    that keeps it from rendering (no rgb_array mode, no pygame or OpenGL) is a :class:`UserError`."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame (classic control) without a display
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # its greeting would land on stdout
    if importlib.util.find_spec("imageio_ffmpeg") is None:
        raise UserError("--video needs the imageio-ffmpeg package: pip install imageio-ffmpeg")
    env_id = env_name(recipe)
    env = None
    try:
        env = render_recipe(recipe).env.build(device=recipe.run.device)
        if statistics:
            env.load_statistics(statistics)
            env.set_training(False)
        env.stage.render()  # frames of the steps TorchRL took to infer the specs: not part of any episode
    except UserError as error:
        if env is not None:
            env.close()
        if "render" in str(error).lower():
            raise cannot_render(env_id, error) from error
        raise
    except Exception as error:  # a missing renderer (pygame, OpenGL), a render_mode the env lacks
        if env is not None:
            env.close()
        raise cannot_render(env_id, error) from error
    return env


def record_video(env, policy, path: Path, *, env_id: str, episodes: int, seed: int) -> tuple[int, list[float]]:
    """Film ``episodes`` episodes on ``env`` (from :func:`open_video_env`), episode ``i`` from seed
    ``seed + i``, into ``path`` (written whole or not at all); the number of frames and the returns."""
    import imageio_ffmpeg

    stage = env.stage
    fps = (getattr(stage, "metadata", None) or {}).get("render_fps") or 30
    temporary = path.with_name(f".{path.stem}.partial{path.suffix}")
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = None
    frames_written, size = 0, None
    returns: list[float] = []

    def write(frames) -> None:
        nonlocal writer, frames_written, size
        for frame in frames:
            frame = checked_frame(frame, env_id)
            if writer is None:
                writer = open_writer(imageio_ffmpeg, temporary, frame, fps)
                size = frame.shape
            elif frame.shape != size:
                raise UserError(f"--video: {env_id} rendered frames of different sizes ({size} then {frame.shape})")
            writer.send(frame)
            frames_written += 1

    progress = VideoProgress(episodes)
    try:
        for index in range(episodes):
            episode_return, steps = film_episode(env, policy, seed + index, write,
                                                 lambda error: cannot_render(env_id, error))
            returns.append(episode_return)
            progress.episode_done(index, episode_return, steps)
        if writer is None:
            raise UserError(f"--video: {env_id} rendered no frames")
        writer.close()
        writer = None
        os.replace(temporary, path)
    finally:
        progress.close()
        if writer is not None:
            try:
                writer.close()
            except Exception:
                pass
        temporary.unlink(missing_ok=True)
    return frames_written, returns


def film_episode(env, policy, seed: int, write, cannot_render) -> tuple[float, int]:
    """One episode from ``seed`` with the deterministic policy, every frame handed to ``write``; its return
    (in the env's own units: statistics are frozen, rewards unscaled) and length."""
    import torch
    from torchrl.envs.utils import ExplorationType, set_exploration_type, step_mdp

    from rlplug.collect import actor_view_for

    def frames_now(ended: bool) -> list:
        try:
            frames = list(env.stage.render()[0])
        except UserError:
            raise
        except Exception as error:
            raise cannot_render(error) from error
        # After the last step the same-step autoreset has already started the next episode: its first
        # frame is not part of this one.
        return frames[:-1] if ended and frames else frames

    actor = actor_view_for(env, policy)
    total, steps, ended = 0.0, 0, False
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        if actor is not None:  # the tensor road, as rlplug.collect.evaluate takes it
            observation = env.reset_tensors(seed=seed)
            write(frames_now(False))
            while not ended:
                action, _ = actor.act(observation, deterministic=True)
                transition = env.step_tensors(action)
                total += float(transition.reward.sum())
                ended = bool((transition.terminated | transition.truncated).any())
                steps += 1
                write(frames_now(ended))
                observation = transition.observation
        else:  # any other TorchRL policy: TensorDicts, as rlplug.collect.evaluate steps them
            env.set_seed(seed)  # TorchRL seeds by resetting: that frame is not the episode's start
            frames_now(False)
            state = env.reset()
            write(frames_now(False))
            while not ended:
                step = env.step(policy(state))
                total += float(step.get(("next", "reward")).sum())
                ended = bool(step.get(("next", "done")).any())
                steps += 1
                write(frames_now(ended))
                state = step_mdp(step)
    return total, steps


def checked_frame(frame, env_id: str):
    import numpy as np

    if frame is None:
        raise UserError(f"--video: {env_id} does not render rgb_array frames (render() gave None)")
    array = np.asarray(frame)
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    if array.ndim != 3 or array.shape[2] not in (3, 4) or min(array.shape[:2]) < 2:
        raise UserError(f"--video: {env_id} renders frames of shape {list(array.shape)}, not RGB images")
    if array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    array = array[:, :, :3]
    height, width = array.shape[:2]
    if height % 2 or width % 2:  # H.264 in yuv420p wants even sides: pad by a row or column
        array = np.pad(array, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
    return np.ascontiguousarray(array)


def open_writer(imageio_ffmpeg, path: Path, first_frame, fps: float):
    height, width = first_frame.shape[:2]
    writer = imageio_ffmpeg.write_frames(str(path), (width, height), fps=float(fps), codec="libx264",
                                         pix_fmt_in="rgb24", pix_fmt_out="yuv420p", quality=7,
                                         macro_block_size=1, ffmpeg_log_level="error")
    writer.send(None)  # start the generator
    return writer


class VideoProgress:
    """Episodes filmed: a rich progress bar on a terminal, one quiet line per episode when piped."""

    def __init__(self, episodes: int):
        self.episodes = episodes
        self.progress = None
        if sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.progress = Progress(TextColumn("[bold]filming"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("episodes"), transient=True)
            self.task = self.progress.add_task("video", total=episodes)
            self.progress.start()

    def episode_done(self, index: int, episode_return: float, steps: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=index + 1)
        elif self.episodes > 1:
            print(f"video: episode {index + 1}/{self.episodes}: return {episode_return:.4g}, {steps} steps",
                  flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
