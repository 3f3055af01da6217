"""Faults behind the README's reliability promises, made real: bytes flipped in a checkpoint, checkpoints that
load but are wrong, two runs on one directory, a kill before the first checkpoint or between a write and its
rename, a disk that fills up (the kernel's file-size limit, RLIMIT_FSIZE, makes writes fail as a full disk
does), a recipe.toml edited before ``resume``. Every one goes through the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import CANONICAL, ROOT, SHORT, run_cli
from test_cli import assert_user_error
from test_reliability import wait_for

#: Whole runs and subprocesses: the full suite's, not the fast tier's.
pytestmark = pytest.mark.slow

def cli_with(*args: str, file_size: int | None = None) -> subprocess.CompletedProcess:
    """``python -m rlplug ARGS``; ``file_size``: no file may grow beyond that many bytes (writes fail EFBIG)."""
    def limit():
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}
    return subprocess.run([sys.executable, "-m", "rlplug", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, preexec_fn=limit)


def rewritten(path: Path, change) -> None:
    """The checkpoint at ``path`` changed by ``change(state)`` and sealed again, digest and all: a checkpoint a
    buggy writer could have made, not a damaged one."""
    from rlplug.run.checkpoints import sealed

    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(sealed({k: v for k, v in state.items() if k not in ("format", "digest")}), path)


def assert_refused_by_resume_and_eval(run_dir: Path, *fragments: str, env: dict | None = None) -> None:
    for command in ("resume", "eval"):
        assert_user_error(run_cli(command, str(run_dir), env=env), str(run_dir / "checkpoint.pt"), *fragments)


def test_a_flipped_byte_of_tensor_data_is_refused(run_dir):
    path = run_dir / "checkpoint.pt"
    with zipfile.ZipFile(path) as archive:
        tensor = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= 256)
    raw = bytearray(path.read_bytes())
    name, extra = struct.unpack("<HH", raw[tensor.header_offset + 26:tensor.header_offset + 30])
    raw[tensor.header_offset + 30 + name + extra + 7] ^= 1  # one bit of the stored numbers
    path.write_bytes(raw)
    torch.load(path, weights_only=True)  # the file itself still loads: only the digest can tell
    assert_refused_by_resume_and_eval(run_dir, "does not match its digest")


def first_weight(state) -> str:
    return next(k for k in state["algorithm"]["policy"] if k.endswith("weight"))


@pytest.mark.parametrize("change, fragments", [
    (lambda s: s["algorithm"]["policy"][first_weight(s)].view(-1).__setitem__(0, float("nan")), ["not all finite"]),
    (lambda s: s["algorithm"]["policy"][first_weight(s)].view(-1).__setitem__(0, float("inf")), ["not all finite"]),
    (lambda s: s["algorithm"].pop("optimiser"), ["not a usable rlplug checkpoint"]),
    (lambda s: s.pop("rng"), ["it has no 'rng' entry"]),
    (lambda s: s["algorithm"]["policy"].__setitem__(first_weight(s), torch.zeros(3, 3)), ["do not fit its recipe"]),
    (lambda s: s.__setitem__("frames", "512"), ["'frames' is str"]),
    (lambda s: s["algorithm"]["optimiser"]["state"][0].__setitem__("exp_avg", torch.zeros(7)), ["exp_avg has shape"]),
])
def test_checkpoints_that_load_but_are_wrong_are_one_line_for_resume_and_eval(run_dir, change, fragments):
    rewritten(run_dir / "checkpoint.pt", change)
    assert_refused_by_resume_and_eval(run_dir, *fragments)


def test_a_stored_recipe_whose_networks_differ_from_the_weights_is_one_line(run_dir):
    rewritten(run_dir / "checkpoint.pt", lambda s: s["recipe"]["algorithm"]["policy"].__setitem__("hidden", [32, 32]))
    assert_user_error(run_cli("eval", str(run_dir)), str(run_dir / "checkpoint.pt"), "do not fit its recipe")
    # resume sees first that the directory's recipe.toml says otherwise
    assert_user_error(run_cli("resume", str(run_dir)),
                      "algorithm.policy.hidden (the file's [64, 64], the run's [32, 32])",
                      "cannot change for trained weights")
    (run_dir / "recipe.toml").unlink()
    assert_user_error(run_cli("resume", str(run_dir)), str(run_dir / "checkpoint.pt"), "do not fit its recipe")


def test_a_stored_recipe_never_imports_a_module(run_dir, tmp_path):
    marker = tmp_path / "imported"
    (tmp_path / "sneaky.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    rewritten(run_dir / "checkpoint.pt", lambda s: s["recipe"]["env"].__setitem__("id", "sneaky:CartPole-v1"))
    assert_refused_by_resume_and_eval(run_dir, "env.id", "names a module", env={"PYTHONPATH": str(tmp_path)})
    assert not marker.exists()


@pytest.mark.parametrize("garbage", [b"frames,loss\n512,0.5\n\x00\x00\x00\x00\x00\n", b"\x89PNG\r\n not a csv at all"])
def test_a_metrics_file_that_is_not_rlplugs_stops_resume_in_one_line(run_dir, garbage):
    (run_dir / "metrics.csv").write_bytes(garbage)
    assert_user_error(run_cli("resume", str(run_dir), "--set", "run.total_frames=2048"),
                      str(run_dir / "metrics.csv"), "move it aside")


def test_two_runs_started_at_once_on_one_directory_one_is_refused(tmp_path):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}
    runs = [subprocess.Popen([sys.executable, "-m", "rlplug", "run", str(CANONICAL), "--out", str(out), *SHORT,
                              "--set", f"run.seed={seed}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    results = [(run.wait(timeout=300), run.communicate()[1]) for run in runs]
    assert sorted(code for code, _ in results) == [0, 2], results
    refused = next(stderr for code, stderr in results if code == 2)
    assert len(refused.strip().splitlines()) == 1 and ("another run is training" in refused or "not empty" in refused)
    winner = next(seed for (code, _), seed in zip(results, (1, 2)) if code == 0)
    assert f"seed = {winner}" in (out / "recipe.toml").read_text()
    assert torch.load(out / "checkpoint.pt", weights_only=True)["recipe"]["run"]["seed"] == winner
    assert b"\x00" not in (out / "metrics.csv").read_bytes()


def test_a_run_killed_before_its_first_checkpoint_resumes_from_frame_0(tmp_path):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}
    process = subprocess.Popen([sys.executable, "-m", "rlplug", "run", str(CANONICAL), "--out", str(out),
                                "--set", "run.total_frames=10000000", "--set", "eval.every_frames=0"],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(out / "metrics.csv", process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert not (out / "checkpoint.pt").exists()
    result = run_cli("resume", str(out), "--set", "run.total_frames=1024", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    assert "from frame 0" in result.stdout and "run.total_frames" in result.stdout
    assert json.loads((out / "summary.json").read_text())["frames"] == 1024


def test_a_full_disk_at_start_leaves_nothing_that_blocks_the_same_out(tmp_path):
    out = tmp_path / "run"
    result = cli_with("run", str(CANONICAL), "--out", str(out), *SHORT, file_size=64)  # recipe.toml is larger
    assert_user_error(result, str(out / "recipe.toml"), "File too large", "nothing of the run was written")
    assert not out.exists()
    assert run_cli("run", str(CANONICAL), "--out", str(out), *SHORT).returncode == 0


def test_a_full_disk_during_a_checkpoint_write_keeps_every_file_whole_and_resume_goes_on(run_dir):
    """The write fails part-way (the kernel refuses the bytes beyond the limit): the half-written file is
    removed, the checkpoints already there are untouched, and ``resume`` goes on once space is back."""
    before = (run_dir / "checkpoint.pt").read_bytes()
    result = cli_with("resume", str(run_dir), "--set", "run.total_frames=2048", file_size=len(before) // 2)
    line = assert_user_error(result, "File too large", f"python -m rlplug resume {run_dir}")
    assert str(run_dir / "checkpoints" / f"frames-{1536:012d}.pt") in line and "last checkpoint is kept" in line
    assert not list(run_dir.rglob("*.tmp"))
    assert (run_dir / "checkpoint.pt").read_bytes() == before
    for path in run_dir.rglob("*.pt"):  # nothing half-written anywhere
        assert torch.load(path, weights_only=True)["frames"] in (512, 1024), path
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    assert "total_frames = 1024" in (run_dir / "recipe.toml").read_text()  # the recipe of the last checkpoint
    result = run_cli("resume", str(run_dir), "--set", "run.total_frames=2048")
    assert result.returncode == 0 and "at frame 1024" in result.stdout, result.stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    assert "total_frames = 2048" in (run_dir / "recipe.toml").read_text()


#: Runs the CLI and kills the process (SIGKILL) when it is about to rename its second finished
#: ``.checkpoint.pt.tmp`` over checkpoint.pt: the instant between a complete write and its rename.
KILL_AT_RENAME = """
import os, runpy, signal, sys
renames = []
def hook(event, args):
    if event == "os.rename" and str(args[0]).endswith(".checkpoint.pt.tmp"):
        renames.append(args)
        if len(renames) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
sys.argv = ["rlplug", *sys.argv[1:]]
runpy.run_module("rlplug", run_name="__main__")
"""


def test_a_kill_between_a_checkpoint_write_and_its_rename_loses_nothing(tmp_path):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}
    killed = subprocess.run([sys.executable, "-c", KILL_AT_RENAME, "run", str(CANONICAL), "--out", str(out), *SHORT,
                             "--set", "run.total_frames=2048"], cwd=ROOT, env=env, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (out / ".checkpoint.pt.tmp").exists()  # written in full, never renamed
    assert torch.load(out / "checkpoint.pt", weights_only=True)["frames"] == 512
    result = run_cli("resume", str(out))
    assert result.returncode == 0 and "at frame 512" in result.stdout, result.stderr
    assert not list(out.rglob("*.tmp"))
    assert json.loads((out / "summary.json").read_text())["frames"] == 2048


def test_resume_never_overwrites_an_edited_recipe_and_says_what_differs(run_dir):
    recipe = run_dir / "recipe.toml"
    edited = "# my notes\n" + recipe.read_text().replace("total_frames = 1024", "total_frames = 2048")
    recipe.write_text(edited)
    line = assert_user_error(run_cli("resume", str(run_dir)), str(recipe), "run.total_frames",
                             "--set 'run.total_frames=2048'")
    assert "the file's 2048, the run's 1024" in line and recipe.read_text() == edited
    result = run_cli("resume", str(run_dir), "--set", "run.total_frames=2048")
    assert result.returncode == 0 and "with run.total_frames changed" in result.stdout, result.stderr
    assert recipe.read_text() == edited
    assert json.loads((run_dir / "summary.json").read_text())["frames"] == 2048

    recipe.write_text(re.sub(r"hidden = \[\s*64,\s*64,\s*\]", "hidden = [128, 128]", edited, count=1))
    assert_user_error(run_cli("resume", str(run_dir)), "algorithm.policy.hidden", "cannot change for trained weights")
    recipe.write_text(edited)
    assert_user_error(run_cli("resume", str(run_dir), "--set", "algorithm.lr=0.1"), "--set algorithm.lr",
                      "cannot change when resuming")
