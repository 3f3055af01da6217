"""``env.vectorization = "async"``: the gym env's copies in worker processes give the episodes the in-process
copies give, and the workers end with the run however it ends (signals, an env that raises, a kill).

Orphans are found by a marker in the environment of the run's process, which every worker inherits: after
the run has ended, no process on the machine may still carry it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CANONICAL, ROOT, one_line_error, run_cli, wait_for
from gymnasium.envs.classic_control import CartPoleEnv

from rlplug.plugins.envs import make_gym

ASYNC = ["--set", "env.vectorization='async'"]
SMALL = ["--set", "run.total_frames=4096", "--set", "run.checkpoint_every_frames=2048", "--set", "eval.episodes=2",
         "--set", "env.num_envs=4", "--set", "env.normalize_observations='running'"]
MARK = "RLPLUG_TEST_WORKER_MARK"
linux_only = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads processes from /proc")


def carrying(mark: str) -> list[int]:
    """The processes whose environment holds ``MARK=mark`` (a run and the workers it forked)."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                stat = (entry / "stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":  # a zombie has ended, only not yet been reaped
                    found.append(int(entry.name))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def no_process_left(mark: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while carrying(mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def start(out: Path, mark: str, *extra: str) -> subprocess.Popen:
    """The run in a process group of its own, as a shell starts a command (a Ctrl-C reaches the whole group)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}, MARK: mark}
    return subprocess.Popen([sys.executable, "-m", "rlplug", "run", str(CANONICAL), "--out", str(out), *SMALL, *ASYNC,
                             *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def transitions(vectorization: str, steps: int = 300) -> list[np.ndarray]:
    env = make_gym("CartPole-v1", num_envs=3, vectorization=vectorization, normalize_observations="running")
    try:
        actions = np.random.default_rng(0).integers(0, 2, (steps, 3))
        seen = [env.reset_arrays(seed=7)]
        for action in actions:  # several episodes end on the way: the autoreset is compared too
            seen.extend(env.step_arrays(action))
        env.set_seed(11)  # and TorchRL's road through the same env, its random actions seeded too
        torch.manual_seed(0)
        rollout = env.rollout(50, break_when_any_done=False)
        seen.extend(rollout.get(key).numpy() for key in (("next", "observation"), ("next", "reward"), ("next", "done")))
        return seen
    finally:
        env.close()


def test_async_copies_give_the_same_transitions_as_sync_copies_for_a_seed():
    sync, in_workers = transitions("sync"), transitions("async")
    assert len(sync) == len(in_workers)
    assert sum(bool(terminated.any()) for terminated in sync[3:1 + 5 * 300:5]) > 3  # episodes did end
    for expected, actual in zip(sync, in_workers):
        np.testing.assert_array_equal(expected, actual)


def test_an_unknown_vectorization_is_one_line_naming_the_key():
    result = run_cli("run", str(CANONICAL), "--set", "env.vectorization='threads'")
    one_line_error(result, "env.vectorization", "'sync'", "'async'")


def final_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    return {**{f"policy.{k}": v for k, v in state["algorithm"]["policy"].items()},
            **{f"env.{k}": torch.as_tensor(v) for k, v in state["env"].items()}}


@pytest.mark.slow
@linux_only
def test_a_killed_async_run_leaves_no_worker_and_resumes_to_the_sync_runs_parameters(tmp_path):
    straight = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "sync"), *SMALL)
    assert straight.returncode == 0, straight.stderr

    mark = uuid.uuid4().hex
    killed = start(tmp_path / "async", mark)
    wait_for(tmp_path / "async" / "checkpoints" / f"frames-{2048:012d}.pt", killed)
    assert len(carrying(mark)) > 1  # the run and its workers
    killed.send_signal(signal.SIGKILL)  # no clean-up at all: the workers see their pipes close and exit
    killed.wait(timeout=30)
    assert no_process_left(mark)
    resumed = run_cli("resume", str(tmp_path / "async"))
    assert resumed.returncode == 0, resumed.stderr

    expected, actual = final_parameters(tmp_path / "sync"), final_parameters(tmp_path / "async")
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


@pytest.mark.slow
@linux_only
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_an_async_run_cleanly_and_its_workers_with_it(tmp_path, sig, status):
    mark, out = uuid.uuid4().hex, tmp_path / "run"
    process = start(out, mark, "--set", "run.total_frames=10000000")
    wait_for(out / "metrics.csv", process)
    assert len(carrying(mark)) >= 1 + 4 + 2  # the run, its training copies and its evaluation copies
    if sig == signal.SIGINT:  # as a terminal's Ctrl-C: to the whole process group, workers included
        os.killpg(process.pid, sig)
    else:  # as a process manager stopping the run
        process.send_signal(sig)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == status, stderr
    assert "continue with: python -m rlplug resume" in stderr
    assert (out / "checkpoint.pt").exists()
    assert no_process_left(mark)


@pytest.mark.slow
@linux_only
def test_an_env_raising_in_its_worker_ends_the_run_in_one_line_with_no_worker_left(tmp_path, install):
    where = install({"raising": """
        import gymnasium as gym
        from gymnasium.envs.classic_control import CartPoleEnv

        import rlplug

        class RaisingCartPole(CartPoleEnv):
            steps = 0

            def step(self, action):
                RaisingCartPole.steps += 1
                if RaisingCartPole.steps > 300:
                    raise RuntimeError("the simulator lost its state")
                return super().step(action)

        gym.register("RaisingCartPole-v0", entry_point=RaisingCartPole, max_episode_steps=500)

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            pass
        """})
    mark = uuid.uuid4().hex
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}, MARK: mark,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(where), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "rlplug", "run", str(CANONICAL), "--out", str(tmp_path / "run"),
                             *SMALL, *ASYNC, "--set", "env.id='RaisingCartPole-v0'"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    one_line_error(result, "RaisingCartPole-v0", "raised in its worker process",
                   "RuntimeError: the simulator lost its state")
    assert no_process_left(mark)


# -- TorchRL envs: dm_control's copies in TorchRL's ParallelEnv ------------------------------------------------

DMC_SMALL = ["--set", "run.total_frames=200", "--set", "env.num_envs=2", "--set", "env.frame_skip=50",
             "--set", "eval.episodes=1", "--set", "algorithm.random_frames=64", "--set", "algorithm.learning_starts=64",
             "--set", "algorithm.batch_size=32", "--set", "algorithm.policy.hidden=[16]",
             "--set", "algorithm.critic.hidden=[16]"]


@pytest.mark.slow
@linux_only
def test_dm_control_async_copies_train_as_the_sync_ones_and_end_with_the_run(tmp_path):
    pytest.importorskip("dm_control")
    recipe = str(ROOT / "recipes" / "dmc-cheetah-run-sac.toml")
    straight = run_cli("run", recipe, "--out", str(tmp_path / "sync"), *DMC_SMALL)
    assert straight.returncode == 0, straight.stderr

    mark = uuid.uuid4().hex
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}, MARK: mark}
    parallel = subprocess.run([sys.executable, "-m", "rlplug", "run", recipe, "--out", str(tmp_path / "async"),
                               *DMC_SMALL, *ASYNC], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert parallel.returncode == 0, parallel.stderr
    assert no_process_left(mark)
    # the same seeds give the same episodes in worker processes: the same learning, to the last bit
    state = {name: torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)["algorithm"]["loss"]
             for name in ("sync", "async")}
    assert state["sync"].keys() == state["async"].keys()
    for name in state["sync"]:
        assert torch.equal(state["sync"][name], state["async"][name]), name


@pytest.mark.slow
@linux_only
def test_ctrl_c_stops_a_dm_control_async_run_cleanly_and_its_workers_with_it(tmp_path):
    pytest.importorskip("dm_control")
    mark, out = uuid.uuid4().hex, tmp_path / "run"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}, MARK: mark}
    recipe = ROOT / "recipes" / "dmc-cheetah-run-sac.toml"
    process = subprocess.Popen([sys.executable, "-m", "rlplug", "run", str(recipe), "--out", str(out), *DMC_SMALL,
                                "--set", "run.total_frames=1000000", *ASYNC],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    wait_for(out / "metrics.csv", process)
    assert len(carrying(mark)) >= 1 + 2  # the run and its two copies' workers
    os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the workers get it too
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr  # the workers ignored it; the run closed them
    assert "continue with: python -m rlplug resume" in stderr
    assert no_process_left(mark)


class RaisesOnStep(CartPoleEnv):
    def step(self, action):
        raise RuntimeError("the simulator lost its state")


def test_a_copy_that_raised_is_named_so_even_once_its_worker_has_exited():
    """gymnasium's worker ends (status 0) right after handing back its copy's exception; however late the run
    looks, the copy's exception is the cause it names, not the ended worker (CI once read it the other way)."""
    from rlplug.plugins.envs.workers import EnvWorkerError, WorkerVectorEnv

    env = WorkerVectorEnv([RaisesOnStep, RaisesOnStep], env_id="RaisesOnStep")
    env.reset(seed=0)
    env.step_async(np.zeros(2, dtype=np.int64))
    deadline = time.monotonic() + 30
    while any(process.exitcode is None for process in env.processes):  # both workers gone before it looks
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(EnvWorkerError, match="copy 0, 1 raised in its worker process: RuntimeError: the simulator"):
        env.step_wait()
