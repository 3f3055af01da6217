"""``rlplug record``: a run's policy on its env, written as a Minari dataset that minari itself reads."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import numpy as np
import pytest
from conftest import ROOT, one_line_error, recorded_pendulum, run_cli

pytestmark = pytest.mark.slow  # a run is trained, and the command line started

pytest.importorskip("minari")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return recorded_pendulum(tmp_path_factory)


def read_in_plain_minari(dataset, code: str) -> str:
    """``code`` run in a fresh Python with minari's root at the dataset's folder and ``data`` its dataset, loaded by
    ``minari.load_dataset`` alone: its stdout."""
    script = f"import minari, numpy as np\ndata = minari.load_dataset({dataset.name!r})\n{code}"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT,
                            env={**os.environ, "MINARI_DATASETS_PATH": str(dataset.parent)})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_plain_minari_loads_what_record_wrote(recorded):
    run, dataset = recorded
    shown = read_in_plain_minari(dataset, """
print(data.total_episodes, data.total_steps, data.env_spec.id, data.env_spec.max_episode_steps)
episode = next(iter(data))
print(episode.observations.shape, episode.actions.shape, episode.rewards.shape, episode.terminations.shape,
      episode.truncations.shape, bool(episode.truncations[-1]), bool(episode.truncations[:-1].any()))
print(sorted(data.storage.metadata))
print(type(data.recover_environment().unwrapped).__name__)
""").splitlines()
    assert shown[0] == "3 600 Pendulum-v1 200"
    assert shown[1] == "(201, 3) (200, 1) (200,) (200,) (200,) True False"  # the final observation kept
    for key in ("rlplug_env", "rlplug_recipe", "rlplug_behaviour", "env_spec", "algorithm_name"):
        assert f"'{key}'" in shown[2]
    assert shown[3] == "PendulumEnv"


def test_the_recipe_and_returns_are_the_runs(recorded):
    run, dataset = recorded
    shown = read_in_plain_minari(dataset, """
print(data.storage.metadata['rlplug_recipe'])
print('returns', *[float(episode.rewards.sum()) for episode in data])
""")
    recipe_text, returns = shown.split("returns")
    recipe = tomllib.loads(recipe_text)
    assert recipe["algorithm"]["use"] == "rlplug:sac" and recipe["env"]["id"] == "Pendulum-v1"
    assert recipe == tomllib.loads((run / "recipe.toml").read_text()) | {"provenance": recipe["provenance"]}
    assert len(returns.split()) == 3 and all(float(r) < 0 for r in returns.split())


def test_deterministic_records_repeat_and_noise_changes_the_actions(recorded, tmp_path):
    run, dataset = recorded
    for name, flags in (("again-v0", []), ("noisy-v0", ["--noise", "0.3"]), ("epsilon-v0", ["--epsilon", "0.5"])):
        result = run_cli("record", str(run), "--episodes", "1", "--out", str(tmp_path / name), *flags)
        assert result.returncode == 0, result.stderr
    code = "episode = next(iter(data)); np.save('{}', episode.actions)"
    actions = {}
    for folder in (dataset, *(tmp_path / name for name in ("again-v0", "noisy-v0", "epsilon-v0"))):
        read_in_plain_minari(folder, code.format(tmp_path / f"{folder.name}.npy"))
        actions[folder.name] = np.load(tmp_path / f"{folder.name}.npy")
    assert np.array_equal(actions["again-v0"], actions["pendulum-sac-v0"])  # the first episode, the same seed
    for name in ("noisy-v0", "epsilon-v0"):
        assert not np.array_equal(actions[name], actions["again-v0"]) and np.abs(actions[name]).max() <= 2.0


def test_frames_records_whole_episodes_until_reached(recorded, tmp_path):
    run, _ = recorded
    out = tmp_path / "frames-v0"
    result = run_cli("record", str(run), "--frames", "250", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "episodes: 2, steps: 400" in result.stdout


def test_mistakes_are_one_line_and_write_nothing(recorded, tmp_path):
    run, dataset = recorded
    before = sorted(p.name for p in dataset.parent.iterdir())
    one_line_error(run_cli("record", str(run), "--episodes", "1", "--out", str(dataset)), "already exists")
    one_line_error(run_cli("record", str(run), "--out", str(tmp_path / "x")), "--episodes N, --frames N")
    one_line_error(run_cli("record", str(tmp_path / "nowhere"), "--episodes", "1", "--out", str(tmp_path / "x")),
                   "no such directory")
    assert sorted(p.name for p in dataset.parent.iterdir()) == before and not (tmp_path / "x").exists()


def test_an_interrupted_record_leaves_no_dataset(recorded, tmp_path, monkeypatch):
    """The dataset is written beside --out and renamed at the end: stopped while writing, neither is left."""
    from rlplug.run import record

    def interrupted(folder, *args, **kwargs):
        (folder / "data").mkdir()
        (folder / "data" / "metadata.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(record, "write_dataset", interrupted)
    out = tmp_path / "killed-v0"
    with pytest.raises(KeyboardInterrupt):
        record.record(recorded[0] / "checkpoint.pt", out, episodes=1, frames=None, behaviour=record.Behaviour(),
                      seed=None)
    assert list(tmp_path.iterdir()) == []
