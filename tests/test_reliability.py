"""Nothing lost on a kill, a signal or a NaN; checkpoints are data, never code; no secrets in run files.

The kill and signal tests run the real CLI in a subprocess and send it real signals.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import signal
import time
from pathlib import Path

import pytest
import torch
from conftest import CANONICAL, ROOT, run_cli, start_cli, wait_for

import rlplug

#: A small run that checkpoints often, with running statistics to restore too.
SMALL = ["--set", "run.total_frames=12288", "--set", "run.checkpoint_every_frames=2048", "--set", "eval.every_frames=0",
         "--set", "eval.episodes=2", "--set", "env.normalize_observations='running'",
         "--set", "env.normalize_rewards=true"]

#: Whole runs and subprocesses: the full suite's, not the fast tier's.
pytestmark = pytest.mark.slow


def start(out: Path, *extra: str):
    return start_cli("run", str(CANONICAL), "--out", str(out), *SMALL, *extra)


def final_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    return {**{f"policy.{k}": v for k, v in state["algorithm"]["policy"].items()},
            **{f"critic.{k}": v for k, v in state["algorithm"]["critic"].items()},
            **{f"env.{k}": torch.as_tensor(v) for k, v in state["env"].items()}}


def test_killed_and_resumed_run_ends_exactly_where_an_uninterrupted_one_does(tmp_path):
    straight = start(tmp_path / "straight")
    assert straight.wait(timeout=300) == 0, straight.communicate()

    killed = start(tmp_path / "killed")
    wait_for(tmp_path / "killed" / "checkpoints" / f"frames-{4096:012d}.pt", killed)
    killed.send_signal(signal.SIGKILL)  # no handler, no goodbye: whatever was on disk is all there is
    killed.wait(timeout=30)
    resumed = run_cli("resume", str(tmp_path / "killed"))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout

    expected, actual = final_parameters(tmp_path / "straight"), final_parameters(tmp_path / "killed")
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    summary = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] == 12288
    with (tmp_path / "killed" / "metrics.csv").open() as f:  # rows logged after the checkpoint were dropped
        frames = [int(line.split(",")[0]) for line in f.readlines()[1:]]
    assert frames == sorted(frames) and len([f for f in frames if f == 4096]) <= 2  # an update row and an eval row


def flat_tensors(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    found = {}
    for key, value in state.items():
        if isinstance(value, dict):
            found.update(flat_tensors(value, f"{prefix}{key}."))
        elif torch.is_tensor(value):
            found[f"{prefix}{key}"] = value
    return found


@pytest.mark.parametrize("recipe", ["pendulum-sac", "pendulum-ddpg"])
def test_an_off_policy_run_resumed_from_its_checkpoint_ends_where_one_in_one_go_does(tmp_path, recipe):
    """Everything an off-policy update depends on is in the checkpoint: the replay, the noise, the entropy
    coefficient, the optimisers, the random streams (the envs restart from the checkpoint's seed either way)."""
    changes = {"run.total_frames": 640, "run.checkpoint_every_frames": 320, "eval.every_frames": 0,
               "eval.episodes": 1, "algorithm.learning_starts": 100, "algorithm.random_frames": 100,
               "loggers": [{"use": "csv"}]}
    path = ROOT / "recipes" / f"{recipe}.toml"
    straight = rlplug.Agent.from_recipe(path, out=tmp_path / "straight", **changes)
    straight.train()
    expected = flat_tensors(straight.algorithm.state_dict())
    straight.close()
    first = rlplug.Agent.from_recipe(path, out=tmp_path / "split", **changes)
    first.train(max_frames=320)
    first.close()
    resumed = rlplug.Agent.load(tmp_path / "split" / "checkpoint.pt", out=tmp_path / "resumed")
    resumed.train()
    actual = flat_tensors(resumed.algorithm.state_dict())
    resumed.close()
    assert expected.keys() == actual.keys()
    assert [name for name in expected if not torch.equal(expected[name], actual[name])] == []


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_with_a_checkpoint_and_says_how_to_resume(tmp_path, sig, status):
    out = tmp_path / "run"
    process = start(out, "--set", "run.total_frames=10000000")
    wait_for(out / "metrics.csv", process)
    started = time.monotonic()
    process.send_signal(sig)
    stdout, stderr = process.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert process.returncode == status, stderr
    assert f"python -m rlplug resume {out}" in stderr and "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == sig.name
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["frames"] == summary["frames"] > 0


@pytest.mark.parametrize("signals, window, stops_at_once", [
    ([signal.SIGTERM, signal.SIGTERM], None, False),  # delivered twice: pkill or a scheduler, and rlplug bench
    ([signal.SIGTERM, signal.SIGTERM], 0.0, True),  # sent again once the window has passed
    ([signal.SIGINT, signal.SIGINT], None, True),  # Ctrl-C twice
], ids=["sigterm-twice-at-once", "sigterm-again-later", "sigint-twice"])
def test_a_second_signal_stops_at_once_but_a_sigterm_delivered_twice_keeps_the_checkpoint(
        tmp_path, monkeypatch, signals, window, stops_at_once):
    """``rlplug bench --jobs`` stopped by ``pkill -f "rlplug bench"`` (its runs got the SIGTERM from pkill and
    again from the bench) lost a run's progress since its last checkpoint: the second SIGTERM stopped it at
    once. Both signals reach the run here during its first collection, one right after the other."""
    import os

    from rlplug import recipe as recipes
    from rlplug.run import signals as signal_rules
    from rlplug.run import start
    from rlplug.run.trainer import Run

    if window is not None:
        monkeypatch.setattr(signal_rules, "REPEATED_SIGTERM_S", window)
    out = tmp_path / "run"
    run = Run.build(recipes.load(CANONICAL, ["run.total_frames=2048", "eval.episodes=1"]), out)
    collect = run.collector.collect

    def signalled_then_collected():
        for sig in signals:
            os.kill(os.getpid(), sig)  # Python runs each handler before the next line
        run.collector.collect = collect
        return collect()

    run.collector.collect = signalled_then_collected
    if stops_at_once:
        with pytest.raises(KeyboardInterrupt):
            start.until_done_or_stopped(run)
        return
    try:
        status = start.until_done_or_stopped(run)
    except KeyboardInterrupt:  # not let through: pytest would take it for the user's and end the session
        pytest.fail("the SIGTERM delivered twice stopped the run at once, without its checkpoint")
    assert status == 143
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM"
    assert torch.load(out / "checkpoint.pt", weights_only=True)["frames"] == summary["frames"]


@pytest.mark.parametrize("signals, window, stops_at_once", [
    ([signal.SIGTERM, signal.SIGTERM], None, False),
    ([signal.SIGTERM, signal.SIGTERM], 0.0, True),
    ([signal.SIGINT, signal.SIGINT], None, True),
], ids=["sigterm-twice-at-once", "sigterm-again-later", "sigint-twice"])
def test_the_bench_between_runs_reads_a_second_signal_as_a_run_does(monkeypatch, signals, window, stops_at_once):
    """The bench's own handler (between runs, and ``--jobs`` handing a signal on) took any second signal for
    "stop at once", so ``pkill -f "rlplug bench"`` twice cut the bench short while it built the next run."""
    import os

    from rlplug.run import bench
    from rlplug.run import signals as signal_rules

    if window is not None:
        monkeypatch.setattr(signal_rules, "REPEATED_SIGTERM_S", window)
    with bench.between_runs().installed() as stop:
        try:
            for sig in signals:
                os.kill(os.getpid(), sig)
        except KeyboardInterrupt:
            assert stops_at_once, "a SIGTERM delivered twice stopped the bench at once"
        else:
            assert not stops_at_once, "a second signal did not stop the bench at once"
    assert stop.signal == signals[0].name


def test_checkpoints_keep_the_last_k_and_never_leave_temporary_files(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), *SMALL, "--set", "run.keep_checkpoints=2")
    assert result.returncode == 0, result.stderr
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == [f"frames-{10240:012d}.pt", f"frames-{12288:012d}.pt"]
    assert not list(out.rglob(".*.tmp"))


def test_tampered_checkpoints_are_refused_never_unpickled(tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli("run", str(CANONICAL), "--out", str(run_dir), "--set", "run.total_frames=512",
                   "--set", "eval.episodes=1").returncode == 0
    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (run_dir / "checkpoint.pt").write_bytes(pickle.dumps({"format": 1, "payload": Payload()}))
    result = run_cli("resume", str(run_dir))
    assert result.returncode == 2 and "not a readable rlplug checkpoint" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not marker.exists(), "the checkpoint's pickled code must never run"
    with pytest.raises(rlplug.UserError, match="not a readable rlplug checkpoint"):
        rlplug.Agent.load(run_dir / "checkpoint.pt", out=tmp_path / "x")
    (run_dir / "checkpoint.pt").write_bytes(b"\x00 not a checkpoint")
    assert run_cli("resume", str(run_dir)).returncode == 2
    assert run_cli("resume", str(tmp_path / "nowhere")).returncode == 2


def test_nan_stops_training_with_a_clear_error_and_keeps_the_last_good_checkpoint(tmp_path):
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", run={"total_frames": 4096,
                                     "checkpoint_every_frames": 512}, eval={"episodes": 1})
    agent.train(max_frames=1024)
    good = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    with torch.no_grad():
        next(agent.run.algorithm.critic.parameters()).fill_(float("nan"))
    with pytest.raises(rlplug.UserError, match=r"training diverged: the loss is not finite at iteration \d+"):
        agent.train()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "diverged"
    kept = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert kept["frames"] == good["frames"]
    assert all(torch.isfinite(v).all() for v in kept["algorithm"]["critic"].values())


def test_an_undefined_explained_variance_is_not_a_divergence(tmp_path):
    """All value targets of a batch equal (a critic saturated on a solved task) leave the explained variance
    undefined, NaN: training goes on. A NaN loss reported the same way still stops it."""
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", run={"total_frames": 2048},
                                     eval={"episodes": 1})
    algorithm = agent.run.algorithm
    update = algorithm.update
    algorithm.update = lambda batch: {**update(batch), "explained_variance": float("nan")}
    assert agent.train(max_frames=512)["status"] == "paused"
    algorithm.update = lambda batch: {**update(batch), "loss_value": float("nan")}
    with pytest.raises(rlplug.UserError, match="training diverged: loss_value is not finite"):
        agent.train(max_frames=512)


def test_unwritable_output_and_missing_env_packages_fail_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run_cli("run", str(CANONICAL), "--out", str(blocker / "run"))
    assert result.returncode == 2 and "cannot write" in result.stderr and "Traceback" not in result.stderr
    # an env whose simulator this venv lacks (benchmark venvs may have Box2D or MuJoCo; the test venv has neither)
    missing = [env_id for env_id, module in (("LunarLander-v3", "Box2D"), ("HalfCheetah-v5", "mujoco"))
               if getattr(importlib.util.find_spec(module), "origin", None) is None]  # none, or a leftover folder
    if not missing:
        pytest.skip("Box2D and MuJoCo are both installed here: no env with a missing package to try")
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "ll"), "--set", f"env.id={missing[0]}")
    assert result.returncode == 2 and "env.id" in result.stderr and "not installed" in result.stderr
    assert not (tmp_path / "ll").exists()


def test_run_files_hold_no_secrets_from_the_environment(tmp_path):
    secret = "sk-do-not-leak-0123456789"
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.total_frames=512",
                     "--set", "eval.episodes=1", env={"WANDB_API_KEY": secret, "AWS_SECRET_ACCESS_KEY": secret})
    assert result.returncode == 0, result.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
