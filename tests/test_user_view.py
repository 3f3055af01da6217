"""What a user sees (issue 42, items 9 and 16), through the real command line: ``list``'s summaries whole and
without reST quotes, ``show`` and ``init`` without rlplug's internal checker names, ``init`` writing only the
network keys a network's role reads, a run naming its directory at once and never reporting more than 100%, a
callback's stop evaluated, a resume's summary going on from the checkpoint's, a hint that names only keys the
env has, and Ray failing to start as one line."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from conftest import CANONICAL, one_line_error, rlplug_cli, run_cli

#: a canonical run of 8-frame batches on one env: a 252-frame total ends on frame 256
TINY = ["--set", "env.num_envs=1", "--set", "algorithm.frames_per_batch=8", "--set", "algorithm.minibatch_size=8",
        "--set", "algorithm.epochs=1", "--set", "eval.every_frames=0", "--set", "eval.episodes=1",
        "--set", "run.checkpoint_every_frames=128"]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# -- list, show, init -----------------------------------------------------------------------------------------


def test_list_gives_whole_sentences_without_double_backticks():
    result = run_cli("list")
    assert result.returncode == 0, result.stderr
    assert "``" not in result.stdout
    # the docstring's first line stops at "on the run's"; the summary is its first paragraph's sentence
    row = next(line for line in result.stdout.splitlines() if line.startswith("torch-classic "))
    assert row.rstrip().endswith("every copy stepped at once on the run's device."), row
    listed = json.loads(run_cli("list", "--json").stdout)["components"]
    loss = next(c for c in listed["loss"] if c["name"] == "sac-loss")
    assert loss["summary"].endswith("Its options are the algorithm's keys."), loss["summary"]


@pytest.mark.parametrize("args", [("show", "gym"), ("init", "ppo", "--env", "CartPole-v1")])
def test_show_and_init_name_no_internal_checker(args):
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    assert "checked by" not in result.stdout and "_problem" not in result.stdout
    assert "known_gym_id" not in result.stdout


def tables(text: str) -> dict:
    return tomllib.loads(text)["algorithm"]


def test_init_writes_continuous_policy_keys_only_for_a_continuous_stochastic_policy():
    sac = run_cli("init", "sac", "--env", "Pendulum-v1")
    assert sac.returncode == 0, sac.stderr
    algorithm = tables(sac.stdout)
    assert {"log_std", "log_std_init", "squash"} <= set(algorithm["policy"])
    assert not {"log_std", "log_std_init", "squash"} & set(algorithm["critic"])  # a Q critic has no such head
    assert "unused as critic here" in sac.stdout
    ppo = tables(run_cli("init", "ppo", "--env", "CartPole-v1").stdout)  # a categorical policy and a value
    for network in ("policy", "critic"):
        assert not {"log_std", "log_std_init", "squash"} & set(ppo[network]), network
    ddpg = tables(run_cli("init", "ddpg", "--env", "Pendulum-v1").stdout)  # a deterministic actor
    assert "squash" not in ddpg["policy"]


# -- a run's console and summary ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The canonical recipe trained for 252 frames in 8-frame batches: ``(run directory, the CLI's result)``."""
    out = tmp_path_factory.mktemp("tiny") / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), *TINY, "--set", "run.total_frames=252")
    assert result.returncode == 0, result.stderr
    return out, result


def test_a_run_names_its_directory_first_and_never_reports_past_100_percent(tiny_run):
    out, result = tiny_run
    lines = result.stdout.splitlines()
    assert lines[0] == f"run directory: {out}", lines[:3]  # before any training line, not only at the end
    progress = [line for line in lines if line.startswith("frames ")]
    assert progress and not any(re.search(r"\((1[0-9]{2}|[2-9][0-9]{2})%\)", line) for line in progress), progress
    assert not any("256/252" in line for line in progress), progress
    assert any(line.startswith("frames 256 (done: 252 asked") for line in progress), progress


def test_a_resumed_runs_summary_goes_on_from_its_checkpoint(tiny_run, tmp_path):
    first_dir, _ = tiny_run
    out = tmp_path / "run"
    shutil.copytree(first_dir, out)
    first = summary(out)
    assert first["train_return_recent"] is not None and first["wall_time_s"] > 0
    # one more batch of 8 steps from a fresh reset: no CartPole episode ends within it
    result = run_cli("resume", str(out), "--set", "run.total_frames=260")
    assert result.returncode == 0, result.stderr
    resumed = summary(out)
    assert resumed["frames"] == 264
    assert resumed["train_return_recent"] == first["train_return_recent"]
    assert resumed["wall_time_s"] > 0.9 * first["wall_time_s"], (first["wall_time_s"], resumed["wall_time_s"])


def test_training_returns_with_normalize_rewards_are_the_envs_own(tmp_path):
    """CartPole pays 1 a step and no episode ends before its 8th: scaled rewards summed far less (2.4 here)."""
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "env.normalize_rewards=true",
                     "--set", "run.total_frames=1024", "--set", "eval.every_frames=0", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    with (out / "metrics.csv").open(newline="") as file:
        returns = [float(row["episode_return"]) for row in csv.DictReader(file) if row.get("episode_return")]
    assert returns and min(returns) >= 8, returns
    assert summary(out)["train_return_recent"] == returns[-1]
    console = [float(line.rsplit("return ", 1)[1]) for line in result.stdout.splitlines()
               if line.startswith("frames ") and "  return " in line]
    assert console and min(console) >= 8, result.stdout


STOPPER = """
import rlplug


class StopFirst:
    def on_update(self, run, metrics):
        run.stop("one update is enough")


@rlplug.hookimpl
def rlplug_register_callbacks(register):
    register("stop-first", StopFirst, summary="stop after the first update")
"""


def test_a_run_stopped_by_a_callback_is_evaluated(install, tmp_path):
    where = install({"callbacks": STOPPER}, dist="fakestopper")
    out = tmp_path / "run"
    result = rlplug_cli("run", str(CANONICAL), "--out", str(out), *TINY, "--set", "run.total_frames=1000",
                        "--set", 'callbacks=[{use="stop-first"}]', path=where, timeout=300)
    assert result.returncode == 0, result.stderr
    ended = summary(out)
    assert ended["status"] == "stopped" and ended["frames"] == 8, ended
    assert ended["eval_return_mean"] is not None  # evaluated at the stop, as at an end
    with (out / "metrics.csv").open(newline="") as file:
        assert [row["frames"] for row in csv.DictReader(file) if row.get("eval_return_mean")] == ["8"]


# -- hints and startup failures -------------------------------------------------------------------------------


def test_minatar_on_torch_classic_with_mlp_suggests_no_key_the_env_lacks(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", 'env={use="torch-classic", '
                     'id="MinAtar/Breakout-v1"}', "--set", "run.total_frames=64")
    line = one_line_error(result, "algorithm.policy", "mlp reads one-dimensional observations", "use cnn")
    assert "set env.flatten_observations" not in line  # torch-classic has no such key
    assert "the gym env's flatten_observations" in line
    assert not out.exists()


@pytest.mark.xdist_group("ray")
def test_ray_failing_to_start_is_one_line_exit_2(tmp_path):
    """A real ray.init failure: Ray's temporary directory under a file, which it cannot create."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "runner.use=ray",
                     env={"RAY_TMPDIR": str(blocker / "ray")}, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("rlplug: error: ")]
    assert len(errors) == 1, result.stderr
    assert "runner: Ray could not start a local instance for this run" in errors[0]
    assert "RAY_TMPDIR" in errors[0] and "then run again" in errors[0]
    # nothing else but Ray's own log lines (its notice on token authentication)
    assert all(line == errors[0] or re.search(r"\b(WARNING|INFO)\b", line)
               for line in result.stderr.splitlines() if line.strip()), result.stderr
    assert not out.exists()
    assert os.path.isfile(blocker)


#: a plugin whose import makes ray.init fail as Ray's does where its raylet never registers (ray/_private/node.py)
RAY_TIMEOUT = """
import ray

import rlplug


def init(*args, **kwargs):
    raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                    "failed to startup or the GCS has become overloaded.")


ray.init = init


class Nothing:
    pass


@rlplug.hookimpl
def rlplug_register_callbacks(register):
    register("nothing", Nothing, summary="does nothing")
"""


@pytest.mark.xdist_group("ray")
def test_ray_timing_out_at_startup_is_one_line_exit_2(install, tmp_path):
    """Ray's own startup timeout (an Exception, not an OSError: a traceback before)."""
    where = install({"raytimeout": RAY_TIMEOUT}, dist="fakeraytimeout")
    out = tmp_path / "run"
    result = rlplug_cli("run", str(CANONICAL), "--out", str(out), "--set", "runner.use=ray", path=where, timeout=120)
    one_line_error(result, "runner: Ray could not start a local instance for this run (The current node timed out "
                   "during startup)", "then run again")
    assert not out.exists()
