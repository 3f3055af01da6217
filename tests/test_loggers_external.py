"""The wandb and tensorboard loggers, end to end: the real CLI in a subprocess, the files read back with
wandb's own record schema and TensorBoard's own reader.

No network is ever reached: ``WANDB_BASE_URL`` points at a local socket that counts the connections made
to it, and each test asserts there were none. ``HOME`` is a fresh directory, so a developer's
``~/.netrc`` (``wandb login``) or ``~/.config/wandb`` cannot change what a test sees.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import tomllib
import zlib
from pathlib import Path

import pytest
import tomli_w
from conftest import CANONICAL, ROOT, run_cli

pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

#: Two evaluation episodes and four PPO batches of 256 frames: the run logs at these frame counts.
SHORT = ["--set", "run.total_frames=1024", "--set", "eval.episodes=2"]
STEPS = [256, 512, 768, 1024]
FAKE_KEY = "local-0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"  # shaped like a W&B key, valid nowhere

#: Whole runs and subprocesses: the full suite's, not the fast tier's.
pytestmark = pytest.mark.slow


# --- helpers --------------------------------------------------------------------------------------------


def recipe_with_loggers(tmp_path: Path, *loggers: dict) -> Path:
    """The canonical recipe with its ``[[loggers]]`` replaced."""
    data = tomllib.loads(CANONICAL.read_text())
    data["loggers"] = list(loggers)
    path = tmp_path / "recipe.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def rlplug(*args: str, home: Path, env: dict | None = None, python: str | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m rlplug ARGS`` (or ``python -c PYTHON``) from the repository root, with no ``WANDB_*`` or
    ``RLPLUG_*`` variable inherited and ``HOME`` set to ``home``: only ``env`` says how wandb behaves."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("RLPLUG_", "WANDB_")) and k != "NETRC"}
    full_env = {**inherited, "HOME": str(home), "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    command = [sys.executable, "-c", python] if python else [sys.executable, "-m", "rlplug", *args]
    return subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


class ConnectionCounter:
    """A local TCP socket that accepts and counts connections: a W&B server that must never be called."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:  # closed
                return
            self.connections += 1
            connection.close()

    def close(self):
        self.server.close()


@pytest.fixture
def no_server():
    counter = ConnectionCounter()
    yield counter
    counter.close()


def wandb_records(path: Path) -> list:
    """Every record of a ``.wandb`` transaction log, each decoded with wandb's own protobuf schema.

    The file is a LevelDB-style log: a 7-byte header (``:W&B``, a magic number, a version), then 32 KiB
    blocks of chunks, each ``crc32 (4) | length (2) | type (1) | data``; types 1 (a whole record) or 2, 3, 4
    (first, middle, last part); a block's last bytes, when fewer than a chunk header, are zeros.
    """
    from wandb.proto import wandb_internal_pb2

    block, header = 32768, 7
    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    records, pending, position = [], b"", header
    while position + header <= len(data):
        left = block - position % block
        if left < header:
            position += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[position:position + header])
        chunk = data[position + header:position + header + length]
        position += header + length
        if kind == 0 and length == 0:  # padding to the end of a block
            position += (block - position % block) % block
            continue
        assert zlib.crc32(bytes([kind]) + chunk) == crc, f"corrupt chunk at byte {position} of {path}"
        pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    assert not pending, "the log ends inside a record"
    return records


def _key(item) -> str:
    return item.key or ".".join(item.nested_key)


def read_wandb_run(run_dir: Path) -> list[dict]:
    """Each offline W&B run under ``run_dir/wandb`` (oldest first): its id, config, history rows (step ->
    metrics), final summary and exit code, read from its ``.wandb`` file."""
    runs = []
    for directory in sorted((run_dir / "wandb").glob("offline-run-*")):
        (log,) = directory.glob("run-*.wandb")
        run = {"dir": directory, "config": {}, "history": {}, "summary": {}, "exit_code": None}
        for record in wandb_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.update(id=record.run.run_id, project=record.run.project, name=record.run.display_name,
                           tags=list(record.run.tags))
                run["config"].update({_key(i): json.loads(i.value_json) for i in record.run.config.update})
            elif kind == "config":
                run["config"].update({_key(i): json.loads(i.value_json) for i in record.config.update})
            elif kind == "history":
                row = {_key(i): json.loads(i.value_json) for i in record.history.item}
                run["history"].setdefault(row["_step"], {}).update(row)
            elif kind == "summary":
                run["summary"].update({_key(i): json.loads(i.value_json) for i in record.summary.update})
            elif kind == "exit":
                run["exit_code"] = record.exit.exit_code
        runs.append(run)
    return runs


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in a TensorBoard log directory, read with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def files_holding(run_dir: Path, secret: str) -> list[Path]:
    return [path for path in run_dir.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]


# --- wandb -----------------------------------------------------------------------------------------------


def test_wandb_logs_offline_by_default_and_never_reaches_the_network(tmp_path, no_server):
    recipe = recipe_with_loggers(tmp_path, {"use": "console"}, {"use": "wandb", "tags": ["smoke"]})
    out, home = tmp_path / "run", tmp_path / "home"
    home.mkdir()
    created_here = not (ROOT / "wandb").exists()
    started = time.monotonic()
    result = rlplug("run", str(recipe), "--out", str(out), *SHORT, home=home,
                    env={"WANDB_BASE_URL": no_server.url})  # WANDB_MODE unset, not logged in
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < 60, f"took {elapsed:.0f} s: waiting for a server?"
    assert no_server.connections == 0

    (run,) = read_wandb_run(out)  # offline: the files are in the run directory
    assert run["id"] == (out / "wandb-run-id").read_text().strip()
    assert (run["project"], run["name"], run["tags"]) == ("rlplug", "run", ["smoke"])
    resolved = tomllib.loads((out / "recipe.toml").read_text())
    assert run["config"]["algorithm"] == resolved["algorithm"]  # the resolved recipe, every default in
    assert run["config"]["run"]["total_frames"] == 1024
    assert [logger["use"] for logger in run["config"]["loggers"]] == ["rlplug:console", "rlplug:wandb"]

    assert sorted(run["history"]) == STEPS  # step = frames
    for step, row in run["history"].items():
        assert {"fps", "loss_objective", "loss_critic", "entropy", "episodes"} <= row.keys(), step
    summary = json.loads((out / "summary.json").read_text())
    assert run["history"][1024]["eval_return_mean"] == pytest.approx(summary["eval_return_mean"])
    assert run["summary"]["status"] == "finished" and run["summary"]["frames"] == 1024
    assert run["exit_code"] == 0
    if created_here:
        assert not (ROOT / "wandb").exists(), "wandb wrote into the working directory"


def test_wandb_resumed_run_continues_the_same_run_and_never_writes_the_api_key(tmp_path, no_server):
    recipe = recipe_with_loggers(tmp_path, {"use": "csv"}, {"use": "wandb", "mode": "offline"},
                                 {"use": "tensorboard"})
    out, home = tmp_path / "run", tmp_path / "home"
    home.mkdir()
    env = {"WANDB_BASE_URL": no_server.url, "WANDB_API_KEY": FAKE_KEY}
    # Half the frames through the Python API (a checkpoint at 512 frames, status "paused"), then the CLI
    # resumes from that checkpoint in a new process.
    first = rlplug(home=home, env=env, python=(
        f"import rlplug; agent = rlplug.Agent.from_recipe({str(recipe)!r}, out={str(out)!r}, "
        "**{'run.total_frames': 1024, 'eval.episodes': 2}); print(agent.train(max_frames=512)['status'])"))
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().splitlines()[-1] == "paused"
    second = rlplug("resume", str(out), home=home, env=env)
    assert second.returncode == 0, second.stderr
    assert no_server.connections == 0

    before, after = read_wandb_run(out)
    assert before["id"] == after["id"] == (out / "wandb-run-id").read_text().strip()
    assert (sorted(before["history"]), sorted(after["history"])) == ([256, 512], [768, 1024])
    assert (before["summary"]["status"], after["summary"]["status"]) == ("paused", "finished")
    assert before["exit_code"] == after["exit_code"] == 0

    series = scalars(out / "tensorboard")  # two event files, one per process
    assert [step for step, _ in series["fps"]] == STEPS
    assert [step for step, _ in series["eval_return_mean"]] == [512, 1024]

    assert files_holding(out, FAKE_KEY) == []


def test_wandb_run_that_fails_ends_with_a_nonzero_exit_code(tmp_path, no_server):
    home = tmp_path / "home"
    home.mkdir()
    script = (
        "from pathlib import Path; from rlplug.plugins.loggers import make_wandb\n"
        f"run_dir = Path({str(tmp_path / 'run')!r}); run_dir.mkdir()\n"
        "logger = make_wandb(run_dir=run_dir, project='failing', group='g')\n"
        "logger.log({'fps': 1.0}, 10)\n"
        "logger.close({'status': 'diverged', 'frames': 10, 'eval_return_mean': None})\n")
    result = rlplug(home=home, env={"WANDB_BASE_URL": no_server.url}, python=script)
    assert result.returncode == 0, result.stderr
    (run,) = read_wandb_run(tmp_path / "run")
    assert run["project"] == "failing" and run["history"][10]["fps"] == 1.0
    assert run["summary"]["status"] == "diverged" and "eval_return_mean" not in run["summary"]
    assert run["exit_code"] == 1
    assert no_server.connections == 0


@pytest.mark.parametrize("setting, expected", [
    ({}, "offline"),                                   # not logged in, nothing chosen
    ({"WANDB_MODE": "online"}, None),                  # wandb reads WANDB_MODE itself
    ({"WANDB_MODE": "disabled"}, None),
    ({"WANDB_API_KEY": FAKE_KEY}, None),               # logged in: wandb decides (online by default)
    ({"netrc": "api.wandb.ai"}, None),                 # `wandb login` writes ~/.netrc
    ({"netrc": "wandb.example.com"}, "offline"),       # credentials for another server only
    ({"netrc": "wandb.example.com", "WANDB_BASE_URL": "https://wandb.example.com"}, None),
    ({"netrc": "wandb.example.com", "settings": "https://wandb.example.com"}, None),  # `wandb login --host`
])
def test_wandb_mode_is_offline_unless_logged_in_or_chosen(tmp_path, monkeypatch, setting, expected):
    from rlplug.plugins.loggers.builtin import wandb_mode

    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL", "WANDB_CONFIG_DIR",
                 "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name, value in setting.items():
        if name == "netrc":
            (tmp_path / ".netrc").write_text(f"machine {value}\n  login user\n  password {FAKE_KEY}\n")
        elif name == "settings":
            (tmp_path / ".config" / "wandb").mkdir(parents=True)
            (tmp_path / ".config" / "wandb" / "settings").write_text(f"[default]\nbase_url = {value}\n")
        else:
            monkeypatch.setenv(name, value)
    assert wandb_mode(None) == expected
    assert wandb_mode("online") == "online"  # the recipe's choice wins


# --- tensorboard -----------------------------------------------------------------------------------------


def test_tensorboard_scalars_at_every_frame_count(tmp_path):
    recipe = recipe_with_loggers(tmp_path, {"use": "console"}, {"use": "tensorboard"})
    out, home = tmp_path / "run", tmp_path / "home"
    home.mkdir()
    result = rlplug("run", str(recipe), "--out", str(out), *SHORT, home=home)
    assert result.returncode == 0, result.stderr
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))

    series = scalars(out / "tensorboard")
    for tag in ("fps", "loss_objective", "loss_critic", "entropy", "kl_approx", "lr", "episodes"):
        assert [step for step, _ in series[tag]] == STEPS, tag
    summary = json.loads((out / "summary.json").read_text())
    ((step, value),) = series["eval_return_mean"]
    assert step == 1024 and value == pytest.approx(summary["eval_return_mean"])
    assert [step for step, _ in series["eval_return_std"]] == [1024]


def test_tensorboard_hides_what_a_killed_run_logged_after_the_checkpoint_it_resumes_from(tmp_path):
    from rlplug.plugins.loggers.builtin import TensorBoardLogger

    killed = TensorBoardLogger(tmp_path, start_frames=0)
    for frames in (100, 200, 300):  # checkpoint at 200, killed after logging 300
        killed.log({"fps": float(frames), "episodes": frames // 10}, frames)
    killed.writer.flush()  # a kill closes nothing
    resumed = TensorBoardLogger(tmp_path, start_frames=200)
    resumed.log({"fps": 301.0, "episodes": 30}, 300)
    resumed.close({"status": "finished"})
    killed.close({})
    series = scalars(tmp_path)
    assert series["fps"] == [(100, 100.0), (200, 200.0), (300, 301.0)]
    assert [step for step, _ in series["episodes"]] == [100, 200, 300]


def test_tensorboard_histograms_on_request(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    recipe = tmp_path / "recipe.toml"
    recipe.write_text(CANONICAL.read_text().replace('use = "csv"', 'use = "tensorboard"\nhistograms = true'))
    out = tmp_path / "run"
    result = run_cli("run", str(recipe), "--out", str(out), "--set", "run.total_frames=512", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"histograms": 0})
    events.Reload()
    tags = events.Tags()["histograms"]
    assert any(t.startswith("weights/policy.") for t in tags) and any(t.startswith("gradients/critic.") for t in tags)


def test_tensorboard_shows_evaluation_videos_as_gifs(tmp_path):
    import io

    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlplug.plugins.loggers.builtin import GIF_MAX_FRAMES

    recipe = tmp_path / "recipe.toml"
    recipe.write_text(CANONICAL.read_text().replace('use = "csv"', 'use = "tensorboard"'))
    out = tmp_path / "run"
    result = run_cli("run", str(recipe), "--out", str(out), "--set", "run.total_frames=512",
                     "--set", "eval.every_frames=256", "--set", "eval.video=true", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    videos = events.Images("eval_video")
    assert [v.step for v in videos] == [256, 512]
    for video in videos:
        assert video.encoded_image_string[:6] == b"GIF89a"
        assert (video.width, video.height) == (300, 200)  # CartPole's 600x400 frames, halved
        gif = Image.open(io.BytesIO(video.encoded_image_string))
        assert 1 < gif.n_frames <= GIF_MAX_FRAMES and gif.size == (300, 200)
