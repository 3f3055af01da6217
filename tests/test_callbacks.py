"""Callbacks (issue 27, item 4): a plugin kind, ``[[callbacks]]`` in a recipe and ``Agent.train(callbacks=...)``;
told of updates, evaluations and checkpoints, logging their own values to every logger, stopping a run cleanly;
the built-in ``stop-at-return`` and ``keep-best`` with ``eval --best`` and ``export --best``."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from conftest import CANONICAL, one_line_error, rlplug_cli, run_cli

import rlplug.recipe as recipes
from rlplug.errors import UserError

#: a short canonical run: 2048 frames (8 updates of 256), evaluations and checkpoints every 512 frames
SHORT = ["--set", "run.total_frames=2048", "--set", "run.checkpoint_every_frames=512", "--set",
         "eval.every_frames=512", "--set", "eval.episodes=2"]

PLUGIN = """
import rlplug


class Doubling:
    def on_update(self, run, metrics):
        run.log("twice_frames", 2 * run.frames)

    def on_checkpoint(self, run, path):
        run.log("checkpoint_seen", 1.0 if path.is_file() else 0.0)


class Raising:
    def on_evaluation(self, run, returns):
        raise ZeroDivisionError("no returns to divide")


class Answering:
    def on_update(self, run, metrics):
        return False  # SB3's way to stop: rlplug's callbacks call run.stop()


@rlplug.hookimpl
def rlplug_register_callbacks(register):
    register("doubling", Doubling, summary="log twice the frames")
    register("raising", Raising, summary="raise at the first evaluation")
    register("answering", Answering, summary="return False from on_update")
"""


def rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open(newline="") as file:
        return list(csv.DictReader(file))


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def callbacks(*tables: str) -> list[str]:
    return ["--set", f"callbacks=[{', '.join(tables)}]"]


def base(**tables) -> dict:
    return {"env": {"use": "gym", "id": "CartPole-v1"}, "algorithm": {"use": "ppo"}, **tables}


def test_callbacks_are_validated_with_the_recipe_torch_free():
    recipe = recipes.validate(base(callbacks=[{"use": "stop-at-return", "threshold": 100}, {"use": "keep-best"}]))
    assert [c.spec.name for c in recipe.callbacks] == ["stop-at-return", "keep-best"]
    assert recipe.resolved()["callbacks"][0] == {"use": "rlplug:stop-at-return", "threshold": 100.0}
    assert "callbacks" not in recipes.validate(base()).resolved()  # recipes of earlier runs read the same
    for tables, fragments in (([{"use": "stop-at-retrun", "threshold": 1}], ("callbacks[0].use", "stop-at-return")),
                              ([{"use": "stop-at-return"}], ("callbacks[0]", "threshold")),
                              ([{"use": "stop-at-return", "threshold": "high"}], ("callbacks[0].threshold",)),
                              ([{"use": "keep-best", "file": "x.pt"}], ("callbacks[0].file", "unknown key"))):
        with pytest.raises(UserError) as caught:
            recipes.validate(base(callbacks=tables))
        assert all(fragment in str(caught.value) for fragment in fragments), str(caught.value)


@pytest.mark.parametrize("name", ["best.pt", "best.json"])
def test_no_logger_writes_over_keep_best_files(name):
    with pytest.raises(UserError, match="a file of the run itself"):
        recipes.validate(base(loggers=[{"use": "csv", "filename": name}]))


@pytest.mark.slow
def test_list_shows_the_callbacks_kind():
    result = run_cli("list")
    assert result.returncode == 0, result.stderr
    listed = result.stdout[result.stdout.index("callbacks"):]
    assert "stop-at-return" in listed and "keep-best" in listed
    shown = json.loads(run_cli("list", "--json").stdout)["components"]["callback"]
    assert {c["name"] for c in shown} >= {"stop-at-return", "keep-best"}


@pytest.mark.slow
@pytest.mark.parametrize("flags, fragments", [
    (callbacks('{use="stop-at-retrun", threshold=1}'), ("callbacks[0].use", "did you mean 'stop-at-return'")),
    (callbacks('{use="stop-at-return", threshold="high"}'), ("callbacks[0].threshold",)),
    (callbacks('{use="stop-at-return"}'), ("callbacks[0]", "threshold")),
    (["--seeds", "0-1", "--batched", *callbacks('{use="keep-best"}')], ("callbacks", "without --batched")),
])
def test_a_bad_callbacks_table_is_one_line_and_no_run_directory(tmp_path, flags, fragments):
    out = tmp_path / "run"
    one_line_error(run_cli("run", str(CANONICAL), "--out", str(out), *SHORT, *flags), *fragments)
    assert not out.exists()


@pytest.mark.slow
def test_stop_at_return_stops_with_a_checkpoint_and_resume_goes_on(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT,
                     *callbacks('{use="stop-at-return", threshold=1}'))
    assert result.returncode == 0, result.stderr
    assert "stopped by callback stop-at-return (the evaluation return" in result.stderr
    assert f"at frame 512; continue with: python -m rlplug resume {out}" in result.stderr
    first = summary(out)
    assert first["status"] == "stopped" and first["frames"] == 512, first
    assert first["stopped_by"].startswith("callback stop-at-return (the evaluation return")
    evaluated = [row for row in rows(out) if row["eval_return_mean"]]
    assert [row["frames"] for row in evaluated] == ["512"]  # the stop came at the first evaluation
    assert float(evaluated[0]["eval_return_mean"]) == first["eval_return_mean"]
    assert (out / "checkpoints" / "frames-000000000512.pt").is_file() and (out / "checkpoint.pt").is_file()

    again = run_cli("resume", str(out))  # the callback is still there: the next evaluation stops it again
    assert again.returncode == 0, again.stderr
    assert summary(out)["status"] == "stopped" and summary(out)["frames"] == 1024
    without = run_cli("resume", str(out), "--set", "callbacks=[]")
    assert without.returncode == 0, without.stderr
    assert summary(out)["status"] == "finished" and summary(out)["frames"] == 2048
    assert [int(row["frames"]) for row in rows(out) if row["eval_return_mean"]] == [512, 1024, 1536, 2048]


@pytest.mark.slow
def test_keep_best_keeps_the_best_evaluation_and_eval_best_gives_its_return(tmp_path):
    import torch

    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT, "--set", "run.keep_checkpoints=10",
                     *callbacks('{use="keep-best"}'))
    assert result.returncode == 0, result.stderr
    evaluations = [(int(row["frames"]), float(row["eval_return_mean"])) for row in rows(out) if row["eval_return_mean"]]
    best_frames, best_return = max(evaluations, key=lambda e: (e[1], -e[0]))  # the first of the best
    note = json.loads((out / "best.json").read_text())
    assert note == {"frames": best_frames, "eval_return_mean": best_return}, (note, evaluations)
    assert max(float(row["best_eval_return"]) for row in rows(out) if row["best_eval_return"]) == best_return

    best = torch.load(out / "best.pt", weights_only=True)
    same_frame = torch.load(out / "checkpoints" / f"frames-{best_frames:012d}.pt", weights_only=True)
    assert best["frames"] == best_frames
    flat = dict(_tensors(best["algorithm"]))
    for key, tensor in _tensors(same_frame["algorithm"]):
        assert torch.equal(flat[key], tensor), key

    evaluated = run_cli("eval", str(out), "--best")
    assert evaluated.returncode == 0, evaluated.stderr
    assert f"(frame {best_frames})" in evaluated.stdout
    mean = float(re.search(r"return: mean (\S+),", evaluated.stdout).group(1))
    assert mean == pytest.approx(best_return, rel=1e-5)
    exported = run_cli("export", str(out), "--best", "--format", "torchscript", "-o", str(tmp_path / "best.ts"))
    assert exported.returncode == 0, exported.stderr
    assert f"checkpoint {out / 'best.pt'} (frame {best_frames})" in exported.stdout


def _tensors(state, prefix=""):
    """``(dotted key, tensor)`` for every tensor of a nested state."""
    import torch

    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            yield f"{prefix}{key}", value
        elif isinstance(value, dict):
            yield from _tensors(value, f"{prefix}{key}.")


@pytest.mark.slow
def test_keep_best_without_evaluations_during_training_is_warned_of(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.total_frames=256", "--set",
                     "eval.episodes=1", "--set", "eval.every_frames=0", *callbacks('{use="keep-best"}'))
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("rlplug: warning: ")]
    assert len(warned) == 1 and "callbacks[0]: callback 'keep-best'" in warned[0], result.stderr
    assert "eval.every_frames = 0" in warned[0]
    assert json.loads((out / "best.json").read_text())["frames"] == 256  # the one evaluation, at the end


@pytest.mark.slow
@pytest.mark.parametrize("command", [["eval"], ["export", "-o", "policy.onnx"]])
def test_best_without_keep_best_is_one_line(run_dir, command):
    one_line_error(run_cli(command[0], str(run_dir), "--best", *command[1:]), "no best.pt", "keep-best")
    one_line_error(run_cli(command[0], str(run_dir), "--best", "--checkpoint", "checkpoint.pt", *command[1:]),
                   "--best", "--checkpoint")


@pytest.mark.slow
def test_a_plugin_callback_logs_values_that_reach_the_csv_logger(install, tmp_path):
    where = install({"callbacks": PLUGIN}, dist="fakecallbacks")
    out = tmp_path / "run"
    result = rlplug_cli("run", str(CANONICAL), "--out", str(out), *SHORT, *callbacks('{use="doubling"}'), path=where,
                        timeout=300)
    assert result.returncode == 0, result.stderr
    logged = [row for row in rows(out) if row["twice_frames"]]
    assert [int(float(row["twice_frames"])) for row in logged] == [2 * int(row["frames"]) for row in logged]
    assert [int(row["frames"]) for row in logged] == list(range(256, 2049, 256))  # after each of the 8 updates
    assert [int(row["frames"]) for row in rows(out) if row["checkpoint_seen"] == "1.0"] == [512, 1024, 1536, 2048]


@pytest.mark.slow
@pytest.mark.parametrize("name, fragments", [
    ("raising", ("callback 'raising' (plugin callbacks 1.2.3)", "on_evaluation()", "ZeroDivisionError",
                 "no returns to divide", "plugin's mistake")),
    ("answering", ("callback 'answering' (plugin callbacks 1.2.3)", "on_update() returned False", "run.stop()")),
])
def test_a_failing_callback_is_reported_as_its_plugins(install, tmp_path, name, fragments):
    where = install({"callbacks": PLUGIN}, dist="fakecallbacks")
    out = tmp_path / "run"
    result = rlplug_cli("run", str(CANONICAL), "--out", str(out), *SHORT, *callbacks(f'{{use="{name}"}}'), path=where,
                        timeout=300)
    one_line_error(result, *fragments)
    assert summary(out)["status"] == "failed"


class StopAfter:
    """Stops the run after ``updates`` updates, logging how many it has seen."""

    def __init__(self, updates: int):
        self.updates, self.seen = updates, 0

    def on_update(self, run, metrics):
        self.seen += 1
        run.log("updates_seen", self.seen)
        if self.seen == self.updates:
            run.stop("enough updates")


@pytest.mark.slow
def test_agent_train_takes_built_callbacks_and_agent_log_reaches_the_loggers(tmp_path):
    import rlplug

    out = tmp_path / "run"
    agent = rlplug.Agent.from_recipe(CANONICAL, out=out, run={"total_frames": 2048}, eval={"episodes": 1})
    try:
        first = agent.train(callbacks=[StopAfter(2)])
        assert first["status"] == "stopped" and first["stopped_by"] == "callback StopAfter (enough updates)"
        assert first["frames"] == 512
        agent.log("my_score", 7)  # between trainings: logged when the next one starts, at frame 512
        with pytest.raises(UserError, match="finite plain number"):
            agent.log("bad", float("nan"))
        second = agent.train(max_frames=256)  # the callback was for the first training only
        assert second["status"] == "paused" and second["frames"] == 768
    finally:
        agent.close()
    table = rows(out)
    assert [(row["frames"], row["updates_seen"]) for row in table if row["updates_seen"]] == [("256", "1.0"),
                                                                                           ("512", "2.0")]
    assert [(row["frames"], row["my_score"]) for row in table if row["my_score"]] == [("512", "7.0")]
