"""Shared test helpers: the real CLI in a subprocess, and the canonical recipe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CANONICAL = ROOT / "recipes" / "cartpole-ppo.toml"


def run_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m rlplug ARGS`` as a user would run it, from the repository root; the finished process.

    rlplug's own switches (``RLPLUG_STRICT_PLUGINS``, ``RLPLUG_DEBUG``) are not inherited, only given.
    """
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("RLPLUG_")}
    full_env = {**inherited, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "rlplug", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli
