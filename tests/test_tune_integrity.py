"""``rlplug tune`` on what it finds in ``--out`` and on absurd input: a study.db that is not this tune's, a
directory another tune holds, paths it cannot write, a space nested thousands deep, more jobs than cores,
more trials than a study can number, a space no trial could run with. Each through the real command line,
refused in one line before anything is written."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from conftest import CANONICAL, one_line_error, run_cli

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
