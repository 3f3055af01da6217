"""Values that are legal in form but absurd in size (or that name nothing), and long updates a signal must
still stop: each is refused in one line at validation, exit status 2, with no directory left behind, or (for
the stop) ends within seconds with a checkpoint. Through the real CLI in a subprocess."""

from __future__ import annotations

import signal
import time

import pytest

from conftest import CANONICAL, ROOT, run_cli, start_cli, wait_for
from test_cli import assert_user_error

DQN = ROOT / "recipes" / "cartpole-dqn.toml"


@pytest.mark.parametrize("override, fragments", [
    ("run.num_threads=100000", ["run.num_threads", "at most 1024"]),
    ("eval.episodes=1000000000", ["eval.episodes", "at most 100000"]),
    ("run.device=cpu:99", ["run.device", "'cpu:99' is no device", "use 'cpu'"]),
    ("run.total_frames=1000000000000000000", ["run.total_frames", "at most 1e+15", "30 years"]),
    ("algorithm.lr=1e308", ["algorithm.lr", "must be in (0, 10]", "1e+308"]),
    ("algorithm.lr=" + "9" * 400, ["algorithm.lr", "beyond the range of floating-point numbers"]),
])
def test_absurd_sizes_are_refused_before_any_directory(tmp_path, override, fragments):
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "run"), "--set", override)
    assert_user_error(result, *fragments)
    assert not (tmp_path / "run").exists()
