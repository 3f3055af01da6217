"""What docs/from-rllte.md maps rllte's ``DistributedAgent.train(save_interval, num_eval_episodes, th_compile)``
onto: ``Agent.train(checkpoint_every_frames=, eval_episodes=, compile=)``, each changing what the run does from
that call on, recorded in its recipe (checkpoints, ``resume`` and ``Agent.load`` keep it) and validated as the
recipe key is."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import pickle
import re
import subprocess
import sys
import tomllib

import pytest
from conftest import CANONICAL, ROOT, run_cli

import rlplug
from rlplug.recipe import EvalSettings, RunSettings, load
from rlplug.registry import get_registry

#: CartPole PPO collects 256 frames an update; evaluations of 2 episodes keep each run short
SHORT = {"run": {"total_frames": 2048, "checkpoint_every_frames": 0, "keep_checkpoints": 10},
         "eval": {"episodes": 2}}


def kept_frames(run) -> list[int]:
    return [int(path.stem.split("-")[1]) for path in sorted((run / "checkpoints").glob("frames-*.pt"))]


@pytest.mark.slow
def test_checkpoint_every_frames_writes_checkpoints_at_the_new_interval_and_resume_keeps_it(tmp_path):
    out = tmp_path / "run"
    agent = rlplug.Agent.from_recipe(CANONICAL, out=out, **SHORT)
    try:
        agent.train(max_frames=512)
        assert kept_frames(out) == [512]  # the recipe's 0: a checkpoint at the end of the call only
        agent.train(max_frames=1024, checkpoint_every_frames=512)
        assert kept_frames(out) == [512, 1024, 1536]
    finally:
        agent.close()
    result = run_cli("resume", str(out))  # the interval is in the checkpoint's recipe: resume goes on with it
    assert result.returncode == 0, result.stderr
    assert kept_frames(out) == [512, 1024, 1536, 2048]
    assert tomllib.loads((out / "recipe.toml").read_text())["run"]["checkpoint_every_frames"] == 512
    result = run_cli("resume", str(out), "--set", "run.total_frames=3072")
    assert result.returncode == 0, result.stderr
    assert kept_frames(out) == [512, 1024, 1536, 2048, 2560, 3072]


@pytest.mark.slow
def test_eval_episodes_sets_the_episodes_of_every_later_evaluation(tmp_path):
    out = tmp_path / "run"
    agent = rlplug.Agent.from_recipe(CANONICAL, out=out, **SHORT)
    try:
        agent.train(max_frames=256)
        assert len(agent.run.eval_returns) == 2
        summary = agent.train(max_frames=256, eval_episodes=5)
        assert len(agent.run.eval_returns) == 5 and summary["eval_return_mean"] is not None
        assert agent.algorithm.num_test_episodes == 5  # pytorchrl's number reports the run's eval.episodes
        assert len(agent.evaluate()) == 5  # rllte's eval(num_eval_episodes) without an argument: the new count
        assert len(agent.evaluate(episodes=3)) == 3
    finally:
        agent.close()
    loaded = rlplug.Agent.load(out / "checkpoint.pt", out=tmp_path / "loaded")
    try:
        assert loaded.run.recipe.eval.episodes == 5
        assert len(loaded.evaluate()) == 5
    finally:
        loaded.close()
    result = run_cli("eval", str(out))  # rlplug eval plays the run's episode count
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split("returns:")[1].split("\n")[0].split()) == 5


@pytest.mark.slow
def test_compile_compiles_the_update_once_records_it_and_cannot_be_undone_in_the_process(tmp_path, monkeypatch):
    out = tmp_path / "run"
    agent = rlplug.Agent.from_recipe(CANONICAL, out=out, run={**SHORT["run"], "total_frames": 256},
                                     eval=SHORT["eval"])
    calls = []
    algorithm_class = type(agent.algorithm)
    compile_update = algorithm_class.compile_update
    monkeypatch.setattr(algorithm_class, "compile_update", lambda self: calls.append(compile_update(self)))
    try:
        agent.train()
        assert calls == []
        agent.train(compile=True)  # at total_frames already: recorded and compiled, no update to wait for
        assert len(calls) == 1
        agent.train(compile=True)
        assert len(calls) == 1  # compiled once
        with pytest.raises(rlplug.UserError, match="compile=False: .*resume its directory with --set "
                                                   "run.compile=false"):
            agent.train(compile=False)
        assert agent.run.recipe.run.compile is True
    finally:
        agent.close()
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    assert tomllib.loads((out / "recipe.toml").read_text())["run"]["compile"] is True


def test_the_new_keywords_are_validated_as_their_recipe_keys_and_a_refusal_changes_nothing(tmp_path, monkeypatch):
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", **SHORT)
    before = agent.run.recipe.resolved()
    eval_env = agent.run.eval_env
    try:
        with pytest.raises(rlplug.UserError, match="eval.episodes: must be >= 1"):
            agent.train(eval_episodes=0)
        with pytest.raises(rlplug.UserError, match="run.checkpoint_every_frames: must be >= 0"):
            agent.train(checkpoint_every_frames=-1)
        with pytest.raises(rlplug.UserError, match="run.compile"):
            agent.train(compile="yes")
        # a refused compile (an algorithm without compile_update) leaves the other keywords of the call unapplied
        monkeypatch.setattr(type(agent.algorithm), "compile_update", None)
        with pytest.raises(rlplug.UserError, match="does not declare compile_update") as caught:
            agent.train(compile=True, eval_episodes=4, checkpoint_every_frames=512)
        assert caught.value.path == "run.compile"
        assert agent.run.recipe.resolved() == before and agent.run.eval_env is eval_env
        assert agent.frames == 0 and not (tmp_path / "run" / "recipe.toml").exists()
    finally:
        agent.close()


# -- docs/from-rllte.md -----------------------------------------------------------------------------------------

RLLTE_NAMES = ["env", "eval_env", "tag", "seed", "device", "num_steps", "num_actors", "num_learners", "num_storages",
               "kwargs", "num_train_steps", "init_model_path", "log_interval", "eval_interval", "save_interval",
               "num_eval_episodes", "th_compile", ".eval", ".run", ".update"]
#: the keys issue 28's other parts add to the ray runner: the page documents them before this rlplug may have them
COMING_RUNNER_KEYS = {"learners", "storages"}


def test_the_rllte_page_maps_every_name_onto_keys_and_keywords_rlplug_has(tmp_path):
    text = (ROOT / "docs" / "from-rllte.md").read_text()
    first_cells = {line.split("|")[1] for line in text.splitlines() if line.startswith("| `")}
    for name in RLLTE_NAMES:
        assert any(f"`{name}" in cell or f"{name}`" in cell for cell in first_cells), name
    fields = {"run": {f.name for f in dataclasses.fields(RunSettings)},
              "eval": {f.name for f in dataclasses.fields(EvalSettings)},
              "runner": set(get_registry().lookup("runner", "ray").schema.params) | COMING_RUNNER_KEYS | {"use"}}
    named = set(re.findall(r"`(run|eval|runner)\.([a-z_]+)", text))
    assert {("runner", "learners"), ("runner", "storages"), ("run", "compile")} <= named
    for table, key in named:
        assert key in fields[table], f"{table}.{key}"
    keywords = set(inspect.signature(rlplug.Agent.train).parameters)
    for keyword in re.findall(r"agent\.train\((?:[^)]*?, )?(\w+)=", text):
        assert keyword in keywords, keyword
    example = tmp_path / "my-impala.toml"  # the page's recipe is one
    example.write_text(text.split("```toml\n", 1)[1].split("```", 1)[0])
    recipe = load(example)
    assert recipe.run.checkpoint_every_frames == 100_000 and recipe.eval.episodes == 10


# -- the scaling benchmark's env-bound workload (benchmarks/ray_scaling.py) ---------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("minatar") is None, reason="needs minatar (rlplug[minatar])")
def test_a_minatar_env_builds_from_its_pickled_component_in_a_fresh_process():
    """What a Ray worker does with the recipe's env: MinAtar's ids are registered on request only (validation asks
    in the process that reads the recipe), so the factory registers them where it runs."""
    recipe = load(ROOT / "recipes" / "minatar-breakout-ppo.toml", ["env.num_envs=2"])
    code = ("import pickle, sys; from rlplug.core.envs import build_env; "
            "env = build_env(pickle.loads(sys.stdin.buffer.read()), device='cpu'); print(list(env.batch_size))")
    result = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(recipe.env), capture_output=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr.decode()[-500:]
    assert result.stdout.decode().strip().endswith("[2]")
