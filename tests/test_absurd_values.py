"""Values that are legal in form but absurd in size (or that name nothing), and long updates a signal must
still stop: each is refused in one line at validation, exit status 2, with no directory left behind, or (for
the stop) ends within seconds with a checkpoint. Through the real CLI in a subprocess."""

from __future__ import annotations

import signal
import time

import pytest
import torch
from conftest import CANONICAL, ROOT, poisoned_env_plugin, rlplug_cli, run_cli, start_cli, wait_for
from test_cli import assert_user_error

from rlplug.plugins.limits import available_memory

DQN = ROOT / "recipes" / "cartpole-dqn.toml"
RECIPES = ROOT / "recipes"


@pytest.mark.parametrize("override, fragments", [
    ("run.num_threads=100000", ["run.num_threads", "at most 1024"]),
    ("eval.episodes=1000000000", ["eval.episodes", "at most 100000"]),
    ("run.device=cpu:99", ["run.device", "'cpu:99' is no device", "use 'cpu'"]),
    ("run.total_frames=1000000000000000000", ["run.total_frames", "at most 1e+15", "30 years"]),
    ("algorithm.lr=1e308", ["algorithm.lr", "must be in (0, 10]", "1e+308"]),
    ("algorithm.lr=" + "9" * 400, ["algorithm.lr", "beyond the range of floating-point numbers"]),
    ('env.transforms=[{use="ObservationNorm", loc=0.0, scale=0.0}]', ["env.transforms[0].scale", "must not be 0"]),
    ('env.transforms=[{use="ObservationNorm", loc=0.0, scale=[1.0, 0.0, 1.0, 1.0]}]',
     ["env.transforms[0].scale", "must not be 0"]),
])
def test_absurd_sizes_are_refused_before_any_directory(tmp_path, override, fragments):
    # a short run first, so that a value let through ends soon (the override comes after it, so it wins)
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "run"), "--set", "run.total_frames=512",
                     "--set", override)
    assert_user_error(result, *fragments)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("recipe, override, fragments", [
    ("cartpole-ppo", "algorithm.epochs=1e9", ["algorithm.epochs", "at most 10000", "passes over one batch"]),
    ("cartpole-dqn", "algorithm.gradient_steps=1e9", ["algorithm.gradient_steps", "at most 100000", "hours"]),
    ("pendulum-redq", "algorithm.gradient_steps=1e9", ["algorithm.gradient_steps", "at most 100000"]),
    ("cartpole-ppo", "algorithm.entropy_coef=1e300", ["algorithm.entropy_coef", "at most 100", "outweigh"]),
    ("pendulum-crossq", "algorithm.policy_delay=1e9", ["algorithm.policy_delay", "at most 1000", "almost never"]),
    ("pendulum-td3", "algorithm.policy_delay=1e9", ["algorithm.policy_delay", "at most 1000"]),
    ("pendulum-redq", "algorithm.critics=100000", ["algorithm.critics", "at most 1000", "copy of the critic"]),
    ("pendulum-mpo", "algorithm.action_samples=1e9", ["algorithm.action_samples", "at most 10000", "memory"]),
    ("cartpole-novel-ppo-lstm", "algorithm.policy.num_layers=100000",
     ["algorithm.policy.num_layers", "at most 100", "one after another"]),
    ("cartpole-novel-ppo-lstm", "algorithm.sequence_length=100000",
     ["algorithm.sequence_length", "must divide frames_per_batch", "100000"]),
])
def test_sizes_that_would_hold_a_run_for_hours_are_refused_with_the_reason(tmp_path, recipe, override, fragments):
    """Each was accepted and then ran silent for minutes (or failed at the first update, or in an allocation):
    now one line at validation saying what the value would cost, and no run directory."""
    result = run_cli("run", str(RECIPES / f"{recipe}.toml"), "--out", str(tmp_path / "run"),
                     "--set", "run.total_frames=512", "--set", override)
    assert_user_error(result, *fragments)
    assert not (tmp_path / "run").exists()


def test_rlplug_set_refuses_what_run_refuses(run_dir):
    """``rlplug set`` validates with the same schema: a billion epochs is refused there too, and nothing is
    queued for the run."""
    before = sorted(p.name for p in run_dir.iterdir())
    result = run_cli("set", str(run_dir), "algorithm.epochs=1000000000")
    assert_user_error(result, "algorithm.epochs", "at most 10000")
    assert sorted(p.name for p in run_dir.iterdir()) == before


@pytest.mark.slow
@pytest.mark.parametrize("recipe, overrides", [
    (CANONICAL, ["algorithm.epochs=10000", "algorithm.num_minibatches=256"]),
    (DQN, ["algorithm.gradient_steps=100000", "algorithm.learning_starts=0"]),
], ids=["ppo-epochs", "dqn-gradient-steps"])
def test_a_signal_stops_a_long_update_between_gradient_steps(tmp_path, recipe, overrides):
    """An update of the most epochs (of one-frame minibatches) or gradient steps a recipe may ask for would hold
    a stop for many minutes: SIGTERM ends it at the next step, with a checkpoint eval can load. Before the stop
    between steps, it timed out."""
    out = tmp_path / "run"
    sets = [arg for override in overrides for arg in ("--set", override)]
    process = start_cli("run", str(recipe), "--out", str(out), "--set", "run.checkpoint_every_frames=0", *sets)
    wait_for(out / "recipe.toml", process)  # written as training begins
    time.sleep(5)  # the first batch (256 frames) is collected in well under this; the update never ends alone
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()  # where it did not stop (the update held the signal), not left running
        process.wait()
    assert process.returncode == 143, stderr
    assert f"python -m rlplug resume {out}" in stderr and "Traceback" not in stderr
    evaluated = run_cli("eval", str(out), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_refused(tmp_path):
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "run"), "--set", "run.device=cuda")
    assert_user_error(result, "run.device", "no CUDA GPU")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("buffer", ["uniform", "prioritized"])
def test_a_replay_buffer_larger_than_memory_is_refused_before_allocating(tmp_path, buffer):
    override = f'algorithm.replay_buffer={{use="{buffer}", capacity=100000000000}}'
    result = run_cli("run", str(DQN), "--out", str(tmp_path / "run"), "--set", override)
    assert_user_error(result, "algorithm.replay_buffer.capacity", "100000000000 transitions", "GiB",
                      "memory available on this machine", "lower the capacity")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_eval_refuses_absurd_episodes_and_learning_starts_beyond_the_run_is_warned(tmp_path):
    """A DQN run shorter than its learning_starts trains nothing: one warning line, and the run still ends
    (a short trial may mean it). eval's --episodes has the bound eval.episodes has, in one line."""
    out = tmp_path / "run"
    result = run_cli("run", str(DQN), "--out", str(out), "--set", "run.total_frames=512", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlplug: warning: algorithm.learning_starts = 1000"), lines
    assert "run.total_frames = 512" in lines[0] and "nothing is learned" in lines[0]
    refused = run_cli("eval", str(out), "--episodes", "100000000000")
    assert_user_error(refused, "--episodes", "at most 100000")
    evaluated = run_cli("eval", str(out), "--episodes", "2")  # no training here: no warning about learning
    assert evaluated.returncode == 0 and not evaluated.stderr.strip(), evaluated.stderr


def test_a_nan_reward_is_blamed_on_the_env_not_the_learning_rate(tmp_path, install):
    """An env whose rewards turn NaN made the loss NaN, and the line advised a lower learning rate: now the line
    names the env and says the learning rate is not the cause; the run keeps its last good checkpoint."""
    where = install({"poisoned": poisoned_env_plugin("CartPole-v1", "poisoned-cartpole", after_steps=300)})
    recipe = tmp_path / "poisoned.toml"
    recipe.write_text(CANONICAL.read_text().replace('use = "gym"\nid = "CartPole-v1"\nnum_envs = 8',
                                                    'use = "poisoned-cartpole"\npoisoned_seed = 1'))
    out = tmp_path / "run"
    result = rlplug_cli("run", str(recipe), "--out", str(out), "--set", "run.seed=1", "--set",
                        "run.total_frames=2048", "--set", "run.checkpoint_every_frames=256", "--set", "eval.episodes=1",
                        path=where, timeout=300)
    line = assert_user_error(result, "training diverged", "the reward env 'poisoned-cartpole' gave (nan)",
                             "the learning rate is not the cause", "the last good checkpoint is")
    assert "try a lower algorithm.lr" not in line
    assert torch.load(out / "checkpoint.pt", weights_only=True)["frames"] == 256


def test_a_replay_buffer_beyond_the_memory_available_is_refused(tmp_path):
    """Checked against the machine's physical memory, a buffer that fits it but not what the other processes
    leave (4e8 CartPole transitions, 21.6 GB, on a 23 GB machine) was accepted, and the run swapped as it filled
    deaf to Ctrl-C: now the memory available is the bound."""
    capacity = int(available_memory() * 1.25 / 54) + 1  # a CartPole transition: about 54 bytes
    override = f'algorithm.replay_buffer={{use="uniform", capacity={capacity}}}'
    result = run_cli("run", str(DQN), "--out", str(tmp_path / "run"), "--set", override)
    assert_user_error(result, "algorithm.replay_buffer.capacity", f"{capacity} transitions",
                      "memory available on this machine", "lower the capacity")
    assert not (tmp_path / "run").exists()


@pytest.mark.xdist_group("ray")
def test_more_ray_workers_than_the_memory_holds_are_refused_before_any_starts(tmp_path):
    """64 workers on a 2-core machine started for minutes, saying nothing: each worker is a process about as
    large as the run's own, so more than the memory available holds are refused before Ray starts one."""
    pytest.importorskip("ray")
    workers = available_memory() // 2**27 + 1  # a process that imports torch takes well over 128 MiB
    result = run_cli("run", str(ROOT / "recipes" / "cartpole-impala-ray.toml"), "--out", str(tmp_path / "run"),
                     "--set", f"runner.workers={workers}", "--set", "run.total_frames=512", timeout=120)
    assert_user_error(result, "runner.workers", f"{workers} workers", "GiB of memory available", "use fewer workers")
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_holds_the_transitions_stored_not_the_buffers_capacity(tmp_path):
    """torch.save wrote the whole ring behind the slice of stored rows: a buffer of 4e8 (13.6 GB) wrote that
    much at its first checkpoint, deaf to Ctrl-C, from the first frames on. Now a checkpoint grows with the
    transitions held."""
    out = tmp_path / "run"
    result = run_cli("run", str(ROOT / "recipes" / "pendulum-sac.toml"), "--out", str(out),
                     "--set", 'algorithm.replay_buffer={use="uniform", capacity=5000000}',  # 170 MB of slots
                     "--set", "run.total_frames=200", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    assert (out / "checkpoint.pt").stat().st_size < 5_000_000  # 200 transitions and the networks
    state = torch.load(out / "checkpoint.pt", weights_only=True)["algorithm"]
    stored = [value for value in state.values() if isinstance(value, dict) and "capacity" in value]
    assert stored and stored[0]["len"] == 200 and stored[0]["data"]["observation"].shape[0] == 200
