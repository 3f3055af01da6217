"""``rlplug tune`` on what it finds in ``--out`` and on absurd input: a study.db that is not this tune's, a
directory another tune holds, paths it cannot write, a space nested thousands deep, more jobs than cores,
more trials than a study can number, a space no trial could run with. Each through the real command line,
refused in one line before anything is written."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CANONICAL, one_line_error, run_cli, start_cli

TINY = ["--set", "run.total_frames=128", "--set", "eval.every_frames=0", "--set", "eval.episodes=1",
        "--set", "algorithm.frames_per_batch=128", "--set", "algorithm.minibatch_size=128"]
SPACE = '"algorithm.lr" = {type = "float", low = 1e-4, high = 3e-3, log = true}\n'
EARLIER = {"trials.csv": b"number,state,value\n0,COMPLETE,21.0\n", "best.toml": b"# the best of an earlier tune\n",
           "optimization_history.png": b"\x89PNG\r\n\x1a\nan earlier plot"}


def tune(tmp_path: Path, out: Path, *args: str, space: str = SPACE, timeout: float = 300):
    (tmp_path / "space.toml").write_text(space)
    return run_cli("tune", str(CANONICAL), "--space", str(tmp_path / "space.toml"), "--out", str(out),
                   *TINY, *args, timeout=timeout)


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every path under ``directory`` with its bytes (None for a directory)."""
    return {str(path.relative_to(directory)): None if path.is_dir() else path.read_bytes()
            for path in sorted(directory.rglob("*"))}


def optuna_study(database: Path, name: str) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.create_study(study_name=name, storage=f"sqlite:///{database}")


def empty(database: Path) -> None:
    database.write_bytes(b"")


def foreign_tables(database: Path) -> None:
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE invoices (number INTEGER, total REAL)")
        db.execute("INSERT INTO invoices VALUES (1, 9.5)")


def another_study(database: Path) -> None:
    optuna_study(database, "someone-elses")


def random_bytes(database: Path) -> None:
    database.write_bytes(os.urandom(8192))


def truncated(database: Path) -> None:
    optuna_study(database, "rlplug")
    whole = database.read_bytes()
    database.write_bytes(whole[: len(whole) // 2])


def a_directory(database: Path) -> None:
    database.mkdir()
    (database / "inside").write_text("x")


@pytest.mark.slow
@pytest.mark.parametrize("make, fragment", [
    (empty, "study.db holds no study"),
    (foreign_tables, "study.db is an SQLite database of something else (tables invoices)"),
    (another_study, "study.db holds Optuna studies of other names ('someone-elses')"),
    (random_bytes, "study.db is not a readable SQLite database"),
    (truncated, "study.db is not a readable SQLite database"),
    (a_directory, "study.db is not a file"),
])
def test_a_study_db_that_is_not_this_tunes_is_refused_and_nothing_changes(tmp_path, make, fragment):
    out = tmp_path / "study"
    out.mkdir()
    for name, data in EARLIER.items():
        (out / name).write_bytes(data)
    make(out / "study.db")
    before = snapshot(out)
    one_line_error(tune(tmp_path, out, "--trials", "1"), f"--out {out}: ", fragment, "nothing was changed",
                   "choose another --out")
    assert snapshot(out) == before


@pytest.mark.slow
def test_a_space_nested_3000_deep_is_one_line(tmp_path):
    out = tmp_path / "study"
    deep = "a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n"  # the TOML parser recurses once per level
    one_line_error(tune(tmp_path, out, "--trials", "1", space=deep), str(tmp_path / "space.toml"),
                   "nested too deeply")
    assert not out.exists()


def test_space_tables_nested_3000_deep_are_one_error(tmp_path):
    from rlplug.errors import UserError
    from rlplug.run.tune_files import read_space

    space = tmp_path / "space.toml"
    space.write_text("[" + ".".join(["a"] * 3000) + "]\nx = {type = \"int\", low = 1, high = 2}\n")
    with pytest.raises(UserError, match="nested too deeply"):
        read_space(space)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's /sys, where no one may make a directory")
def test_an_out_that_cannot_be_made_says_so_in_one_line(tmp_path):
    out = Path("/sys/rlplug-tune-test")
    line = one_line_error(tune(tmp_path, out, "--trials", "1"), f"--out {out}: cannot write")
    assert "checkpoints" not in line and ".tmp" not in line


@pytest.mark.slow
@pytest.mark.skipif(os.name == "posix" and os.geteuid() == 0, reason="root writes in read-only directories")
def test_a_read_only_study_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    optuna_study(out / "study.db", "rlplug")
    for path in (out / "study.db", out):
        path.chmod(0o555)
    try:
        line = one_line_error(tune(tmp_path, out, "--trials", "1"), f"--out {out}: cannot write to")
    finally:
        out.chmod(0o755)
    assert "checkpoints" not in line and ".tmp" not in line


@pytest.mark.slow
def test_a_file_tune_cannot_write_is_named_not_its_temporary_file(tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    optuna_study(out / "study.db", "rlplug")
    (out / "trials.csv").mkdir()  # where the table goes: its rename fails after the trial
    line = one_line_error(tune(tmp_path, out, "--trials", "1"),
                          f"--out {out}: cannot write {out / 'trials.csv'}",
                          f"run the same tune again: the finished trials are kept in {out / 'study.db'}")
    assert "checkpoints" not in line and ".tmp" not in line


@pytest.mark.slow
def test_a_tune_on_a_directory_another_tune_holds_says_so(tmp_path):
    """The first tune holds the lock and has not yet made its study: the second is told another tune runs."""
    out = tmp_path / "study"
    out.mkdir()
    hold = (f"import fcntl, time\nlock = open({str(out / 'tune.lock')!r}, 'a')\nfcntl.flock(lock, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\ntime.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        before = snapshot(out)
        one_line_error(tune(tmp_path, out, "--trials", "1"),
                       f"--out {out}: another rlplug tune is running in this directory")
        assert snapshot(out) == before
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


@pytest.mark.slow
def test_two_tunes_started_at_once_one_runs_and_the_other_says_why_not(tmp_path):
    out = tmp_path / "study"
    (tmp_path / "space.toml").write_text(SPACE)
    args = ["tune", str(CANONICAL), "--space", str(tmp_path / "space.toml"), "--out", str(out), *TINY,
            "--trials", "1000"]
    tunes = [start_cli(*args), start_cli(*args)]
    try:
        deadline = time.monotonic() + 240
        while all(process.poll() is None for process in tunes):
            assert time.monotonic() < deadline, "neither tune stopped"
            time.sleep(0.1)
        loser, winner = sorted(tunes, key=lambda process: process.poll() is None)
        stdout, stderr = loser.communicate()
        one_line_error(subprocess.CompletedProcess(args, loser.returncode, stdout, stderr),
                       f"--out {out}: another rlplug tune is running in this directory")
        assert winner.poll() is None, winner.communicate()
    finally:
        for process in tunes:
            if process.poll() is None:
                process.kill()
            process.communicate()


@pytest.mark.slow
def test_more_jobs_than_cores_is_one_warning(tmp_path):
    jobs = len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else os.cpu_count() + 1
    result = tune(tmp_path, tmp_path / "study", "--trials", "1", "--jobs", str(jobs))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"rlplug: warning: --jobs {jobs}: more processes than the "), lines


@pytest.mark.slow
def test_more_trials_than_a_study_can_number_are_refused(tmp_path):
    out = tmp_path / "study"
    one_line_error(tune(tmp_path, out, "--trials", str(10**20), timeout=120), f"--trials {10**20}: ",
                   "more trials than a study can number")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("space, fragments", [
    ('"algorithm.lr" = {type = "float", low = -1.0, high = -0.5}', ["algorithm.lr: low = -1.0: must be > 0"]),
    ('"algorithm.epochs" = {type = "int", low = -5, high = 0}', ["algorithm.epochs: low = -5: must be >= 1"]),
    ('"algorithm.policy.use" = {type = "categorical", choices = ["mlp", "cnn"]}',  # valid, found only by building
     ["algorithm.policy.use: choices[1] = 'cnn' cannot run: ", "this env observes none"]),
])
def test_a_space_value_no_trial_could_run_with_is_refused_before_the_first(tmp_path, space, fragments):
    out = tmp_path / "study"
    one_line_error(tune(tmp_path, out, "--trials", "2", space=space + "\n"), str(tmp_path / "space.toml"),
                   *fragments)
    assert not out.exists()
