"""Evaluations on another env (``[eval.env]``, ``Agent.train(eval_env=...)``) and the loggers' cadence
(``run.log_every_frames``, ``Agent.train(log_every_frames=...)``), through the command line and the API."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import CANONICAL, one_line_error, run_cli

#: CartPole's pole falls after 8 steps at the soonest: a deterministic policy evaluated on an env cut at 5 steps
#: gets exactly 5, and more on the recipe's own env.
SHORT_EPISODES = ["--set", "eval.env.use=gym", "--set", "eval.env.id=CartPole-v1",
                  "--set", "eval.env.max_episode_steps=5"]
FEW = ["--set", "run.checkpoint_every_frames=0", "--set", "eval.episodes=2"]


def update_rows(run: Path) -> list[dict[str, str]]:
    with (run / "metrics.csv").open() as file:
        return [row for row in csv.DictReader(file) if not row.get("eval_return_mean")]


@pytest.mark.slow
def test_recipe_eval_env_is_where_evaluations_run(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.total_frames=256", *FEW,
                     *SHORT_EPISODES)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval_return_mean"] == 5.0 and summary["eval_return_std"] == 0.0
    assert "[eval.env]" in (out / "recipe.toml").read_text()  # recorded: the run directory's recipe runs again
    again = run_cli("eval", str(out), "--episodes", "3")  # rlplug eval evaluates where the run did
    assert again.returncode == 0, again.stderr
    assert "returns: 5 5 5" in again.stdout


@pytest.mark.slow
def test_an_eval_env_of_another_task_is_refused_before_the_directory(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "eval.env.use=gym",
                     "--set", "eval.env.id=MountainCar-v0")
    one_line_error(result, "eval.env", "observation entry 'observation'", "[2]", "[4]")
    assert not out.exists()
    typo = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT_EPISODES[:4], "--set", "eval.env.max_steps=5")
    one_line_error(typo, "eval.env.max_steps", "max_episode_steps")
    assert not out.exists()


@pytest.mark.slow
def test_log_every_frames_gives_one_row_per_span_and_a_console_line_each(tmp_path):
    out = tmp_path / "run"
    # frames_per_batch is 256: 12 updates, a row at 1024, 2048 and 3072 frames
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.total_frames=3072",
                     "--set", "run.log_every_frames=1024", *FEW)
    assert result.returncode == 0, result.stderr
    assert [int(row["frames"]) for row in update_rows(out)] == [1024, 2048, 3072]
    assert "frames 2048/3072" in result.stdout  # within 10 s of the first line: printed for the row


@pytest.mark.slow
def test_agent_train_takes_a_cadence_and_an_eval_env_table(tmp_path):
    import rlplug

    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", run={"total_frames": 2048,
                                     "checkpoint_every_frames": 0}, eval={"episodes": 2})
    try:
        summary = agent.train(max_frames=1024, log_every_frames=512,
                              eval_env={"use": "gym", "id": "CartPole-v1", "max_episode_steps": 5})
        assert summary["eval_return_mean"] == 5.0
        assert [int(row["frames"]) for row in update_rows(tmp_path / "run")] == [512, 1024]
        assert agent.evaluate(episodes=3) == [5.0, 5.0, 5.0]
        agent.train()  # both kept from then on, as the recipe records them
        assert [int(row["frames"]) for row in update_rows(tmp_path / "run")] == [512, 1024, 1536, 2048]
        assert agent.run.eval_returns == [5.0, 5.0]
    finally:
        agent.close()
    resumed = rlplug.Agent.load(tmp_path / "run" / "checkpoint.pt", out=tmp_path / "loaded")
    try:
        assert resumed.run.recipe.eval.env.params["max_episode_steps"] == 5
        assert resumed.run.recipe.run.log_every_frames == 512
    finally:
        resumed.close()


@pytest.mark.slow
def test_agent_train_takes_a_built_env_and_leaves_it_open(tmp_path):
    from torchrl.envs import GymEnv, StepCounter, TransformedEnv

    import rlplug

    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter(max_steps=5))
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", run={"total_frames": 256,
                                     "checkpoint_every_frames": 0}, eval={"episodes": 2})
    try:
        assert agent.train(eval_env=env)["eval_return_mean"] == 5.0
        assert agent.evaluate(episodes=3) == [5.0, 5.0, 5.0]
    finally:
        agent.close()
    assert not env.is_closed
    env.close()


def test_agent_train_refuses_a_bad_cadence_or_eval_env(tmp_path):
    import rlplug

    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", run={"total_frames": 256})
    try:
        with pytest.raises(rlplug.UserError, match="run.log_every_frames: must be >= 0"):
            agent.train(log_every_frames=-1)
        with pytest.raises(rlplug.UserError, match="eval.env.idd: unknown key"):
            agent.train(eval_env={"use": "gym", "idd": "CartPole-v1"})
        with pytest.raises(rlplug.UserError, match="observation entry 'observation'"):
            agent.train(eval_env={"use": "gym", "id": "Pendulum-v1"})
        with pytest.raises(rlplug.UserError, match="expected an env table"):
            agent.train(eval_env=42)
        assert agent.frames == 0
    finally:
        agent.close()
