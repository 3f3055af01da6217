"""What a run writes stays in its directory and what it reads is checked: a logger's file name, checkpoints that
claim an old format, non-finite or impossible statistics, a refused resume that must change nothing, an export
that must carry the env's normalisation, and the atomic-write and directory-lock guarantees aimed at directly.
Everything goes through the real CLI in a subprocess, on real files."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import (
    CANONICAL,
    ROOT,
    SHORT,
    cli_environment,
    copied_run,
    one_line_error,
    run_cli,
    start_cli,
    trained_run,
    wait_for,
)

#: Whole runs and subprocesses: the full suite's, not the fast tier's.
pytestmark = pytest.mark.slow

def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# ---- item 4: a logger's file stays inside its run directory, checked before the directory exists

BAD_FILENAMES = ["../escaped.csv", "/tmp/rlplug-escaped.csv", "", ".", "..", "sub/metrics.csv", "checkpoint.pt",
                 "summary.json", "recipe.toml", "checkpoints", ".checkpoint.pt.tmp", "parameters.jsonl",
                 "set-requests"]


@pytest.mark.parametrize("filename", BAD_FILENAMES)
def test_a_csv_filename_outside_the_run_or_over_its_files_is_refused_before_the_directory_exists(tmp_path, filename):
    out = tmp_path / "runs" / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT,
                     "--set", f"loggers=[{{use='csv', filename='{filename}'}}]")
    one_line_error(result, "loggers[0].filename", repr(filename))
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "runs" / "escaped.csv").exists()


@pytest.mark.parametrize("second", ["", ", filename='METRICS.csv'"])
def test_two_csv_loggers_of_one_file_are_refused_before_the_directory_exists(tmp_path, second):
    """Each would rewrite the other's rows (once a traceback, and a run directory left behind)."""
    out = tmp_path / "runs" / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT,
                     "--set", f"loggers=[{{use='csv'}}, {{use='console'}}, {{use='csv'{second}}}]")
    one_line_error(result, "loggers", "loggers[0] and loggers[2]", "one file")
    assert not (tmp_path / "runs").exists()


def test_a_csv_filename_is_checked_in_a_recipe_file_and_by_resume_set(run_dir, tmp_path):
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(CANONICAL.read_text().replace('use = "csv"', 'use = "csv"\nfilename = "../stolen.csv"'))
    one_line_error(run_cli("run", str(recipe), "--out", str(tmp_path / "new"), *SHORT), str(recipe),
                   "filename", "'../stolen.csv'")
    assert not (tmp_path / "new").exists()

    before = snapshot(run_dir)
    result = run_cli("resume", str(run_dir), "--set", "run.total_frames=2048",
                     "--set", "loggers=[{use='csv', filename='summary.json'}]")
    one_line_error(result, "filename", "'summary.json'", "a file of the run itself")
    assert snapshot(run_dir) == before

    # a downloaded run whose recipe.toml (and checkpoint's recipe) was made to write elsewhere
    text = (run_dir / "recipe.toml").read_text()
    (run_dir / "checkpoint.pt").unlink()
    (run_dir / "recipe.toml").write_text(text.replace('"metrics.csv"', '"../stolen.csv"'))
    one_line_error(run_cli("resume", str(run_dir)), "filename", "'../stolen.csv'")
    assert not (tmp_path / "stolen.csv").exists()


def test_a_plain_csv_filename_is_written_in_the_run_directory(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT, "--set", "run.total_frames=512",
                     "--set", "loggers=[{use='csv', filename='progress.csv'}]")
    assert result.returncode == 0, result.stderr
    assert (out / "progress.csv").read_text().startswith("frames,")


# ---- item 5: the digest cannot be turned off by the format's byte; no digest, no load without the flag

def as_format_1(path: Path, *, keep_digest: bool, change=None) -> None:
    """The checkpoint at ``path`` rewritten to name format 1; ``keep_digest``: as a one-byte edit of a sealed file
    leaves it (its digest still there), else as a file written before checkpoints carried one."""
    state = torch.load(path, weights_only=True)
    if change is not None:
        change(state)
    state["format"] = 1
    if not keep_digest:
        del state["digest"]
    torch.save(state, path)


def halve_first_weight(state) -> None:
    weight = next(k for k in state["algorithm"]["policy"] if k.endswith("weight"))
    state["algorithm"]["policy"][weight].mul_(0.5)


def test_a_checkpoint_naming_format_1_yet_carrying_a_digest_is_refused_everywhere(run_dir, tmp_path):
    import rlplug

    path = run_dir / "checkpoint.pt"
    as_format_1(path, keep_digest=True, change=halve_first_weight)
    for command in (["resume", str(run_dir)], ["eval", str(run_dir)],
                    ["export", str(run_dir), "--format", "torchscript", "-o", str(tmp_path / "p.pt")],
                    ["eval", str(run_dir), "--allow-unverified"]):
        one_line_error(run_cli(*command), str(path), "names format 1", "yet carries one")
    with pytest.raises(rlplug.UserError, match="names format 1"):
        rlplug.Agent.load(path, out=tmp_path / "loaded", allow_unverified=True)
    assert not (tmp_path / "p.pt").exists() and not (tmp_path / "loaded").exists()


def test_a_checkpoint_without_a_digest_loads_only_with_allow_unverified(run_dir, tmp_path):
    import rlplug

    path = run_dir / "checkpoint.pt"
    as_format_1(path, keep_digest=False)
    for command in (["eval", str(run_dir)], ["resume", str(run_dir)],
                    ["export", str(run_dir), "--format", "torchscript", "-o", str(tmp_path / "p.pt")]):
        one_line_error(run_cli(*command), str(path), "format 1", "--allow-unverified")
    with pytest.raises(rlplug.UserError, match="allow_unverified=True"):
        rlplug.Agent.load(path, out=tmp_path / "refused")
    result = run_cli("eval", str(run_dir), "--allow-unverified")
    assert result.returncode == 0 and "cannot be checked" in result.stderr, result.stderr
    from rlplug.errors import RlplugWarning

    with pytest.warns(RlplugWarning, match="cannot be checked"):
        agent = rlplug.Agent.load(path, out=tmp_path / "loaded", allow_unverified=True)
    agent.close()


# ---- items 9 and 12: every tensor of a checkpoint is checked, and env statistics must be possible

def resealed(path: Path, change) -> None:
    """The checkpoint at ``path`` changed by ``change(state)`` and sealed again, digest and all: what a buggy
    writer could have made, which only the checks of its contents can refuse."""
    from rlplug.run.checkpoints import sealed

    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(sealed({k: v for k, v in state.items() if k not in ("format", "digest")}), path)


def assert_refused_on_every_road(run_dir: Path, tmp_path: Path, *fragments: str, every: bool = True) -> None:
    """``resume``, ``eval`` and ``export`` refuse the run's checkpoint in one line, and so does ``Agent.load``;
    not ``every``: ``eval`` and ``Agent.load`` only (the roads share one check, pinned on every road elsewhere)."""
    import rlplug

    path = run_dir / "checkpoint.pt"
    before = snapshot(run_dir)
    commands = [["resume", str(run_dir)], ["eval", str(run_dir)],
                ["export", str(run_dir), "--format", "torchscript", "-o", str(tmp_path / "policy.pt")]]
    for command in commands if every else commands[1:2]:
        one_line_error(run_cli(*command), str(path), *fragments)
    with pytest.raises(rlplug.UserError) as refused:
        rlplug.Agent.load(path, out=tmp_path / "loaded")
    assert all(fragment in str(refused.value) for fragment in fragments), str(refused.value)
    assert snapshot(run_dir) == before and not (tmp_path / "policy.pt").exists()


def test_nan_in_the_optimiser_state_is_refused(run_dir, tmp_path):
    resealed(run_dir / "checkpoint.pt",
             lambda s: s["algorithm"]["optimiser"]["state"][0]["exp_avg"].view(-1).__setitem__(0, float("nan")))
    assert_refused_on_every_road(run_dir, tmp_path, "algorithm.optimiser.state.0.exp_avg", "not all finite")


VEC_NORM = ["--set", "env.transforms=[{use='VecNorm'}]"]


@pytest.fixture(scope="module")
def vec_norm_trained(tmp_path_factory) -> Path:
    """A finished short run whose observations go through VecNorm."""
    return trained_run(tmp_path_factory, "vec_norm", *VEC_NORM)


@pytest.fixture
def vec_norm_run(vec_norm_trained, tmp_path) -> Path:
    return copied_run(vec_norm_trained, tmp_path)


def vec_norm_statistics(state) -> dict:
    return state["env"]["transforms[0]"]["_extra_state"]


@pytest.mark.parametrize("change, fragments, every", [
    (lambda s: vec_norm_statistics(s)["var.-|-.observation"].__setitem__(0, -1.0), ["var", "is negative"], True),
    (lambda s: vec_norm_statistics(s).__setitem__("count.-|-.observation", torch.tensor(-5)), ["count", "is negative"],
     False),
    (lambda s: vec_norm_statistics(s).__setitem__("loc.-|-.observation", torch.zeros(7)),
     ["loc", "has shape [7], the env's is [4]"], True),
    (lambda s: vec_norm_statistics(s)["var.-|-.observation"].__setitem__(1, float("inf")), ["not all finite"], False),
])
def test_impossible_vec_norm_statistics_are_refused(vec_norm_run, tmp_path, change, fragments, every):
    resealed(vec_norm_run / "checkpoint.pt", change)
    assert_refused_on_every_road(vec_norm_run, tmp_path, *fragments, every=every)


# ---- item 7: a refused resume changes nothing in the directory

@pytest.mark.parametrize("garbage", [b"frames,loss\n512,0.5\n\x00\x00\x00\x00\x00\n", b"\x89PNG\r\n not a csv at all"])
def test_a_refused_resume_leaves_a_finished_run_byte_identical(run_dir, garbage):
    (run_dir / "metrics.csv").write_bytes(garbage)
    before = snapshot(run_dir)
    one_line_error(run_cli("resume", str(run_dir), "--set", "run.total_frames=2048"), str(run_dir / "metrics.csv"),
                   "move it aside")
    assert snapshot(run_dir) == before
    for refused in (["--set", "algorithm.lr=0.5"], ["--set", "run.total_frames=-1"]):
        assert run_cli("resume", str(run_dir), *refused).returncode == 2
        assert snapshot(run_dir) == before


# ---- item 13 (part): a write that fails says what failed and what to do, for the command at hand

@pytest.fixture
def read_only(tmp_path) -> Path:
    """A directory no file can be written in: a read-only one, or /sys for root (who writes anywhere else)."""
    if os.geteuid() == 0:
        yield Path("/sys")
        return
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)


def assert_names_only_the_output(line: str, output: Path) -> None:
    assert f"-o {output}: cannot write" in line and "make it writable, or give another -o" in line, line
    assert "checkpoints already written" not in line and ".partial" not in line and ".tmp" not in line, line


def test_export_and_plot_to_a_read_only_place_say_so_in_one_line(trained, read_only):
    output = read_only / "rlplug-policy.pt"
    line = one_line_error(run_cli("export", str(trained), "--format", "torchscript", "-o", str(output)),
                          "the exported policy")
    assert_names_only_the_output(line, output)
    output = read_only / "rlplug-curve.png"
    line = one_line_error(run_cli("plot", str(trained), "-o", str(output)), "the plot")
    assert_names_only_the_output(line, output)
    assert not output.exists()


def test_a_metrics_file_that_cannot_be_written_is_not_called_a_full_disk(run_dir):
    (run_dir / "metrics.csv").unlink()
    (run_dir / "metrics.csv").mkdir()
    before = snapshot(run_dir)
    line = one_line_error(run_cli("resume", str(run_dir), "--set", "run.total_frames=2048"),
                          str(run_dir / "metrics.csv"), "Is a directory")
    assert "free some space" not in line, line
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("code, advice", [(errno.EACCES, "make it writable"), (errno.EISDIR, "fix that"),
                                          (errno.ENOSPC, "free some space"), (errno.EFBIG, "free some space")])
def test_a_run_stopped_by_a_failed_write_gives_the_advice_for_its_cause(tmp_path, code, advice):
    from types import SimpleNamespace

    from rlplug.run.start import stopped_by

    (tmp_path / "checkpoint.pt").write_bytes(b"")
    error = OSError(code, os.strerror(code), str(tmp_path / "metrics.csv"))
    line = str(stopped_by(error, SimpleNamespace(run_dir=tmp_path, frames=512)))
    assert f"{advice}, then continue with: python -m rlplug resume {tmp_path}" in line, line
    assert line.count("free some space") == (advice == "free some space"), line


# ---- the atomic checkpoint write and the directory lock, each aimed at its guarantee

#: Runs the CLI and kills it (SIGKILL) in the middle of its second write of the latest checkpoint, whatever file
#: that write goes to (checkpoint.pt itself, or a temporary file renamed over it): half the bytes are on disk.
KILL_MID_WRITE = """
import builtins, io, os, runpy, signal, sys

real_open, writes = builtins.open, []


class Torn:
    def __init__(self, handle):
        self.handle = handle

    def write(self, data):
        self.handle.write(data[:len(data) // 2])
        self.handle.flush()
        os.fsync(self.handle.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def torn_open(file, mode="r", *args, **kwargs):
    handle = real_open(file, mode, *args, **kwargs)
    if any(m in mode for m in "wax") and os.path.basename(os.fspath(file)) in ("checkpoint.pt", ".checkpoint.pt.tmp"):
        writes.append(file)
        if len(writes) == 2:
            return Torn(handle)
    return handle


builtins.open = io.open = torn_open
sys.argv = ["rlplug", *sys.argv[1:]]
runpy.run_module("rlplug", run_name="__main__")
"""


def test_a_kill_in_the_middle_of_a_checkpoint_write_leaves_the_previous_one_whole(tmp_path):
    out = tmp_path / "run"
    killed = subprocess.run([sys.executable, "-c", KILL_MID_WRITE, "run", str(CANONICAL), "--out", str(out), *SHORT,
                             "--set", "run.total_frames=2048"], check=False, cwd=ROOT, env=cli_environment(None),
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # killed with half a checkpoint written
    assert torch.load(out / "checkpoint.pt", weights_only=True)["frames"] == 512  # the previous one, whole
    result = run_cli("resume", str(out))
    assert result.returncode == 0 and "at frame 512" in result.stdout, result.stderr
    assert not list(out.rglob(".*.tmp"))


def test_resume_of_a_directory_a_run_is_training_in_is_refused_by_the_lock(tmp_path):
    """The training run is paused (SIGSTOP) while it holds the directory, so that a resume the lock failed to
    refuse would train 512 frames on from its checkpoint and end with exit 0."""
    out = tmp_path / "run"
    training = start_cli("run", str(CANONICAL), "--out", str(out), *SHORT, "--set", "run.total_frames=100000000")
    try:
        wait_for(out / "checkpoint.pt", training)
        training.send_signal(signal.SIGSTOP)
        frames = torch.load(out / "checkpoint.pt", weights_only=True)["frames"]
        before = snapshot(out)
        refused = run_cli("resume", str(out), "--set", f"run.total_frames={frames + 512}")
        one_line_error(refused, str(out), "another run is training in this directory")
        assert snapshot(out) == before
    finally:
        training.send_signal(signal.SIGCONT)
        training.send_signal(signal.SIGTERM)
        training.communicate(timeout=60)
    assert training.returncode == 143


# ---- item 8: export carries the env.transforms' normalisation, or refuses

def test_an_exported_policy_acts_as_the_run_does_with_vec_norm(vec_norm_trained, tmp_path):
    """The run's deterministic policy plays its evaluation env (VecNorm frozen); the same env without its
    transforms, seeded alike and given the same actions, shows the raw observations, on which the ONNX file must
    choose those actions."""
    import numpy as np
    import onnxruntime
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    import rlplug
    from rlplug.core.env_members import as_evaluation_env

    output = tmp_path / "policy.onnx"
    result = run_cli("export", str(vec_norm_trained), "-o", str(output))
    assert result.returncode == 0, result.stderr
    agent = rlplug.Agent.load(vec_norm_trained / "checkpoint.pt", out=tmp_path / "loaded")
    try:
        env = agent.run.eval_env
        as_evaluation_env(env, agent.run.env_statistics())
        with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
            env.set_seed(7)
            played = env.rollout(60, agent.run.algorithm.policy, break_when_any_done=True)
            actions = played["action"]
            steps = iter(range(actions.shape[env.batch_dims]))

            def replay(observation):  # TorchRL hands a plain callable the observation, and sets what it returns
                return actions.select(env.batch_dims, next(steps))

            env.base_env.set_seed(7)
            raw = env.base_env.rollout(actions.shape[env.batch_dims], replay, break_when_any_done=True)
    finally:
        agent.close()
    observations = raw["observation"].reshape(-1, raw["observation"].shape[-1]).numpy().astype(np.float32)
    assert not np.allclose(observations, played["observation"].reshape(observations.shape).numpy())  # normalised
    one_hot = actions.shape[:-1] == raw["observation"].shape[:-1]
    expected = actions.argmax(-1) if one_hot else actions
    session = onnxruntime.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    chosen = session.run(["action"], {"observation": observations})[0]
    assert (chosen == expected.reshape(-1).numpy()).all()
    assert "observation normalisation: included" in result.stdout


@pytest.mark.parametrize("transform, outcome", [
    ("{use='ObservationNorm', loc=[0.5, 0.0, 0.0, 0.0], scale=[2.0, 1.0, 4.0, 1.0], standard_normal=true}",
     "observation normalisation: included"),
    ("{use='CatFrames', N=2}", "env.transforms[0] (CatFrames) changes the observation the policy reads"),
])
def test_export_includes_observation_norm_and_refuses_other_observation_transforms(tmp_path, transform, outcome):
    from onnxruntime import InferenceSession

    out = tmp_path / "run"
    trained = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT, "--set", "run.total_frames=512",
                      "--set", f"env.transforms=[{transform}]")
    assert trained.returncode == 0, trained.stderr
    result = run_cli("export", str(out), "-o", str(tmp_path / "policy.onnx"))
    if "included" not in outcome:
        one_line_error(result, outcome)
        assert not (tmp_path / "policy.onnx").exists()
        return
    assert result.returncode == 0 and outcome in result.stdout, result.stderr
    import numpy as np
    from tensordict import TensorDict

    import rlplug

    raw = torch.tensor([[0.5, 0.1, 0.0, -0.2], [1.5, 0.1, 0.4, -0.2], [-1.0, 1.0, 0.1, 0.3]])
    normalised = (raw - torch.tensor([0.5, 0.0, 0.0, 0.0])) / torch.tensor([2.0, 1.0, 4.0, 1.0])
    session = InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"observation": raw.numpy()})[0]
    agent = rlplug.Agent.load(out / "checkpoint.pt", out=tmp_path / "loaded")
    try:
        expected = agent.run.algorithm.policy(TensorDict({"observation": normalised}, [3]))["logits"]
    finally:
        agent.close()
    np.testing.assert_allclose(logits, expected.detach().numpy(), rtol=1e-5, atol=1e-5)
