"""Shared test helpers: the real CLI in a subprocess, and the canonical recipe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CANONICAL = ROOT / "recipes" / "cartpole-ppo.toml"


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m rlplug ARGS`` as a user would run it; returns the finished process."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("RLPLUG_STRICT_PLUGINS", None) if env is None or "RLPLUG_STRICT_PLUGINS" not in env else None
    return subprocess.run([sys.executable, "-m", "rlplug", *args], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli
