"""ruff (on the package, its tests, benchmarks and example plugin) and mypy (on the package), as CI runs them: the
Protocols and annotations are contracts a tool checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tool(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_ruff_finds_nothing():
    result = tool("ruff", "check", "rlplug", "tests", "benchmarks", "examples", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_finds_nothing(tmp_path):
    # its cache in tmp_path: a cache left by another mypy version or tree must not decide the result
    result = tool("mypy", "--cache-dir", str(tmp_path / "mypy"), timeout=900)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
