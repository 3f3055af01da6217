"""Filming evaluation episodes of gymnasium envs to mp4 (``eval.video`` and ``rlplug eval --video``).

The video env is the recipe's env built with one copy and ``render_mode="rgb_array"`` (every wrapper, time
limit and observation transform of the recipe kept), driven by the same deterministic policy on the same
normalised observations. Episode ``i`` starts from seed ``seed + i``, the start state of the ``i``-th
evaluation env, so its return is one of the evaluation's returns.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from rlplug.errors import UserError
from rlplug.registry.components import ComponentFailure


def env_name(recipe) -> str:
    params = recipe.env.params
    return str(params.get("id") or recipe.env.spec.name)


def render_recipe(recipe):
    """The recipe with its env as one copy rendering rgb_array frames that a ``RenderCollection`` keeps
    (the final frame of an episode included, which the same-step autoreset would otherwise replace)."""
    from rlplug.plugins.envs import make_gym
    from rlplug.recipe import validate

    if recipe.env.spec.factory is not make_gym:
        raise UserError(f"--video films gymnasium envs (env use = \"gym\"); this run's env is "
                        f"'{recipe.env.spec.qualified_name}'")
    data = recipe.resolved()
    env = data["env"]
    env["num_envs"] = 1
    if "vectorization" in env:  # one copy, rendered here: no worker process
        env["vectorization"] = "sync"
    env["kwargs"] = {**env.get("kwargs", {}), "render_mode": "rgb_array"}
    env["wrappers"] = [*env.get("wrappers", []),
                       {"name": "RenderCollection", "kwargs": {"pop_frames": True, "reset_clean": False}}]
    return validate(data, file="<video env>")


def cannot_render(env_id: str, error: BaseException) -> UserError:
    """The one-line error for an env that cannot give rgb_array frames on this machine."""
    import gymnasium as gym

    from rlplug.plugins.envs.gym import one_line

    hint = ""
    if (isinstance(error, gym.error.DependencyNotInstalled) or "pygame" in str(error)) \
            and "pip install" not in str(error):
        hint = " (classic-control envs render with pygame: pip install pygame)"
    return UserError(f"--video: {env_id} cannot render rgb_array frames here: {one_line(error)}{hint}")


def open_video_env(recipe, statistics: dict[str, Any]):
    """The recipe's env as one rendering copy, with the training env's statistics frozen in it; anything
    that keeps it from rendering (no rgb_array mode, no pygame or OpenGL) is a :class:`UserError`."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame (classic control) without a display
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # its greeting would land on stdout
    if importlib.util.find_spec("imageio_ffmpeg") is None:
        raise UserError("--video needs the imageio-ffmpeg package: pip install imageio-ffmpeg")
    from rlplug.core.env_members import as_evaluation_env
    from rlplug.core.transformed import build_transformed

    env_id = env_name(recipe)
    env = None
    try:
        env = build_transformed(render_recipe(recipe).env, device=recipe.run.device)
        as_evaluation_env(env, statistics)
        rendering_stage(env).render()  # frames of the steps TorchRL took to infer the specs: not part of any episode
    except ComponentFailure as error:  # the env's factory raised: a missing renderer, a render_mode it lacks
        raise cannot_render(env_id, error.__cause__ or error) from error
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

    stage = rendering_stage(env)
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
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from rlplug.core.collect import road_for
    from rlplug.core.rollout import rollout

    def frames_now(ended: bool) -> list:
        try:
            frames = list(rendering_stage(env).render()[0])
        except UserError:
            raise
        except Exception as error:
            raise cannot_render(error) from error
        # After the last step the same-step autoreset has already started the next episode: its first
        # frame is not part of this one.
        return frames[:-1] if ended and frames else frames

    road = road_for(env, policy, seed, deterministic=True)
    total, steps, ended = 0.0, 0, False

    def film(t, state, acted, transition) -> None:
        nonlocal total, steps, ended
        rewards, dones = road.outcome(transition)
        total, steps, ended = total + float(rewards.sum()), steps + 1, bool(dones.any())
        write(frames_now(ended))

    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        state = road.start(seed)
        write(frames_now(False)[-1:])  # TorchRL seeds by resetting: only the last reset's frame starts the episode
        rollout(road, state, until=lambda: ended, record=film)
    return total, steps


def rendering_stage(env):
    """The gymnasium vector env under the video env (from :func:`open_video_env`), whose ``render()`` gives
    each copy's frames since the last call."""
    from rlplug.core.env_members import env_member

    return env_member(env, "stage")


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
