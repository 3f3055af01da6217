"""``rlplug eval`` and ``rlplug plot`` through the real command line, on short real runs of the canonical recipe."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import struct
from pathlib import Path

import pytest
from conftest import CANONICAL, one_line_error, run_cli

from rlplug.errors import UserError

SHORT = ["--set", "run.total_frames=2048", "--set", "eval.every_frames=512", "--set", "eval.episodes=2"]
RETURN_LINE = re.compile(r"^return: mean (\S+), std (\S+), min (\S+), max (\S+)$", re.MULTILINE)
RETURNS_LINE = re.compile(r"^returns: (.*)$", re.MULTILINE)
VIDEO_LINE = re.compile(r"^video: (\S+) \((\d+) episodes?, (\d+) frames, returns? (.*)\)$", re.MULTILINE)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two seeds of the canonical recipe (one group), and one with running observation normalisation."""
    root = tmp_path_factory.mktemp("runs")
    made = {}
    for name, extra in {"seed0": ["--set", "run.seed=0"], "seed1": ["--set", "run.seed=1"],
                        "normalised": ["--set", "run.seed=0", "--set", "env.normalize_observations=running",
                                       "--set", "env.clip_observations=5.0", "--set", "eval.every_frames=0"]}.items():
        out = root / name
        result = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT, *extra)
        assert result.returncode == 0, result.stderr
        made[name] = out
    return made


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``directory`` with its size and modification time."""
    entries = {".": (0, directory.stat().st_mtime_ns)}
    for path in sorted(directory.rglob("*")):
        stat = path.stat()
        entries[str(path.relative_to(directory))] = (stat.st_size if path.is_file() else 0, stat.st_mtime_ns)
    return entries



def stats(stdout: str) -> tuple[float, float, float, float]:
    match = RETURN_LINE.search(stdout)
    assert match, stdout
    return tuple(float(v) for v in match.groups())


# -- eval ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_eval_prints_statistics_and_leaves_the_run_untouched(runs):
    run_dir = runs["seed0"]
    before = snapshot(run_dir)
    result = run_cli("eval", str(run_dir), "--episodes", "3")
    assert result.returncode == 0, result.stderr
    mean, std, low, high = stats(result.stdout)
    returns = [float(r) for r in RETURNS_LINE.search(result.stdout).group(1).split()]
    assert len(returns) == 3 and min(returns) == low and max(returns) == high
    assert low <= mean <= high and std >= 0 and low >= 1  # CartPole pays 1 per step
    assert "episodes: 3 of CartPole-v1, deterministic policy" in result.stdout
    assert snapshot(run_dir) == before


@pytest.mark.slow
def test_eval_repeats_the_runs_own_final_evaluation(runs):
    """Same checkpoint, same episodes (the recipe's), same start states, deterministic: the same mean."""
    import json

    summary = json.loads((runs["seed1"] / "summary.json").read_text())
    result = run_cli("eval", str(runs["seed1"]))
    assert result.returncode == 0, result.stderr
    mean, *_ = stats(result.stdout)
    assert mean == pytest.approx(summary["eval_return_mean"], rel=1e-3)


@pytest.mark.slow
def test_eval_video_is_an_mp4_of_the_same_episode(runs, tmp_path):
    """The video's episode starts where the evaluation's does and sees the same normalised observations,
    so the deterministic policy earns exactly the same return there."""
    import imageio_ffmpeg

    video = tmp_path / "films" / "cartpole.mp4"
    before = snapshot(runs["normalised"])
    result = run_cli("eval", str(runs["normalised"]), "--episodes", "1", "--video", str(video))
    assert result.returncode == 0, result.stderr
    assert "normalisation statistics frozen" in result.stdout
    mean, *_ = stats(result.stdout)
    match = VIDEO_LINE.search(result.stdout)
    assert match, result.stdout
    episodes, frames, video_return = int(match.group(2)), int(match.group(3)), float(match.group(4))
    assert episodes == 1 and video_return == mean
    assert frames == video_return + 1  # the first observation, then one frame per step (reward 1 per step)
    data = video.read_bytes()
    assert len(data) > 2_000 and data[4:8] == b"ftyp"
    assert imageio_ffmpeg.count_frames_and_secs(str(video))[0] == frames
    assert sorted(p.name for p in video.parent.iterdir()) == ["cartpole.mp4"]  # no partial file left
    assert snapshot(runs["normalised"]) == before


@pytest.mark.slow
def test_eval_video_without_a_renderer_is_one_line_before_evaluating(runs, tmp_path):
    fake = tmp_path / "fake"
    (fake / "pygame").mkdir(parents=True)
    (fake / "pygame" / "__init__.py").write_text("raise ImportError('No module named pygame')\n")
    video = tmp_path / "out.mp4"
    result = run_cli("eval", str(runs["seed0"]), "--video", str(video), env={"PYTHONPATH": str(fake)})
    one_line_error(result, "--video", "CartPole-v1", "cannot render")
    assert result.stdout == "" and not video.exists()


def test_video_refuses_an_env_that_is_not_gymnasium():
    pytest.importorskip("rlplug_example_plugin")
    from rlplug import recipe as recipes
    from rlplug.run.video import render_recipe

    corridor = Path(__file__).resolve().parent.parent / "examples" / "rlplug-example-plugin" / "corridor-ppo.toml"
    with pytest.raises(UserError, match="films gymnasium envs"):
        render_recipe(recipes.load(corridor))


def test_cannot_render_names_an_error_that_has_no_message():
    from rlplug.run.video import cannot_render

    error = cannot_render("CartPole-v1", RuntimeError())  # was "...frames here: str", the message's type
    assert str(error) == "--video: CartPole-v1 cannot render rgb_array frames here: RuntimeError"
    assert str(cannot_render("CartPole-v1", OSError("no\n  display"))).endswith("frames here: no display")


class Payload:
    """A pickle that would run a command if it were ever unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
def test_eval_errors_are_one_line(runs, tmp_path):
    one_line_error(run_cli("eval", str(tmp_path / "missing")), "missing", "no such directory")
    (tmp_path / "empty").mkdir()
    one_line_error(run_cli("eval", str(tmp_path / "empty")), "no checkpoint.pt")
    one_line_error(run_cli("eval", str(runs["seed0"]), "--checkpoint", "nope.pt"), "--checkpoint nope.pt")

    import torch

    state = torch.load(runs["seed0"] / "checkpoint.pt", weights_only=True)
    del state["algorithm"]  # loads as data, but its digest tells it was changed
    torch.save(state, tmp_path / "gutted.pt")
    one_line_error(run_cli("eval", str(runs["seed0"]), "--checkpoint", str(tmp_path / "gutted.pt")),
                   "does not match its digest")

    marker = tmp_path / "pwned"
    malicious = tmp_path / "malicious.pt"
    malicious.write_bytes(pickle.dumps(Payload(marker)))
    one_line_error(run_cli("eval", str(runs["seed0"]), "--checkpoint", str(malicious)),
                   "not a readable rlplug checkpoint")
    assert not marker.exists()

    one_line_error(run_cli("eval", str(runs["seed0"]), "--video", str(tmp_path / "x.avi")), ".mp4")


# -- plot ---------------------------------------------------------------------------------------------------


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_writes_a_png_with_seeds_grouped(runs, tmp_path):
    output = tmp_path / "plots" / "curve.png"
    result = run_cli("plot", str(runs["seed0"]), str(runs["seed1"]), "-o", str(output), "--title", "two seeds")
    assert result.returncode == 0, result.stderr
    assert "2 runs in 1 group" in result.stdout and "ppo on CartPole-v1" in result.stdout
    data = output.read_bytes()
    width, height = png_size(data)
    assert width >= 640 and height >= 400 and len(data) > 10_000

    import matplotlib.image

    assert matplotlib.image.imread(output).shape[:2] == (height, width)


def test_plot_runs_function(runs, tmp_path):
    """What ``run --seeds`` calls; a directory of runs stands for its runs; recipes apart from the seed group."""
    from rlplug.run.curves import expand_run_dirs, group_runs, plot_runs, read_runs

    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for name in ("seed0", "seed1"):
        shutil.copytree(runs[name], seeds / name)
    output = plot_runs([seeds, runs["normalised"]], tmp_path / "eval.png", metric="eval_return_mean")
    assert output == tmp_path / "eval.png" and png_size(output.read_bytes())[0] > 0

    groups = group_runs(read_runs(expand_run_dirs([runs["seed0"], runs["normalised"], runs["seed1"]]),
                                  "episode_return"))
    assert [len(g.runs) for g in groups] == [2, 1]
    assert "env.normalize_observations=running" in groups[1].label and "seeds 0, 1" in groups[0].label


def test_plot_errors_are_one_line(runs, tmp_path):
    out = str(tmp_path / "x.png")
    one_line_error(run_cli("plot", str(tmp_path / "missing"), "-o", out), "no such directory")
    (tmp_path / "empty").mkdir()
    one_line_error(run_cli("plot", str(tmp_path / "empty"), "-o", out), "no metrics.csv")
    one_line_error(run_cli("plot", str(runs["seed0"]), "-o", out, "--metric", "eval_retrun_mean"),
                   "did you mean 'eval_return_mean'")
    empty_metric = tmp_path / "no-episodes"
    empty_metric.mkdir()
    (empty_metric / "metrics.csv").write_text("frames,fps,episode_return\n256,1000,\n512,1000,\n")
    one_line_error(run_cli("plot", str(empty_metric), "-o", out), "no values of episode_return")
    assert not Path(out).exists()


AGGREGATE_LINE = re.compile(r"^(.*): median (\S+) \[(\S+), (\S+)\], iqm (\S+) \[(\S+), (\S+)\], mean (\S+) "
                            r"\[(\S+), (\S+)\], optimality_gap (\S+) \[(\S+), (\S+)\]$", re.MULTILINE)


@pytest.mark.slow
def test_plot_aggregate_draws_rliable_intervals_and_profiles_of_final_returns(runs, tmp_path):
    import json

    output = tmp_path / "aggregate.png"
    result = run_cli("plot", "--aggregate", str(runs["seed0"]), str(runs["seed1"]), str(runs["normalised"]),
                     "-o", str(output))
    assert result.returncode == 0, result.stderr
    for path in (output, tmp_path / "aggregate-profile.png"):
        width, height = png_size(path.read_bytes())
        assert width >= 400 and height >= 100
    found = {match.group(1): [float(v) for v in match.groups()[1:]] for match in AGGREGATE_LINE.finditer(result.stdout)}
    assert len(found) == 2, result.stdout
    pair = next(values for label, values in found.items() if "2 runs" in label)
    finals = sorted(json.loads((runs[name] / "summary.json").read_text())["eval_return_mean"]
                    for name in ("seed0", "seed1"))
    median, iqm, mean, gap = pair[0], pair[3], pair[6], pair[9]
    assert iqm == pytest.approx(sum(finals) / 2, rel=1e-3) and mean == iqm and median == mean  # one task
    assert pair[7:9] == pytest.approx(finals, rel=1e-3)  # two runs: the bootstrap's extremes are theirs
    assert gap == pytest.approx(475 - sum(finals) / 2, rel=1e-3)  # CartPole-v1's threshold, returns below it


@pytest.mark.slow
def test_plot_aggregate_errors_are_one_line(runs, tmp_path):
    other_env = tmp_path / "pendulum-run"
    shutil.copytree(runs["seed1"], other_env)
    recipe = other_env / "recipe.toml"
    recipe.write_text(recipe.read_text().replace('"CartPole-v1"', '"Pendulum-v1"'))
    out = tmp_path / "x.png"
    one_line_error(run_cli("plot", "--aggregate", str(runs["seed0"]), str(other_env), "-o", str(out)),
                   "several envs", "CartPole-v1, Pendulum-v1", "aggregate each env's runs apart")
    one_line_error(run_cli("plot", str(runs["seed0"]), "-o", str(out), "--gap-threshold", "100"), "--aggregate")
    one_line_error(run_cli("plot", "--aggregate", str(runs["seed0"]), "-o", str(tmp_path / "x.gif")), ".gif")
    assert not out.exists()


@pytest.mark.slow
def test_evaluation_videos_during_training_reach_wandb(tmp_path):
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(CANONICAL.read_text().replace('use = "csv"', 'use = "wandb"'))
    out = tmp_path / "run"
    result = run_cli("run", str(recipe), "--out", str(out), "--set", "run.total_frames=1024",
                     "--set", "eval.every_frames=512", "--set", "eval.video=true", "--set", "eval.episodes=1",
                     env={"HOME": str(tmp_path), "WANDB_BASE_URL": "http://127.0.0.1:9"})
    assert result.returncode == 0, result.stderr
    videos = sorted((out / "videos").iterdir())
    assert [v.name for v in videos] == [f"frames-{512:012d}.mp4", f"frames-{1024:012d}.mp4"]
    assert all(v.read_bytes()[4:8] == b"ftyp" for v in videos)
    assert len(list((out / "wandb").rglob("media/videos/eval_video_*.mp4"))) == 2


def test_the_frames_axis_says_what_offline_runs_count():
    """An offline run's frames are the samples it learned from: the axis says so where any run is offline."""
    from rlplug.run.curves import RunCurve, frames_label

    online = RunCurve(Path("a"), [0.0], [1.0], {"env": {"use": "gym"}})
    offline = RunCurve(Path("b"), [0.0], [1.0], {"env": {"use": "gym"}, "dataset": {"use": "minari"}})
    unread = RunCurve(Path("c"), [0.0], [1.0], None)
    assert frames_label([online, unread]) == "frames (environment steps)"
    assert "samples learned from" in frames_label([offline]) and "environment" not in frames_label([offline])
    assert "environment steps" in frames_label([online, offline]) and "offline" in frames_label([online, offline])
