"""The example plugin's algorithm, SAC-N, built on rlplug's algorithm kit alone: its loss against known values, and
what the kit gives it as it gives the built-ins (resume, ``rlplug set``, seeds trained together, Ray's gradient
mode), through the real command line as a user of the plugin runs it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import rlplug

HERE = Path(__file__).resolve().parent.parent
RECIPE = HERE / "pendulum-sac-n.toml"
#: a few hundred frames: the first gradient steps at 100, evaluations of one episode
TINY = ["--set", "run.total_frames=400", "--set", "eval.every_frames=200", "--set", "eval.episodes=1",
        "--set", "algorithm.batch_size=32", "--set", "run.checkpoint_every_frames=200"]


def rlplug_command(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLPLUG_STRICT_PLUGINS": "1"}
    return subprocess.run([sys.executable, "-m", "rlplug", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def transitions(rows: int = 16) -> TensorDict:
    generator = torch.Generator().manual_seed(0)
    observation = torch.randn(rows, 3, generator=generator)
    return TensorDict({
        "observation": observation, "action": torch.rand(rows, 1, generator=generator) * 4 - 2,
        "next": {"observation": observation + 0.1, "reward": torch.randn(rows, 1, generator=generator),
                 "terminated": torch.arange(rows).reshape(-1, 1) % 5 == 0},
    }, batch_size=[rows])


def test_the_plugin_imports_only_rlplug_public_modules():
    private = ("rlplug.plugins", "rlplug.core", "rlplug.run", "rlplug.cli", "rlplug.registry")
    for path in (HERE / "rlplug_example_plugin").glob("*.py"):
        tree = ast.parse(path.read_text())
        names = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        names += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        assert not [name for name in names if name.startswith(private)], path.name


def test_every_critic_regresses_on_the_lowest_target_of_the_ensemble(tmp_path):
    """Known targets: three target critics held at -100, 5 and 7, alpha fixed near 0, so every critic's target is
    r + gamma (1 - terminated) (-100) and the critics' term is the sum of their squared errors."""
    agent = rlplug.Agent.from_recipe(RECIPE, out=tmp_path / "run", **{
        "algorithm.critics": 3, "algorithm.initial_entropy_coef": 1e-9, "algorithm.learn_entropy_coef": False})
    loss = agent.run.algorithm.loss_module
    with torch.no_grad():
        for target, value in zip(loss.target_critics, (-100.0, 5.0, 7.0)):
            layers = [m for m in target.modules() if isinstance(m, torch.nn.Linear)]
            layers[-1].weight.zero_()
            layers[-1].bias.fill_(value)
    data = transitions()
    out = loss(data.clone())
    gamma = agent.run.algorithm.config.gamma
    expected_target = data["next", "reward"] + gamma * (~data["next", "terminated"]) * -100.0
    with torch.no_grad():
        values = [critic(data.clone())["state_action_value"] for critic in loss.critic_networks]
    expected = sum(((value - expected_target) ** 2).mean() for value in values)
    assert out["loss_qvalue"].item() == pytest.approx(expected.item(), rel=1e-4)
    agent.close()


def test_at_two_critics_it_is_rlplugs_sac(tmp_path):
    """SAC-N with N = 2 takes the same terms as rlplug's own SAC on the same networks and the same draws."""
    recipe = tomllib.loads(RECIPE.read_text())
    recipe["algorithm"]["critics"] = 2
    sac_n = rlplug.Agent.from_recipe(recipe, out=tmp_path / "n")
    del recipe["algorithm"]["critics"]
    recipe["algorithm"]["use"] = "sac"
    sac = rlplug.Agent.from_recipe(recipe, out=tmp_path / "sac")
    sac.run.algorithm.loss_module.load_state_dict(sac_n.run.algorithm.loss_module.state_dict())
    data = transitions()
    outs = []
    for agent in (sac_n, sac):
        torch.manual_seed(3)
        outs.append(agent.run.algorithm.loss_module(data.clone()))
    for key in ("loss_qvalue", "loss_actor", "loss_alpha"):
        assert outs[0][key].item() == pytest.approx(outs[1][key].item(), rel=1e-5), key
    sac_n.close()
    sac.close()


@pytest.mark.slow
def test_resume_and_set_as_for_a_built_in(tmp_path):
    out = tmp_path / "run"
    stop_early = ["--set", "callbacks=[{use='stop-at-return', threshold=-1e9}]"]
    ran = rlplug_command("run", str(RECIPE), "--out", str(out), *TINY, *stop_early)
    assert ran.returncode == 0, ran.stderr
    asked = rlplug_command("set", str(out), "algorithm.lr=5e-4", "algorithm.alpha=0.2", "algorithm.critics=3")
    assert asked.returncode == 2 and "is fixed" in asked.stderr  # the ensemble's size is fixed for a run
    asked = rlplug_command("set", str(out), "algorithm.lr=5e-4", "algorithm.alpha=0.2")
    assert asked.returncode == 0, asked.stderr
    resumed = rlplug_command("resume", str(out), "--set", "callbacks=[]")
    assert resumed.returncode == 0, resumed.stderr
    assert "algorithm.lr 0.001 -> 0.0005" in resumed.stdout and "algorithm.alpha" in resumed.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == 400


@pytest.mark.slow
def test_seeds_trained_together(tmp_path):
    ran = rlplug_command("run", str(RECIPE), "--seeds", "0-1", "--batched", "--out", str(tmp_path / "seeds"), *TINY)
    assert ran.returncode == 0, ran.stderr
    for seed in (0, 1):
        assert json.loads((tmp_path / "seeds" / f"seed-{seed}" / "summary.json").read_text())["frames"] == 400


@pytest.mark.xdist_group("ray")
@pytest.mark.slow
def test_rays_gradient_mode(tmp_path):
    pytest.importorskip("ray")
    ran = rlplug_command("run", str(RECIPE), "--out", str(tmp_path / "ray"), *TINY,
                         "--set", 'runner={use="ray", workers=1, mode="gradients"}')
    assert ran.returncode == 0, ran.stderr
    assert json.loads((tmp_path / "ray" / "summary.json").read_text())["frames"] == 400
