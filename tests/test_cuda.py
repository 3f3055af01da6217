"""On a CUDA device (marked ``cuda``: skipped where there is none): the cnn network's forward pass and a
training step, short runs with ``run.device = "cuda"`` for vectors, images, Dict observations,
MultiDiscrete actions, TorchRL's ClipPPOLoss and the off-policy family, and batched seeds."""

from __future__ import annotations

import json

import pytest
import torch
import toy_spaces  # noqa: F401  (registers the RlplugToy ids)
from conftest import CANONICAL, run_cli

import rlplug
from rlplug.core.acting import ActorView
from rlplug.plugins.algorithms.onpolicy.base import log_prob_and_entropy

pytestmark = pytest.mark.cuda

PIXEL, DICT, BANDIT = "RlplugToy/BrightPixel-v0", "RlplugToy/ImageAndVector-v0", "RlplugToy/TwoPartBandit-v0"


def test_cnn_forward_and_a_training_step_on_cuda():
    env = rlplug.make("env", "gym", id=PIXEL, num_envs=4, device="cuda")
    specs = {"observation_spec": env.observation_spec, "action_spec": env.action_spec, "device": "cuda"}
    policy = rlplug.make("network", "cnn", role="policy", **specs)
    critic = rlplug.make("network", "cnn", role="value", **specs)
    state = env.reset()
    assert state.get("observation").device.type == "cuda" and state.get("observation").dtype == torch.uint8
    action = policy(state.clone()).get("action")
    assert action.device.type == "cuda"
    parameters = [*policy.parameters(), *critic.parameters()]
    before = [p.detach().clone() for p in parameters]
    optimiser = torch.optim.Adam(parameters, lr=1e-3)
    log_prob, entropy = log_prob_and_entropy(ActorView.of(policy), state.get("observation"), action,
                                             with_entropy=True)
    loss = -log_prob.mean() - entropy.mean() + critic(state.clone()).get("state_value").pow(2).mean()
    loss.backward()
    optimiser.step()
    assert all(p.device.type == "cuda" for p in parameters)
    assert any(not torch.equal(a, b) for a, b in zip(before, parameters))


@pytest.mark.parametrize("recipe", [
    {"env": {"use": "gym", "id": PIXEL, "num_envs": 4},
     "algorithm": {"use": "ppo", "frames_per_batch": 64, "minibatch_size": 32, "policy": {"use": "cnn"},
                   "critic": {"use": "cnn"}}},
    {"env": {"use": "gym", "id": DICT, "num_envs": 4},
     "algorithm": {"use": "dqn", "q_network": {"use": "cnn"}, "learning_starts": 64, "batch_size": 32}},
    {"env": {"use": "gym", "id": BANDIT, "num_envs": 4},
     "algorithm": {"use": "ppo", "frames_per_batch": 64, "minibatch_size": 32}},
    {"env": {"use": "gym", "id": "CartPole-v1", "num_envs": 4},
     "algorithm": {"use": "ppo", "frames_per_batch": 64, "minibatch_size": 32, "loss": {"use": "ClipPPOLoss"}}},
    {"env": {"use": "gym", "id": "Pendulum-v1", "num_envs": 2},
     "algorithm": {"use": "sac", "learning_starts": 64, "batch_size": 32}},
    {"env": {"use": "gym", "id": "Pendulum-v1", "num_envs": 2},
     "algorithm": {"use": "td3", "learning_starts": 64, "batch_size": 32}},
], ids=["image-ppo", "dict-dqn", "multidiscrete-ppo", "torchrl-clip-ppo", "vector-sac", "vector-td3"])
def test_a_short_run_on_cuda(tmp_path, recipe):
    agent = rlplug.Agent.from_recipe({**recipe, "run": {"total_frames": 256, "device": "cuda"},
                                      "eval": {"episodes": 2}, "loggers": []}, out=tmp_path / "run")
    assert agent.train()["status"] == "finished"
    assert all(p.device.type == "cuda" for p in agent.run.algorithm.parameters)


@pytest.mark.slow
def test_the_canonical_recipe_runs_on_cuda_through_the_cli(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.device=cuda",
                     "--set", "run.total_frames=2048", "--set", "eval.episodes=2")
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["cartpole-ppo.toml", "pendulum-sac.toml"])
def test_batched_seeds_run_on_cuda(tmp_path, recipe):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL.parent / recipe), "--seeds", "0-2", "--batched", "--out", str(out),
                     "--set", "run.device=cuda", "--set", "run.total_frames=1024", "--set", "eval.episodes=1",
                     "--set", "eval.every_frames=0")
    assert result.returncode == 0, result.stderr
    for seed in range(3):
        assert json.loads((out / f"seed-{seed}" / "summary.json").read_text())["status"] == "finished"


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["cartpole-ppo.toml", "pendulum-sac.toml"])
def test_a_compiled_run_on_cuda_learns_on_cuda_graphs(tmp_path, recipe):
    """``run.compile`` on CUDA: the loss replayed as CUDA graphs, whose outputs the next replay overwrites (the
    metrics must have kept copies)."""
    agent = rlplug.Agent.from_recipe(CANONICAL.parent / recipe, out=tmp_path / "run", eval={"episodes": 1},
                                     run={"total_frames": 1024, "device": "cuda", "compile": True},
                                     loggers=[{"use": "csv"}])
    summary = agent.train()
    assert summary["status"] == "finished"
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert len(rows) > 2 and "nan" not in rows[-1].lower()
