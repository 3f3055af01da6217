"""A third-party off-policy loss that breaks the contract is refused as its plugin's mistake, as early as it can be
known: at build (learner names, targets) or after the first gradient step (state that appears in training)."""

from __future__ import annotations

import pytest
from conftest import ROOT, one_line_error, rlplug_cli

pytestmark = pytest.mark.slow  # subprocess runs

#: rlplug's own DDPG loss (TorchRL's DDPGLoss), each variant spoiling one part of the contract
PLUGIN = """
import torch
import rlplug
from rlplug.plugins.algorithms.ddpg import make_ddpg_loss


def make_odd_loss(networks, settings, action_spec=None, fault: str = "none"):
    loss = make_ddpg_loss(networks, settings, action_spec)
    if fault in ("no-targets", "declared"):
        del loss.update_targets
        if fault == "declared":
            loss.no_targets = True
    if fault == "learner":
        loss.parameter_groups = {"actor": loss.parameter_groups["actor"], "critc": loss.parameter_groups["critic"]}
        loss.term_learners = {"loss_actor": "actor", "loss_value": "critc"}
    if fault == "term":
        loss.term_learners = {"loss_actor": "actor", "loss_value": "value"}
    if fault == "grows":
        def grow(module, inputs, output):
            if "grown" not in module._buffers:
                module.register_buffer("grown", torch.zeros(1))
        loss.register_forward_hook(grow)
    return loss


make_odd_loss.serves = ("ddpg",)


@rlplug.hookimpl
def rlplug_register_losses(register):
    register("odd-loss", make_odd_loss)
"""


def run_with(tmp_path, install, fault: str):
    where = install({"oddloss": PLUGIN}, dist="oddloss")
    return rlplug_cli("run", str(ROOT / "recipes" / "pendulum-ddpg.toml"), "--out", str(tmp_path / "run"),
                      "--set", f'algorithm.loss={{use = "odd-loss", fault = "{fault}"}}',
                      "--set", "run.total_frames=400", "--set", "algorithm.learning_starts=200",
                      "--set", "algorithm.random_frames=200", "--set", "eval.episodes=1", path=where, timeout=240)


@pytest.mark.parametrize("fault, says", [
    ("no-targets", "defines update_targets (moving its target networks), or declares no_targets = True"),
    ("learner", "its parameter_groups name the learner 'critc', which ddpg does not have (its learners: actor, "
                "critic)"),
    ("term", "its term_learners send 'loss_value' to the learner 'value'"),
    ("grows", "its state gained 'grown' in its first gradient step"),
])
def test_a_loss_that_breaks_the_contract_is_refused_as_its_plugins_mistake(tmp_path, install, fault, says):
    result = run_with(tmp_path, install, fault)
    assert result.returncode == 2, result.stderr
    line = one_line_error(result, "loss 'odd-loss' (plugin oddloss 1.2.3)", says, "plugin's mistake")
    assert "Traceback" not in result.stderr, line


def test_a_loss_that_declares_no_targets_trains(tmp_path, install):
    result = run_with(tmp_path, install, "declared")
    assert result.returncode == 0, result.stderr
