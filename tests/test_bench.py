"""``rlplug bench``: suites read and refused in one line, trained over seeds into run directories, continued by a
second call (finished runs kept, a stopped run resumed from its checkpoint), and reported against references."""

from __future__ import annotations

import json
import signal
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest
from conftest import CANONICAL, ROOT, one_line_error, run_cli, start_cli, wait_for

from rlplug.run.bench import ratio, summarise

SUITES = ROOT / "benchmarks" / "suites"
#: Shipped entries without a reference, each for the reason its suite's comment gives.
NO_REFERENCE = {"seaquest-ppo"}

def write_suite(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).replace("CANONICAL", CANONICAL.as_posix()))
    return path


def plain_iqm(values) -> float:
    """The interquartile mean as rliable computes it (scipy's trim_mean at 25%): the mean of the values left
    after cutting int(n / 4) from each end of the sorted values."""
    values = np.sort(np.asarray(values, dtype=float))
    cut = int(0.25 * len(values))
    return float(values[cut:len(values) - cut].mean())


# -- the arithmetic -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("returns", [[500.0], [1.0, 2.0, 3.0, 4.0, 100.0], [8.0, -3.0, 5.0, 7.0, 1.0, 9.0, 2.0, 40.0],
                                     [-150.0, -210.0, -180.0]])
def test_iqm_and_mean_are_the_plain_numpy_figures(returns):
    summary = summarise(returns)
    assert summary["iqm"] == pytest.approx(plain_iqm(returns))
    assert summary["mean"] == pytest.approx(float(np.mean(returns)))
    low, high = summary["ci"]
    assert low <= summary["iqm"] <= high and min(returns) <= low and high <= max(returns)


def test_the_ratio_is_one_at_the_reference_and_above_one_when_better_for_either_sign():
    assert ratio(450.0, 500.0) == pytest.approx(450.0 / 500.0)  # a positive reference: IQM / reference
    assert ratio(-40.0, 500.0) == pytest.approx(-40.0 / 500.0)
    assert ratio(-150.0, -150.0) == pytest.approx(1.0)
    assert ratio(-200.0, -150.0) == pytest.approx(2.0 - (-200.0) / (-150.0))  # 0.667: worse than the reference
    assert ratio(-100.0, -150.0) == pytest.approx(4.0 / 3.0)  # better
    assert ratio(0.0, -150.0) == pytest.approx(2.0)
    assert ratio(10.0, 0.0) is None and ratio(None, 5.0) is None
    values = np.array([-300.0, -250.0, -160.0, -140.0])  # linear: the ratio of the IQM is the IQM of the ratios
    assert ratio(plain_iqm(values), -150.0) == pytest.approx(plain_iqm([ratio(v, -150.0) for v in values]))


# -- refusals -------------------------------------------------------------------------------------------------


GOOD = """
    [[entry]]
    recipe = "CANONICAL"
    seeds = [0]
    frames = 512
    reference = {score = 500, source = "rl-zoo3"}
"""


@pytest.mark.parametrize("text, fragments", [
    ("description = 'x'\n[[entries]]\nrecipe = 'CANONICAL'\n", ["entries: unknown key (did you mean 'entry'?)"]),
    ("description = 'x'\n", ["no [[entry]] tables"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseed = [0]\n", ["entry[0].seed: unknown key (did you mean 'seeds'?)"]),
    ("[[entry]]\nrecipe = 'nowhere.toml'\nseeds = [0]\n", ["entry[0].recipe:", "nowhere.toml: no such recipe file"]),
    ("[[entry]]\nseeds = [0]\n", ["entry[0].recipe: missing"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\n", ["entry[0].seeds: missing"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseeds = '0-x'\n", ["entry[0].seeds:", "'0-x'"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseeds = [0, 0]\n", ["entry[0].seeds:", "twice"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseeds = [0]\nreference = {score = 500}\n",
     ["entry[0].reference.source: missing"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseeds = [0]\nreference = {score = 500, source = 'x', year = 1}\n",
     ["entry[0].reference.year: unknown key"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseeds = [0]\nreference = {score = 'high', source = 'x'}\n",
     ["entry[0].reference.score: expected a finite number"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseeds = [0]\nframes = 0\n", ["entry[0].frames:"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseeds = [0]\nset = ['run.seed=3']\n", ["entry[0].set:", "seeds choose"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseeds = [0]\nset = ['algorithm.lrr=1e-3']\n",
     ["entry[0]:", "algorithm.lrr"]),
    (GOOD + GOOD, ["entry[1].name:", "'cartpole-ppo' names entry[0] too"]),
    ("[[entry]]\nrecipe = 'CANONICAL'\nseeds = [0\n", ["invalid TOML"]),
])
def test_bad_suites_are_one_line_errors_and_create_nothing(tmp_path, text, fragments):
    suite = write_suite(tmp_path / "suite.toml", text)
    line = one_line_error(run_cli("bench", str(suite), "--out", str(tmp_path / "out"), timeout=120),
                          str(suite), *fragments)
    assert "Traceback" not in line
    assert not (tmp_path / "out").exists()


def test_a_missing_suite_an_unknown_only_and_a_foreign_out_are_one_line_errors(tmp_path):
    one_line_error(run_cli("bench", str(tmp_path / "none.toml"), "--out", str(tmp_path / "out")),
                   "none.toml", "no such suite file")
    suite = write_suite(tmp_path / "suite.toml", GOOD)
    one_line_error(run_cli("bench", str(suite), "--out", str(tmp_path / "out"), "--only", "cartpole-ppx"),
                   "--only cartpole-ppx", "did you mean 'cartpole-ppo'")
    one_line_error(run_cli("bench", str(suite), "--out", str(tmp_path / "out"), "--jobs", "0"), "--jobs 0")
    assert not (tmp_path / "out").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    one_line_error(run_cli("bench", str(suite), "--out", str(tmp_path / "other")), "holds no bench")
    assert [p.name for p in (tmp_path / "other").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("name", sorted(path.stem for path in SUITES.glob("*.toml")))
def test_the_shipped_suites_validate_and_each_reference_names_its_source(tmp_path, name):
    """Every entry's recipe loads for every seed (checked by a dry run, which writes nothing), and every entry
    but those of NO_REFERENCE has a reference whose source names where the score is from."""
    suite = SUITES / f"{name}.toml"
    result = run_cli("bench", str(suite), "--out", str(tmp_path / "out"), "--dry-run", timeout=300)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "out").exists()
    entries = tomllib.loads(suite.read_text())["entry"]
    assert f"{len(entries)} entries" in result.stdout
    for entry in entries:
        name = entry.get("name", Path(entry["recipe"]).stem)
        assert name in result.stdout
        if name in NO_REFERENCE:
            assert "reference" not in entry
            continue
        assert isinstance(entry["reference"]["score"], (int, float)) and len(entry["reference"]["source"]) > 40


# -- training, reporting, continuing --------------------------------------------------------------------------


TWO_ENTRIES = """
    description = "a tiny suite"

    [[entry]]
    recipe = "CANONICAL"
    seeds = "0-1"
    frames = 1024
    set = ["eval.episodes=2", "eval.every_frames=0", "run.checkpoint_every_frames=512"]
    reference = {score = 500, source = "rl-zoo3 benchmark.md, ppo CartPole-v1, 100k steps, 1 run"}

    [[entry]]
    name = "cartpole-ppo-slow-lr"
    recipe = "CANONICAL"
    seeds = [2]
    frames = 512
    set = ["eval.episodes=2", "algorithm.lr=3e-4"]
    reference = {score = -100, source = "a made-up negative score, to read the ratio's other sign"}
"""


@pytest.mark.slow
def test_a_suite_trains_its_seeds_reports_them_and_a_second_call_trains_nothing(tmp_path):
    suite = write_suite(tmp_path / "suite.toml", TWO_ENTRIES)
    out = tmp_path / "out"
    first = run_cli("bench", str(suite), "--out", str(out), "--jobs", "2", timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "cartpole-ppo seeds 0, 1 together" in first.stdout and "cartpole-ppo-slow-lr seed 2" in first.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["suite"] == str(suite) and "ratio = 1 + (IQM - reference) / |reference|" in report["ratio"]
    by_name = {entry["name"]: entry for entry in report["entries"]}
    assert list(by_name) == ["cartpole-ppo", "cartpole-ppo-slow-lr"]
    for name, seeds, frames, score in (("cartpole-ppo", [0, 1], 1024, 500.0),
                                       ("cartpole-ppo-slow-lr", [2], 512, -100.0)):
        entry = by_name[name]
        assert entry["seeds"] == seeds and entry["frames"] == frames and not entry["pending"]
        returns = [json.loads((out / "runs" / name / f"seed-{seed}" / "summary.json").read_text())
                   ["eval_return_mean"] for seed in seeds]
        assert entry["returns"] == returns
        trained = [json.loads((out / "runs" / name / f"seed-{seed}" / "summary.json").read_text())
                   ["train_return_recent"] for seed in seeds]
        assert entry["train_returns"] == trained and entry["train_mean"] == pytest.approx(float(np.mean(trained)))
        assert entry["iqm"] == pytest.approx(plain_iqm(returns))
        assert entry["mean"] == pytest.approx(float(np.mean(returns)))
        assert entry["ci"][0] <= entry["iqm"] <= entry["ci"][1]
        assert entry["reference"]["score"] == score and entry["reference"]["source"]
        assert entry["ratio"] == pytest.approx(1 + (entry["iqm"] - score) / abs(score), abs=1e-6)
        assert entry["at_or_above"] == (entry["iqm"] >= score)
        assert entry["wall_s"] > 0 and entry["frames_per_s"] > 0 and entry["frames_trained"] == frames * len(seeds)
    assert by_name["cartpole-ppo"]["seeds_together"] == [0, 1]
    assert (out / "runs" / "cartpole-ppo" / "batched.json").is_file()
    table = (out / "report.md").read_text()
    assert "| cartpole-ppo | 1,024 | 2 |" in table and "| cartpole-ppo-slow-lr | 512 | 1 |" in table
    assert "| training mean |" in table
    assert "![" in table and (out / "report.png").stat().st_size > 0

    runs = sorted(out.glob("runs/*/seed-*"))
    written = {path: path.stat().st_mtime_ns for run in runs for path in run.rglob("*")}
    second = run_cli("bench", str(suite), "--out", str(out), timeout=300)
    assert second.returncode == 0, second.stderr
    assert "3 finished earlier, 0 to train; nothing to train" in second.stdout
    assert "run directory:" not in second.stdout
    assert {path: path.stat().st_mtime_ns for run in runs for path in run.rglob("*")} == written
    assert json.loads((out / "report.json").read_text())["entries"] == report["entries"]

    changed = write_suite(tmp_path / "changed.toml", TWO_ENTRIES.replace("lr=3e-4", "lr=1e-4"))
    one_line_error(run_cli("bench", str(changed), "--out", str(out)), "seed-2: trained with another recipe",
                   "algorithm.lr differs")


@pytest.mark.slow
def test_a_sigterm_stops_the_bench_with_a_checkpoint_and_the_next_call_resumes_that_run(tmp_path):
    suite = write_suite(tmp_path / "suite.toml", """
        [[entry]]
        recipe = "CANONICAL"
        seeds = [0]
        frames = 20480
        set = ["eval.episodes=2"]
        reference = {score = 500, source = "rl-zoo3 benchmark.md, ppo CartPole-v1, 100k steps, 1 run"}
    """)
    out = tmp_path / "out"
    run_dir = out / "runs" / "cartpole-ppo" / "seed-0"
    process = start_cli("bench", str(suite), "--out", str(out))
    wait_for(run_dir / "metrics.csv", process)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stdout + stderr
    assert "run the same command again to continue" in stderr and "Traceback" not in stderr
    stopped = json.loads((run_dir / "summary.json").read_text())
    assert (stopped["status"], stopped["signal"]) == ("interrupted", "SIGTERM")
    assert 0 < stopped["frames"] < 20480
    so_far = json.loads((out / "report.json").read_text())["entries"][0]  # the stopped seed counted as not finished
    assert (so_far["returns"], so_far["pending"], so_far["iqm"]) == ([], [0], None)
    assert "seed 0 not finished" in (out / "report.md").read_text() and str(out / "report.md") in stderr

    result = run_cli("bench", str(suite), "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr
    assert f"resuming {run_dir} at frame {stopped['frames']} of 20480" in result.stdout
    finished = json.loads((run_dir / "summary.json").read_text())
    assert finished["status"] == "finished" and finished["frames"] == 20480
    assert finished["iterations"] == 20480 // 256  # one iteration per batch: none trained twice
    entry = json.loads((out / "report.json").read_text())["entries"][0]
    assert entry["seeds"] == [0] and entry["returns"] == [finished["eval_return_mean"]]


def test_the_time_left_counts_each_entry_at_its_own_rate_and_says_what_is_untimed(tmp_path):
    """A fast entry's rate must not price a slow one's frames (a suite of PPO and SAC entries was once told
    118 h at the slow entry's rate): each entry's frames left at the frames/s of its own finished seeds."""
    from rlplug.cli.run import parse_seeds
    from rlplug.run.bench import Progress, plan, read_suite

    suite = read_suite(write_suite(tmp_path / "suite.toml", """
        [[entry]]
        recipe = "CANONICAL"
        seeds = "0-2"
        frames = 1000
        [[entry]]
        recipe = "CANONICAL"
        seeds = "0"
        frames = 5000
        name = "slow"
        """), parse_seeds)
    out = tmp_path / "out"
    fast, slow = suite.entries
    done = fast.run_dir(out, 0)  # one finished seed: 1000 frames in 10 s, 100 frames/s
    done.mkdir(parents=True)
    (done / "recipe.toml").write_text(fast.recipe_path.read_text())
    (done / "summary.json").write_text(json.dumps({"status": "finished", "frames": 1000, "wall_time_s": 10.0,
                                                   "eval_return_mean": 1.0}))
    lines: list[str] = []
    untimed = Progress(plan(suite.entries[1:], out), out, say=lines.append)  # only the slow entry, untimed
    assert untimed.eta() == "; time left: not yet known (5,000 frames of entries none of whose seeds has finished)"
    progress = Progress(plan(suite.entries, out), out, say=lines.append)
    assert progress.eta() == "; about 20 s left for the entries timed so far, and 5,000 frames of entries not yet timed"
    for unit in progress.units:
        if unit.entry is slow:  # the slow entry finishes: 5000 frames in 500 s, 10 frames/s
            run_dir = slow.run_dir(out, 0)
            run_dir.mkdir(parents=True)
            (run_dir / "summary.json").write_text(json.dumps({"status": "finished", "frames": 5000,
                                                              "wall_time_s": 500.0, "eval_return_mean": 1.0}))
            progress.finished(unit, out)
    assert lines[-1].endswith("; about 20 s left (each entry at its own frames/s so far)")
