"""``rlplug tune``: a real Optuna study in SQLite through the real command line, on tiny trials of the
canonical recipe; the space file's errors, checked before any trial."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import CANONICAL, ROOT, one_line_error, run_cli

from rlplug.errors import UserError

TINY = ["--set", "run.total_frames=256", "--set", "eval.every_frames=128", "--set", "eval.episodes=1",
        "--set", "algorithm.frames_per_batch=128", "--set", "algorithm.minibatch_size=128"]
SPACE = '''
"algorithm.lr" = {type = "float", low = 1e-4, high = 3e-3, log = true}
algorithm.epochs = {type = "int", low = 1, high = 3}
"algorithm.policy.hidden" = {type = "categorical", choices = [[16], [32, 32]]}
'''
PNG = b"\x89PNG\r\n\x1a\n"


def rows(out: Path) -> list[dict[str, str]]:
    with open(out / "trials.csv", newline="") as file:
        return list(csv.DictReader(file))


def study_trials(out: Path):
    import optuna

    return optuna.load_study(study_name="rlplug", storage=f"sqlite:///{out / 'study.db'}").get_trials()


@pytest.mark.slow
def test_tune_survives_a_kill_continues_and_its_best_recipe_runs(tmp_path):
    space, out = tmp_path / "space.toml", tmp_path / "study"
    space.write_text(SPACE)
    args = ["tune", str(CANONICAL), "--space", str(space), "--out", str(out), *TINY]
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen([sys.executable, "-m", "rlplug", *args, "--trials", "5"], cwd=ROOT, env=environment,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in first.stdout:  # killed once the third trial is under way: two finished, one in flight
        seen.append(line)
        if line.startswith("trial 2: frame 128"):
            first.send_signal(signal.SIGKILL)
            break
    first.wait()
    first.stdout.close()
    assert first.returncode == -signal.SIGKILL, "".join(seen)

    second = run_cli(*args, "--trials", "1")
    assert second.returncode == 0, second.stderr
    assert "3 earlier trials (1 left running by a stopped tune, marked failed); running 1 more" in second.stdout
    table = rows(out)
    assert [(row["number"], row["state"]) for row in table] == [
        ("0", "COMPLETE"), ("1", "COMPLETE"), ("2", "FAIL"), ("3", "COMPLETE")]
    assert table[2]["error"] == "interrupted"
    for row in table:
        assert 1e-4 <= float(row["algorithm.lr"]) <= 3e-3 and row["algorithm.epochs"] in "123"
        assert json.loads(row["algorithm.policy.hidden"]) in ([16], [32, 32])
        assert (out / row["run_dir"] / "recipe.toml").is_file()
    finished = [trial for trial in study_trials(out) if trial.state.name == "COMPLETE"]
    for trial in finished:  # the pruner was fed each evaluation, and the value is the run's final one
        assert sorted(trial.intermediate_values) == [128, 256]
        summary = json.loads((out / trial.user_attrs["run_dir"] / "summary.json").read_text())
        assert trial.value == pytest.approx(summary["eval_return_mean"])
    for name in ("optimization_history.png", "param_importances.png"):
        assert (out / name).read_bytes()[:8] == PNG

    best = max(finished, key=lambda trial: trial.value)
    assert f"best: trial {best.number}," in second.stdout
    recipe = tomllib.loads((out / "best.toml").read_text())
    assert recipe["algorithm"]["lr"] == pytest.approx(best.user_attrs["values"]["algorithm.lr"])
    assert recipe["algorithm"]["policy"]["hidden"] == best.user_attrs["values"]["algorithm.policy.hidden"]
    ran = run_cli("run", str(out / "best.toml"), "--out", str(tmp_path / "best"))  # as it is
    assert ran.returncode == 0, ran.stderr


@pytest.mark.slow
def test_tune_in_two_processes_with_seeds_takes_the_iqm(tmp_path):
    space, out = tmp_path / "space.toml", tmp_path / "study"
    space.write_text('"algorithm.lr" = {type = "float", low = 1e-4, high = 3e-3}\n')
    result = run_cli("tune", str(CANONICAL), "--space", str(space), "--out", str(out), "--trials", "2",
                     "--jobs", "2", "--seeds", "0-1", *TINY, "--set", "eval.every_frames=0")
    assert result.returncode == 0, result.stderr
    assert "running 2 more in 2 processes" in result.stdout
    table = rows(out)
    assert sorted(row["state"] for row in table) == ["COMPLETE", "COMPLETE"]
    for row in table:
        trial_dir = out / row["run_dir"]
        returns = [json.loads((trial_dir / f"seed-{seed}" / "summary.json").read_text())["eval_return_mean"]
                   for seed in (0, 1)]
        aggregate = json.loads((trial_dir / "aggregate.json").read_text())
        assert float(row["value"]) == pytest.approx(aggregate["iqm"]) == pytest.approx(sum(returns) / 2)
        assert aggregate["ci95"]["iqm"] is not None



@pytest.mark.slow
def test_tune_errors_are_one_line_before_any_trial(tmp_path):
    space, out = tmp_path / "space.toml", tmp_path / "study"
    space.write_text('"algorithm.lrr" = {type = "float", low = 1e-4, high = 3e-3}\n')
    one_line_error(run_cli("tune", str(CANONICAL), "--space", str(space), "--trials", "1", "--out", str(out)),
                   str(space), "algorithm.lrr", "did you mean 'lr'")
    assert not out.exists()
    (out / "other").mkdir(parents=True)
    space.write_text('"algorithm.lr" = {type = "float", low = 1e-4, high = 3e-3}\n')
    one_line_error(run_cli("tune", str(CANONICAL), "--space", str(space), "--trials", "1", "--out", str(out)),
                   str(out), "holds no rlplug tune study")


def check(tmp_path: Path, text: str) -> None:
    from rlplug import recipe as recipes
    from rlplug.run.tune import Study
    from rlplug.run.tune_files import check_space, read_space

    space = tmp_path / "space.toml"
    space.write_text(text)
    study = Study(CANONICAL, recipes.read_toml(CANONICAL), [], None, tmp_path / "out")
    check_space(read_space(space), study, space, None)


@pytest.mark.parametrize("text, fragments", [
    ('"algorithm.lr" = {type = "float", low = -1.0, high = 3e-3}', ["algorithm.lr: low = -1.0: must be > 0"]),
    ('"algorithm.epochs" = {type = "float", low = 1.0, high = 4.0}',
     ["algorithm.epochs: a value between low and high = 2.146", "expected an integer"]),
    ('"algorithm.lr" = {type = "flaot", low = 1e-4, high = 3e-3}',
     ["algorithm.lr: type 'flaot'", "did you mean 'float'"]),
    ('"algorithm.lr" = {type = "float", low = 1e-4, hihg = 3e-3}', ["unknown field 'hihg'", "did you mean 'high'"]),
    ('"algorithm.lr" = {type = "float", low = 0.0, high = 3e-3, log = true}', ["log = true needs low > 0"]),
    ('"algorithm.lr" = {type = "float", low = 3e-3, high = 1e-4}', ["low = 0.003 is above high = 0.0001"]),
    ('"algorithm.policy.activation" = {type = "categorical", choices = ["tanh", "rleu"]}',
     ["algorithm.policy.activation: choices[1] = 'rleu'"]),
    ('"algorithm.epochs" = {type = "categorical", choices = []}', ["needs choices"]),
    ('"algorithm.lr" = 0.1', ["algorithm.lr: expected a table"]),
    ('', ["no keys to search"]),
])
def test_space_errors_name_the_space_file_and_key(tmp_path, text, fragments):
    with pytest.raises(UserError) as raised:
        check(tmp_path, text)
    message = str(raised.value)
    assert message.startswith(str(tmp_path / "space.toml")) and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_a_good_space_passes_with_nested_and_quoted_keys(tmp_path):
    check(tmp_path, SPACE)
