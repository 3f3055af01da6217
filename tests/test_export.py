"""``rlplug export``: the written file, run by onnxruntime (or ``torch.jit.load``) without rlplug, acts as
``Agent.select_action`` does, on a discrete and a continuous recipe with observation normalisation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import CANONICAL, ROOT, one_line_error, run_cli

TINY = ["--set", "eval.every_frames=0", "--set", "eval.episodes=1", "--set", "env.normalize_observations=running",
        "--set", "env.clip_observations=5.0"]


def observations(env_id: str, count: int, seed: int = 0) -> np.ndarray:
    """Observations a policy meets: a random walk through the env, and the same scaled up (clipping)."""
    import gymnasium

    env = gymnasium.make(env_id)
    env.action_space.seed(seed)
    seen, (observation, _) = [], env.reset(seed=seed)
    while len(seen) < count // 2:
        seen.append(observation)
        observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            observation, _ = env.reset()
    env.close()
    seen = np.asarray(seen, dtype=np.float32)
    return np.concatenate([seen, seen * np.float32(3.0)])


def trained(recipe: Path, out: Path, frames: int) -> Path:
    result = run_cli("run", str(recipe), "--out", str(out), "--set", f"run.total_frames={frames}", *TINY)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> Path:
    return trained(CANONICAL, tmp_path_factory.mktemp("cartpole") / "run", 512)


def exported(run_dir: Path, fmt: str, path: Path) -> str:
    result = run_cli("export", str(run_dir), "--format", fmt, "-o", str(path))
    assert result.returncode == 0, result.stderr
    assert path.is_file()
    return result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_onnx_file_acts_as_agent_select_action(tmp_path, cartpole, env_id):
    import onnx
    import onnxruntime

    import rlplug

    if env_id == "CartPole-v1":
        run_dir = cartpole
    else:
        run_dir = trained(ROOT / "recipes" / "pendulum-ppo.toml", tmp_path / "run", 512)
    stdout = exported(run_dir, "onnx", tmp_path / "policy.onnx")
    assert "observation normalisation: included" in stdout

    batch = observations(env_id, 400)
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["action"], {"observation": batch})[0]
    agent = rlplug.Agent.load(run_dir / "checkpoint.pt", out=tmp_path / "agent")
    want = agent.select_action(batch)
    one = session.run(["action"], {"observation": batch[:1]})[0]  # the batch dimension is free

    model = onnx.load(str(tmp_path / "policy.onnx"))
    described = {output.name: output.doc_string for output in model.graph.output}
    if env_id == "CartPole-v1":
        assert got.dtype == np.int64 and got.shape == (len(batch),)
        np.testing.assert_array_equal(got, want)
        assert len(set(got.tolist())) == 2  # both actions chosen: the comparison covers both branches
        assert "index" in described["action"] and "not logits" in described["action"]
        assert "logits" in described
    else:
        assert got.dtype == np.float32 and got.shape == (len(batch), 1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert set(described) == {"action"}
    np.testing.assert_array_equal(one, got[:1])
    metadata = {entry.key: entry.value for entry in model.metadata_props}
    assert metadata["rlplug.observation_normalization"].startswith("included")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")
def test_torchscript_file_runs_with_torch_alone(tmp_path, cartpole):
    import torch

    import rlplug

    run_dir = cartpole
    exported(run_dir, "torchscript", tmp_path / "policy.pt")
    extra = {"rlplug.json": ""}
    module = torch.jit.load(str(tmp_path / "policy.pt"), _extra_files=extra)
    batch = observations("CartPole-v1", 200)
    action, logits = module(torch.from_numpy(batch))
    agent = rlplug.Agent.load(run_dir / "checkpoint.pt", out=tmp_path / "agent")
    np.testing.assert_array_equal(action.numpy(), agent.select_action(batch))
    assert logits.shape == (len(batch), 2)
    assert json.loads(extra["rlplug.json"])["action_type"] == "discrete"
    one_line_error(run_cli("export", str(run_dir), "-o", str(tmp_path)), "is a directory", "name the file")



@pytest.mark.slow
def test_export_errors_are_one_line(tmp_path):
    one_line_error(run_cli("export", str(tmp_path / "nothing"), "-o", str(tmp_path / "p.onnx")),
                   "nothing", "no such directory")
    (tmp_path / "empty").mkdir()
    one_line_error(run_cli("export", str(tmp_path / "empty"), "-o", str(tmp_path / "p.onnx")), "empty")
    assert not (tmp_path / "p.onnx").exists()
