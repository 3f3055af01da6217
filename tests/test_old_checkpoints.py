"""Run directories written before the algorithms moved onto the kit (commit 86ad181) still evaluate and resume.

``tests/data/checkpoints-86ad181/`` holds one short run per family as that commit wrote it: the on-policy
``cartpole-ppo`` (1,024 frames), the off-policy actor-critic ``pendulum-sac`` (300 frames) and the value-based
``cartpole-dqn`` (512 frames), each with its replay. They were made with::

    git worktree add /tmp/old 86ad181 && cd /tmp/old
    PYTHONPATH=. python -m rlplug run recipes/cartpole-ppo.toml --out ppo --set run.total_frames=1024 \\
        --set eval.every_frames=0 --set eval.episodes=1
    PYTHONPATH=. python -m rlplug run recipes/pendulum-sac.toml --out sac --set run.total_frames=300 \\
        --set algorithm.learning_starts=200 --set algorithm.replay_buffer.capacity=400 ...
    PYTHONPATH=. python -m rlplug run recipes/cartpole-dqn.toml --out dqn --set run.total_frames=512 \\
        --set algorithm.learning_starts=256 --set algorithm.replay_buffer.capacity=600 ...

The expected returns are what ``rlplug eval RUN --episodes 2`` printed at 86ad181 itself: a checkpoint whose
weights load into other modules (a renamed entry, a network built in another order) evaluates to other returns.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

OLD_RUNS = ROOT / "tests" / "data" / "checkpoints-86ad181"
#: ``rlplug eval RUN --episodes 2`` at 86ad181
RETURNS_AT_86AD181 = {"ppo": "71 77", "sac": "-761.153 -1315.27", "dqn": "9 9"}


@pytest.fixture
def old_run(request, tmp_path) -> Path:
    copy = tmp_path / request.param
    shutil.copytree(OLD_RUNS / request.param, copy)
    return copy


@pytest.mark.parametrize("old_run", sorted(RETURNS_AT_86AD181), indirect=True)
def test_a_run_written_at_86ad181_evaluates_to_the_returns_it_had_then(old_run):
    result = run_cli("eval", str(old_run), "--episodes", "2", timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"returns: {RETURNS_AT_86AD181[old_run.name]}" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("old_run", sorted(RETURNS_AT_86AD181), indirect=True)
def test_a_run_written_at_86ad181_resumes_to_more_frames(old_run):
    before = json.loads((old_run / "summary.json").read_text())["frames"]
    result = run_cli("resume", str(old_run), "--set", "run.total_frames=2048", timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads((old_run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] == 2048 > before
    assert (old_run / "checkpoints" / "frames-000000002048.pt").is_file()
