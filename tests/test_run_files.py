"""A run's own files, through the real command line: a change ``rlplug set`` made is in force after any resume
(a kill before the next checkpoint included), a request reaches a run in the middle of a long update, a finished
run takes none, and links in place of the run's files never take its writes elsewhere."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import CANONICAL, SHORT, copied_run, one_line_error, run_cli, start_cli, trained_run, wait_for

from rlplug.run import checkpoints
from rlplug.run.directory import in_use

pytestmark = pytest.mark.slow  # each test trains, or runs the command line


@pytest.fixture(scope="module")
def constant_lr(tmp_path_factory) -> Path:
    """A finished short run (1024 frames) whose learning rate stays as set."""
    return trained_run(tmp_path_factory, "constant", "--set", "algorithm.anneal_lr=false")


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "parameters.jsonl").read_text().splitlines()]


def optimiser_lr(checkpoint: Path) -> float:
    return checkpoints.load_checkpoint(checkpoint)["algorithm"]["optimiser"]["param_groups"][0]["lr"]


def wait_until(condition, process, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


# ---- a change the record calls made is in force after any resume

def test_a_change_taken_before_a_kill_is_in_force_after_resume(constant_lr, tmp_path):
    """Resumed with no periodic checkpoints, the run takes ``set``, is killed (SIGKILL) before any checkpoint holds
    the change, and a resume goes on with it, as parameters.jsonl says, and records a later change's old value."""
    out = copied_run(constant_lr, tmp_path)
    training = start_cli("resume", str(out), "--set", "run.total_frames=100000000",
                         "--set", "run.checkpoint_every_frames=0")
    try:
        wait_until(lambda: in_use(out), training, 120, "the resume never held its directory")
        asked = run_cli("set", str(out), "algorithm.lr=2e-4")
        assert asked.returncode == 0, asked.stderr
        wait_until(lambda: (out / "parameters.jsonl").exists() and not list((out / "set-requests").glob("*.json")),
                   training, 120, "the request was never taken")
    finally:
        os.kill(training.pid, signal.SIGKILL)  # no handler, no checkpoint: what is on disk is all there is
        training.communicate(timeout=60)
    assert checkpoints.load_checkpoint(out / "checkpoint.pt")["frames"] == 1024  # the change is in no checkpoint
    assert [(r["name"], r["new"]) for r in records(out)] == [("algorithm.lr", 2e-4)]

    resumed = run_cli("resume", str(out), "--set", "run.total_frames=1280")
    assert resumed.returncode == 0, resumed.stderr
    assert "algorithm.lr 0.001 -> 0.0002 again" in resumed.stdout, resumed.stdout
    state = checkpoints.load_checkpoint(out / "checkpoint.pt")
    assert state["frames"] == 1280 and state["parameters"] == {"lr": 2e-4}
    assert optimiser_lr(out / "checkpoint.pt") == pytest.approx(2e-4)
    assert len(records(out)) == 1  # made again, not recorded twice

    again = run_cli("resume", str(out), "--set", "run.total_frames=1536")  # the checkpoint holds it now
    assert again.returncode == 0 and "again" not in again.stdout, again.stdout
    assert optimiser_lr(out / "checkpoint.pt") == pytest.approx(2e-4)


def test_a_change_taken_by_a_run_killed_before_its_first_checkpoint_is_made_again(tmp_path):
    """A run with no checkpoint starts over from its recipe on resume: the change recorded is made again."""
    out = tmp_path / "run"
    training = start_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.total_frames=100000000",
                         "--set", "run.checkpoint_every_frames=0", "--set", "eval.every_frames=0",
                         "--set", "algorithm.anneal_lr=false")
    try:
        wait_for(out / "metrics.csv", training, timeout=120)
        assert run_cli("set", str(out), "algorithm.lr=3e-4").returncode == 0
        wait_until(lambda: (out / "parameters.jsonl").exists(), training, 120, "the request was never taken")
    finally:
        os.kill(training.pid, signal.SIGKILL)
        training.communicate(timeout=60)
    assert not (out / "checkpoint.pt").exists()
    resumed = run_cli("resume", str(out), "--set", "run.total_frames=512", *SHORT[2:])
    assert resumed.returncode == 0, resumed.stderr
    assert "algorithm.lr 0.001 -> 0.0003 again" in resumed.stdout, resumed.stdout
    assert checkpoints.load_checkpoint(out / "checkpoint.pt")["parameters"] == {"lr": 3e-4}
    assert optimiser_lr(out / "checkpoint.pt") == pytest.approx(3e-4)


# ---- a request reaches a run in the middle of an update

def test_a_request_ends_a_long_update_between_gradient_steps(tmp_path):
    """10,000 epochs of 32 minibatches make one update of minutes; ``set algorithm.epochs=1`` is taken within
    seconds (the update ends after its current gradient step), and the next updates are short."""
    out = tmp_path / "run"
    training = start_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.total_frames=100000000",
                         "--set", "algorithm.epochs=10000", "--set", "algorithm.minibatch_size=8",
                         "--set", "run.checkpoint_every_frames=0", "--set", "eval.every_frames=0")
    try:
        wait_until(lambda: out.is_dir() and in_use(out), training, 120, "the run never held its directory")
        time.sleep(3)  # the first update under way (metrics.csv has its first row once it is done)
        asked = run_cli("set", str(out), "algorithm.epochs=1")
        assert asked.returncode == 0, asked.stderr
        asked_at = time.monotonic()
        wait_until(lambda: (out / "parameters.jsonl").exists(), training, 60, "the update kept the request waiting")
        assert time.monotonic() - asked_at < 60
        wait_until(lambda: len((out / "metrics.csv").read_text().splitlines()) > 5, training, 60,
                   "the updates after the change are not short")
    finally:
        training.send_signal(signal.SIGINT)
        stdout, stderr = training.communicate(timeout=120)
    assert training.returncode == 130, stderr
    assert "algorithm.epochs 10000 -> 1 (rlplug set)" in stdout
    assert [(r["name"], r["new"]) for r in records(out)] == [("algorithm.epochs", 1)]


def test_set_refuses_the_values_run_refuses(constant_lr, tmp_path):
    """An update of 10^9 epochs: refused by set as by run, in one line, with nothing written."""
    out = copied_run(constant_lr, tmp_path)
    (out / "summary.json").unlink()  # as a run killed mid-training, which set would leave its request for
    run_refusal = one_line_error(run_cli("run", str(CANONICAL), "--out", str(tmp_path / "new"), *SHORT,
                                         "--set", "algorithm.epochs=1e9"), "algorithm.epochs")
    set_refusal = one_line_error(run_cli("set", str(out), "algorithm.epochs=1e9"), "algorithm.epochs")
    assert run_refusal.split("algorithm.epochs", 1)[1] == set_refusal.split("algorithm.epochs", 1)[1]
    assert not (out / "set-requests").exists() and not (tmp_path / "new").exists()


# ---- a finished run takes no request

def test_set_on_a_finished_run_says_it_would_never_take_effect(constant_lr, tmp_path):
    out = copied_run(constant_lr, tmp_path)
    one_line_error(run_cli("set", str(out), "algorithm.lr=2e-4"), str(out), "the run has finished",
                   "would never take effect", "--set run.total_frames=")
    assert not (out / "set-requests").exists()


# ---- links in place of the run's files never take its writes elsewhere

def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_linked_metrics_file_is_refused_and_the_file_it_points_to_left_whole(constant_lr, tmp_path):
    """Resume would cut the rows after its checkpoint from the file: through the link, another run's."""
    out = copied_run(constant_lr, tmp_path)
    other = tmp_path / "other.csv"
    rows = (out / "metrics.csv").read_text().splitlines()
    other.write_text("\n".join([*rows, *(f"{frames}" + "," * (rows[0].count(",")) for frames in
                                         range(2048, 2048 + 512 * 20, 512))]) + "\n")
    before = other.read_bytes()
    (out / "metrics.csv").unlink()
    (out / "metrics.csv").symlink_to(other)
    one_line_error(run_cli("resume", str(out), "--set", "run.total_frames=2048"), "metrics.csv",
                   "a symbolic link")
    assert other.read_bytes() == before


@pytest.mark.parametrize("name", ["checkpoints", "parameters.jsonl", "set-requests"])
def test_a_linked_folder_or_record_is_refused_by_resume(constant_lr, tmp_path, name):
    out = copied_run(constant_lr, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    if name == "parameters.jsonl":
        elsewhere.write_text('{"frame": 0, "name": "algorithm.lr", "old": 0.001, "new": 0.5, "source": "x"}\n')
    else:
        elsewhere.mkdir()
        if name == "checkpoints":  # another run's, with higher frame numbers than this run's
            (elsewhere / f"frames-{10 ** 9:012d}.pt").write_bytes(b"theirs")
        else:
            (elsewhere / "00000000000000000001-1.json").write_text('{"changes": {"lr": 0.5}, "source": "x"}')
    if (out / name).is_dir():
        for child in (out / name).iterdir():
            child.unlink()
        (out / name).rmdir()
    (out / name).symlink_to(elsewhere)
    theirs = snapshot(tmp_path / "elsewhere") if elsewhere.is_dir() else elsewhere.read_bytes()
    ours = snapshot(out)
    one_line_error(run_cli("resume", str(out), "--set", "run.total_frames=2048"), f"{out / name}",
                   "a symbolic link")
    assert (snapshot(elsewhere) if elsewhere.is_dir() else elsewhere.read_bytes()) == theirs
    assert snapshot(out) == ours


def test_set_refuses_a_linked_requests_folder(constant_lr, tmp_path):
    out = copied_run(constant_lr, tmp_path)
    (out / "summary.json").unlink()  # as a run killed mid-training: set would leave its request for resume
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "set-requests").symlink_to(elsewhere)
    one_line_error(run_cli("set", str(out), "algorithm.lr=2e-4"), "set-requests", "a symbolic link")
    assert not any(elsewhere.iterdir())
