"""REDQ: TorchRL's REDQLoss built from a recipe, its terms against a plain reference of REDQ's target (the
lowest of a random subset of the target critics, minus alpha log pi) and actor term (the mean of all critics),
its state complete when built (a checkpoint resumes and evaluates), its one-line refusals, a short CLI run."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ROOT, one_line_error, run_cli
from tensordict import TensorDict
from test_formulas import known_actions
from test_offpolicy_losses import loss_of, network, replay_sample

REDQ = ROOT / "recipes" / "pendulum-redq.toml"
#: a run of seconds: a small ensemble, few gradient steps, checkpoints at 128 and 256 frames
TINY = ["--set", "run.total_frames=256", "--set", "run.checkpoint_every_frames=128", "--set", "eval.every_frames=0",
        "--set", "eval.episodes=1", "--set", "env.num_envs=2", "--set", "algorithm.critics=3",
        "--set", "algorithm.gradient_steps=2", "--set", "algorithm.batch_size=32",
        "--set", "algorithm.learning_starts=64"]


def q_value(critic, parameters, observation, action) -> torch.Tensor:
    """The critic network with one ensemble member's ``parameters`` swapped in, on (observation, action)."""
    with parameters.to_module(critic):
        data = TensorDict({"observation": observation, "action": action}, observation.shape[:-1])
        return critic(data).get("state_action_value").squeeze(-1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_redq_loss_terms_match_a_plain_reference(monkeypatch, seed):
    known_actions(monkeypatch)
    actor, critic = network("policy", "continuous", seed), network("q_value", "continuous", seed + 1)
    critics, subset_size = 4, 2
    loss = loss_of("REDQLoss", {"policy": actor, "critic": critic, "critics": [critic]}, "continuous",
                   critics=critics, subset_size=subset_size)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # targets that differ from the online critics and from each other
        loss.target_qvalue_network_params.data.apply_(
            lambda p: p.add_(torch.randn(p.shape, generator=generator)))
    data = replay_sample("continuous", 64, seed)
    torch.manual_seed(seed)
    out = loss(data.clone())

    torch.manual_seed(seed)  # the loss's first draw: the subset of target critics
    subset = torch.randperm(critics)[:subset_size]
    with torch.no_grad():
        both = TensorDict({"observation": torch.stack([data["observation"], data["next", "observation"]])}, [2, 64])
        distribution = actor.get_dist(both)
        action = distribution.rsample()
        log_prob = distribution.log_prob(action)
        if log_prob.shape != action.shape[:-1]:
            log_prob = log_prob.sum(-1)
        alpha = loss.alpha
        targets = loss.target_qvalue_network_params
        next_q = torch.stack([q_value(critic, targets[j], data["next", "observation"], action[1]) for j in subset])
        reward, terminated = data["next", "reward"].squeeze(-1), data["next", "terminated"].squeeze(-1).float()
        target = reward + 0.9 * (1 - terminated) * (next_q.min(0).values - alpha * log_prob[1])
        online = loss.qvalue_network_params
        q = torch.stack([q_value(critic, online[i], data["observation"], data["action"]) for i in range(critics)])
        q_new = torch.stack([q_value(critic, online[i], data["observation"], action[0]) for i in range(critics)])
        all_targets = torch.stack([q_value(critic, targets[j], data["next", "observation"], action[1])
                                   for j in range(critics)])
    torch.testing.assert_close(out["target_value"], target, rtol=1e-4, atol=1e-5)
    assert float(out["loss_qvalue"].detach()) == pytest.approx(float(((q - target) ** 2).mean()), rel=1e-4)
    actor_term = (alpha * log_prob[0] - q_new).mean()  # the mean of all the critics, not the lowest
    assert float(out["loss_actor"].detach()) == pytest.approx(float(actor_term), rel=1e-4, abs=1e-6)
    lowest_of_all = reward + 0.9 * (1 - terminated) * (all_targets.min(0).values - alpha * log_prob[1])
    if not torch.allclose(next_q.min(0).values, all_targets.min(0).values):
        assert not torch.allclose(out["target_value"], lowest_of_all), "the subset, not every critic"


@pytest.mark.slow
def test_a_redq_run_resumes_and_evaluates_its_checkpoint(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(REDQ), "--out", str(out), *TINY, timeout=600)
    assert result.returncode == 0, result.stderr
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    assert any(key.endswith("target_entropy_buffer") for key in _keys(state)), "the loss's whole state is saved"
    evaluated = run_cli("eval", str(out), "--episodes", "1", timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr
    resumed = run_cli("resume", str(out), "--set", "run.total_frames=384", timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "summary.json").read_text())["frames"] == 384


def _keys(value, prefix=""):
    """Every key path of nested dicts (a checkpoint's state), as strings."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield f"{prefix}{key}"
            yield from _keys(inner, f"{prefix}{key}.")


@pytest.mark.slow
@pytest.mark.parametrize("flags, fragments", [
    (["--set", "algorithm.subset_size=3"], ["algorithm.subset_size", "smaller than the ensemble (critics = 3)"]),
    (["--set", "algorithm.critics=1"], ["algorithm.critics", ">= 2"]),
    (["--set", "algorithm.replay_buffer.use=prioritized"], ["algorithm.replay_buffer", "importance weights"]),
    (["--seeds", "0-1", "--batched"], ["algorithm.loss", "'REDQLoss'", "cannot compute several seeds at once"]),
])
def test_redq_refusals_are_one_line(tmp_path, flags, fragments):
    out = tmp_path / "run"
    result = run_cli("run", str(REDQ), "--out", str(out), *TINY, *flags, timeout=300)
    one_line_error(result, *fragments)
    assert not out.exists(), "refused before the run directory is made"
