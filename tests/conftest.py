"""Shared test helpers: the real CLI in a subprocess, and the canonical recipe."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cli_zygote
import pytest

#: Ray starts its worker processes at niceness 15 so that they yield to other processes (Ray's own default): beside
#: the other xdist worker's tests, at niceness 0 on 2 cores, a Ray test's workers got a small share of the CPU and
#: took 10 to 40 times as long as alone. Every Ray instance the tests start (in this process, in a run's
#: subprocess, in tests/ray_cluster.py) reads it from the environment.
os.environ.setdefault("RAY_worker_niceness", "0")

ROOT = Path(__file__).resolve().parent.parent
CANONICAL = ROOT / "recipes" / "cartpole-ppo.toml"


def one_line_error(result, *fragments: str) -> str:
    """Asserts a CLI result is a user error: exit 2, one ``rlplug: error:`` line holding every fragment."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlplug: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def run_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m rlplug ARGS`` as a user would run it, from the repository root; the finished process.

    rlplug's own switches (``RLPLUG_STRICT_PLUGINS``, ``RLPLUG_DEBUG``) are not inherited, only given.
    The process is a fork of this pytest process's :mod:`cli_zygote` (the libraries already imported), or a
    plain ``python -m rlplug`` where that server is off (``RLPLUG_TEST_PLAIN_SUBPROCESS=1``) or the run
    compiles (``run.compile=true``).
    """
    environment = cli_environment(env)
    zygote = server_for(args, environment)
    if zygote is None:
        return subprocess.run([sys.executable, "-m", "rlplug", *args], cwd=ROOT, env=environment,
                              capture_output=True, text=True, timeout=timeout)
    return cli_zygote.run(zygote, list(args), ROOT, environment, timeout)


def server_for(args: tuple[str, ...], environment: dict) -> str | None:
    """The :mod:`cli_zygote` server's address for ``python -m rlplug ARGS`` in ``environment``, or None for a
    plain process: where the server is off (``RLPLUG_TEST_PLAIN_SUBPROCESS``), or the run compiles (torch.compile
    in a fork of the server once ran past its 300 s in CI, cause not found)."""
    if "RLPLUG_TEST_PLAIN_SUBPROCESS" in environment or any("compile=true" in arg for arg in args):
        return None
    return cli_zygote.ZYGOTE.address(environment)


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    """Until ``path`` exists, asserting that ``process`` (a run in the background) is still running meanwhile."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def start_cli(*args: str, env: dict | None = None) -> subprocess.Popen | cli_zygote.Started:
    """:func:`run_cli` started, not waited for: stdout and stderr are read by ``communicate``; a fork of the
    :mod:`cli_zygote` server where :func:`run_cli` would take one (``Started``, which answers as ``Popen``)."""
    environment = cli_environment(env)
    zygote = server_for(args, environment)
    if zygote is not None:
        return cli_zygote.Started(zygote, list(args), ROOT, environment)
    return subprocess.Popen([sys.executable, "-m", "rlplug", *args], cwd=ROOT, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def cli_environment(env: dict | None) -> dict:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}
    return {**inherited, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` are skipped where there is no CUDA device (they run wherever there is one)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is false)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cli():
    return run_cli


def rlplug_cli(*args: str, path: Path | None = None, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    """``python -m rlplug ARGS`` with ``path`` (a folder of fake distributions) on PYTHONPATH."""
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")]))
    return run_cli(*args, env=env, timeout=timeout)


#: A short run's flags: 1024 frames, checkpoints at 512 and 1024, one evaluation episode at the end.
SHORT = ["--set", "run.total_frames=1024", "--set", "run.checkpoint_every_frames=512", "--set", "eval.every_frames=0",
         "--set", "eval.episodes=1"]


def trained_run(tmp_path_factory, name: str, *flags: str) -> Path:
    """A finished short run (:data:`SHORT`) of the canonical recipe with ``flags``; tests work on copies of it
    (:func:`copied_run`), so a module trains it once."""
    out = tmp_path_factory.mktemp(name) / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT, *flags)
    assert result.returncode == 0, result.stderr
    return out


def copied_run(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A short run trained once per test module that asks for it (:func:`trained_run`)."""
    return trained_run(tmp_path_factory, "trained")


PENDULUM_SAC = ROOT / "recipes" / "pendulum-sac.toml"


def recorded_pendulum(tmp_path_factory, episodes: int = 3) -> tuple[Path, Path]:
    """A short SAC run on Pendulum-v1 (400 frames) and ``episodes`` episodes of its policy recorded by ``rlplug
    record`` (``pendulum-sac-v0``): the offline tests' own dataset, made without the network."""
    folder = tmp_path_factory.mktemp("offline")
    run = folder / "sac"
    result = run_cli("run", str(PENDULUM_SAC), "--out", str(run), "--set", "run.total_frames=400",
                     "--set", "eval.every_frames=0", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    dataset = folder / "pendulum-sac-v0"
    result = run_cli("record", str(run), "--episodes", str(episodes), "--out", str(dataset))
    assert result.returncode == 0, result.stderr
    return run, dataset


@pytest.fixture
def run_dir(trained, tmp_path) -> Path:
    """A test's own copy of :func:`trained`."""
    return copied_run(trained, tmp_path)


_module_ids = itertools.count()


@pytest.fixture
def install(tmp_path, monkeypatch):
    """``install({entry point name: module source}, dist=..., version=...)``: a fake installed distribution.

    Module names are unique per call, so no test sees another's modules through ``sys.modules``.
    """
    modules: list[str] = []

    def install_(plugins: dict[str, str], *, dist: str = "fakepkg", version: str = "1.2.3",
                 where: Path = tmp_path) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        lines = []
        for entry_name, source in plugins.items():
            module = f"fake_rlplug_plugin_{next(_module_ids)}"
            (where / f"{module}.py").write_text(textwrap.dedent(source))
            lines.append(f"{entry_name} = {module}")
            modules.append(module)
        info = where / f"{dist}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text("[rlplug]\n" + "\n".join(lines) + "\n")
        monkeypatch.syspath_prepend(str(where))
        return where

    yield install_
    for module in modules:
        sys.modules.pop(module, None)


def poisoned_env_plugin(env_id: str, name: str, after_steps: int) -> str:
    """A plugin's source registering ``name``: ``env_id`` whose rewards turn NaN after ``after_steps`` steps in
    the envs of one seed's run (those reset with ``poisoned_seed``), to show that seed diverging alone."""
    return f"""
import numpy as np
import rlplug
from rlplug.plugins.envs.gym import make_gym_vector_env


def make_poisoned(poisoned_seed: int = 1, after_steps: int = {after_steps}):
    env = make_gym_vector_env("{env_id}", num_envs=1, max_episode_steps=None, make_kwargs={{}})
    reset, step = env.reset_arrays, env.step_arrays
    state = {{"poisoned": False, "steps": 0}}

    def reset_arrays(seed=None):
        state["poisoned"] = state["poisoned"] or seed == poisoned_seed
        return reset(seed=seed)

    def step_arrays(action):
        transition = step(action)
        state["steps"] += 1
        if state["poisoned"] and state["steps"] > after_steps:
            return transition._replace(reward=np.full_like(transition.reward, np.nan))
        return transition

    env.reset_arrays, env.step_arrays = reset_arrays, step_arrays
    return env


@rlplug.hookimpl
def rlplug_register_envs(register):
    register("{name}", make_poisoned)
"""


def built_algorithm(recipe_path: Path, seed: int, overrides: list[str], batches: int = 1):
    """The algorithm of ``seed``'s run and ``batches`` batches collected by its own collector (as Run builds
    them): the seeds-together tests compare each seed's update with this one's."""
    from rlplug.core.collect import Collector
    from rlplug.core.envs import build_env
    from rlplug.core.process import seed_everything
    from rlplug.recipe import load

    recipe = load(recipe_path, [f"run.seed={seed}", *overrides])
    seed_everything(seed)
    env = build_env(recipe.env)
    algorithm = recipe.algorithm.build(observation_spec=env.observation_spec, action_spec=env.action_spec,
                                       device="cpu", seed=seed, total_frames=recipe.run.total_frames,
                                       run_dir=Path("unused"))
    collector = Collector(env, algorithm.policy, algorithm.frames_per_batch, seed)
    return algorithm, [collector.collect() for _ in range(batches)]


def pendulum_transitions(rows: int, seed: int):
    """``rows`` random Pendulum-shaped transitions (3-dim observations, actions in [-2, 2], about 30% terminal)
    in TorchRL's layout, the same for the same ``seed``: what the off-policy loss tests feed their losses."""
    import torch
    from tensordict import TensorDict

    generator = torch.Generator().manual_seed(seed)
    terminated = torch.rand(rows, 1, generator=generator) < 0.3
    return TensorDict({
        "observation": torch.randn(rows, 3, generator=generator),
        "action": 4 * torch.rand(rows, 1, generator=generator) - 2,
        "next": {"observation": torch.randn(rows, 3, generator=generator),
                 "reward": torch.randn(rows, 1, generator=generator), "terminated": terminated,
                 "done": terminated.clone()},
    }, [rows])


def stopped_then_set_and_resumed(recipe: Path, out: Path, flags: list[str], *assignments: str,
                                 stop_at: int = 128, resume_flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """A run stopped by a callback at its first evaluation (frame ``stop_at``, before its total), then ``rlplug set
    ASSIGNMENTS`` (which waits for a resume), then resumed to its end: the resume's result, checked to succeed."""
    stop = ["--set", f"eval.every_frames={stop_at}", "--set", "callbacks=[{use='stop-at-return', threshold=-1e9}]"]
    first = run_cli("run", str(recipe), "--out", str(out), *flags, *stop)
    assert first.returncode == 0, first.stderr
    asked = run_cli("set", str(out), *assignments)
    assert asked.returncode == 0 and "waits for python -m rlplug resume" in asked.stdout, asked.stdout + asked.stderr
    resumed = run_cli("resume", str(out), "--set", "callbacks=[]", *resume_flags)
    assert resumed.returncode == 0, resumed.stderr
    return resumed
