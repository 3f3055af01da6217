"""The Python API's recipe-as-a-dict and ``evaluate(episodes=N)``."""

from __future__ import annotations

import tomllib
from collections import Counter

import pytest

import rlplug
from conftest import CANONICAL

SHORT = {"run": {"total_frames": 512}, "eval": {"episodes": 4}, "loggers": [{"use": "csv"}]}


@pytest.mark.slow
def test_a_recipe_dict_builds_what_its_file_builds_and_is_left_unchanged(tmp_path):
    data = tomllib.loads(CANONICAL.read_text())
    before = tomllib.loads(CANONICAL.read_text())
    outcomes = []
    for recipe, name in ((data, "dict"), (CANONICAL, "file")):  # one after the other: torch's RNG is global
        agent = rlplug.Agent.from_recipe(recipe, out=tmp_path / name, **SHORT, **{"algorithm.lr": 3e-4})
        outcomes.append((agent.run.recipe.resolved(), agent.train()["frames"], agent.evaluate()))
    assert data == before, "the caller's dict is not changed by the overrides"
    assert outcomes[0][0]["algorithm"]["lr"] == 3e-4
    assert outcomes[0] == outcomes[1]  # the same recipe and seed: the same run, the same returns


def test_a_recipe_dict_is_validated_like_a_file():
    data = {"env": {"use": "gym", "id": "CartPole-v1"}, "algorithm": {"use": "ppo", "lrr": 1e-3}}
    with pytest.raises(rlplug.UserError, match=r"<recipe dict>: algorithm.lrr: unknown key 'lrr'.*did you mean 'lr'"):
        rlplug.Agent.from_recipe(data)
    with pytest.raises(rlplug.UserError, match=r"algorithm.epochs: .*must be >= 1"):
        rlplug.Agent.from_recipe({**data, "algorithm": {"use": "ppo"}}, **{"algorithm.epochs": 0})


@pytest.mark.slow
def test_evaluate_takes_a_number_of_episodes_from_the_runs_own_start_states(tmp_path):
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", **SHORT, env={"normalize_observations": "running"})
    agent.train()
    statistics = {k: v.clone() if hasattr(v, "clone") else v for k, v in agent.run.env_statistics().items()}
    default = agent.evaluate()
    three = agent.evaluate(episodes=3)
    assert len(default) == 4 and len(three) == 3
    assert agent.evaluate(episodes=3) == three  # deterministic, statistics frozen
    assert not Counter(three) - Counter(default), "the first three start states of the run's own evaluation"
    assert len(agent.evaluate(episodes=7)) == 7
    after = agent.run.env_statistics()
    assert all((after[k] == v).all() if hasattr(v, "all") else after[k] == v for k, v in statistics.items())
    for bad in (0, -1, 2.5, True):
        with pytest.raises(rlplug.UserError, match="episodes"):
            agent.evaluate(episodes=bad)
