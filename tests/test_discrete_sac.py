"""Discrete SAC: TorchRL's DiscreteSACLoss built through the registered factory, against a plain reference of
Christodoulou's terms on hand-made transitions (the exact expectation over the policy's actions in the critics'
soft target and in the actor's term, the lower of the twin critics, the entropy coefficient's term towards
target_entropy_weight x log(actions)); a CLI run that resumes and takes ``rlplug set``; ``show`` and ``list``;
one-line refusals."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, one_line_error, run_cli, stopped_then_set_and_resumed
from tensordict import TensorDict

import rlplug

RECIPE = ROOT / "recipes" / "cartpole-discrete-sac.toml"
SETTINGS = SimpleNamespace(gamma=0.9, initial_entropy_coef=0.3, learn_entropy_coef=True, target_entropy=None,
                           target_entropy_weight=0.7)
TINY = ["--set", "run.total_frames=256", "--set", "run.checkpoint_every_frames=128", "--set", "eval.episodes=1",
        "--set", "algorithm.steps_per_update=64", "--set", "algorithm.gradient_steps=2",
        "--set", "algorithm.batch_size=16", "--set", "algorithm.learning_starts=64",
        "--set", "algorithm.random_frames=64", "--set", "algorithm.replay_buffer.capacity=1000"]


def specs() -> dict:
    env = rlplug.make("env", "gym", id="CartPole-v1")
    return {"observation_spec": env.observation_spec, "action_spec": env.action_spec}


def network(role: str, seed: int):
    torch.manual_seed(seed)
    return rlplug.make("network", "mlp", role=role, hidden=[16], **specs())


def transitions(rows: int, seed: int) -> TensorDict:
    generator = torch.Generator().manual_seed(seed)
    action = torch.nn.functional.one_hot(torch.randint(2, (rows,), generator=generator), 2)
    terminated = torch.rand(rows, 1, generator=generator) < 0.3
    return TensorDict({
        "observation": torch.randn(rows, 4, generator=generator), "action": action,
        "next": {"observation": torch.randn(rows, 4, generator=generator),
                 "reward": torch.randn(rows, 1, generator=generator), "terminated": terminated},
    }, [rows])


def q_values(critic, parameters, observation: torch.Tensor) -> torch.Tensor:
    """``[rows, actions]``: the critic with one twin's ``parameters`` swapped in."""
    with parameters.to_module(critic):
        return critic(TensorDict({"observation": observation}, observation.shape[:1])).get("action_value")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_discrete_sac_terms_are_the_papers(seed):
    actor, critic = network("policy", seed), network("q_values", seed + 1)
    loss = rlplug.make("loss", "DiscreteSACLoss", networks={"policy": actor, "critic": critic, "critics": [critic]},
                       settings=SETTINGS, **specs())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # twins unlike each other, targets unlike them
        for params in (loss.qvalue_network_params, loss.target_qvalue_network_params):
            for value in params.values(True, True):
                value.add_(0.5 * torch.randn(value.shape, generator=generator))
    data = transitions(32, seed)
    out = loss(data.clone())

    alpha = SETTINGS.initial_entropy_coef
    with torch.no_grad():
        def policy(observation):  # probabilities and their logs, [rows, actions]
            logits = actor.module[0](TensorDict({"observation": observation}, observation.shape[:1])).get("logits")
            return logits.softmax(-1), logits.log_softmax(-1)

        def lowest(params, observation):
            return torch.stack([q_values(critic, params[i], observation) for i in range(2)]).min(0).values

        next_p, next_log_p = policy(data["next", "observation"])
        next_value = (next_p * (lowest(loss.target_qvalue_network_params, data["next", "observation"])
                                - alpha * next_log_p)).sum(-1, keepdim=True)
        target = data["next", "reward"] + SETTINGS.gamma * (1 - data["next", "terminated"].float()) * next_value
        taken = data["action"].argmax(-1, keepdim=True)
        critic_term = sum(((q_values(critic, loss.qvalue_network_params[i], data["observation"]).gather(-1, taken)
                            - target) ** 2).mean() for i in range(2))
        p, log_p = policy(data["observation"])
        actor_term = (p * (alpha * log_p - lowest(loss.qvalue_network_params, data["observation"]))).sum(-1).mean()
        target_entropy = SETTINGS.target_entropy_weight * math.log(2)
        alpha_term = (-math.log(alpha) * ((p * log_p).sum(-1) + target_entropy)).mean()
    assert float(out["loss_qvalue"].detach()) == pytest.approx(float(critic_term), rel=1e-4)
    assert float(out["loss_actor"].detach()) == pytest.approx(float(actor_term), rel=1e-4, abs=1e-6)
    assert float(out["loss_alpha"].detach()) == pytest.approx(float(alpha_term), rel=1e-4, abs=1e-6)
    assert set(loss.parameter_groups) == {"actor", "critic", "entropy"}
    assert loss.term_learners == {"loss_actor": "actor", "loss_qvalue": "critic", "loss_alpha": "entropy"}


def test_show_and_list_name_discrete_sac():
    shown = run_cli("show", "discrete-sac")
    assert shown.returncode == 0, shown.stderr
    for fragment in ("Soft actor-critic for one Discrete action", "target_entropy_weight", "initial_entropy_coef",
                     "tau", "DiscreteSACLoss"):
        assert fragment in shown.stdout, fragment
    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    assert "discrete-sac" in listed.stdout and "DiscreteSACLoss" in listed.stdout


@pytest.mark.slow
def test_a_discrete_sac_run_stops_takes_set_and_resumes(tmp_path):
    out = tmp_path / "run"
    resumed = stopped_then_set_and_resumed(RECIPE, out, TINY, "algorithm.lr=[1e-4, 2e-4]",
                                           resume_flags=("--set", "eval.every_frames=0"))
    assert "frame 128: algorithm.lr" in resumed.stdout and "(rlplug set)" in resumed.stdout, resumed.stdout
    assert json.loads((out / "summary.json").read_text())["frames"] == 256
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    assert state["parameters"] == {"lr": [1e-4, 2e-4]}


@pytest.mark.slow
@pytest.mark.parametrize("flags, fragments", [
    (["--set", "env.id=Pendulum-v1"], ["algorithm", "discrete-sac is for discrete actions"]),
    (["--set", "algorithm.exploration_noise.use=gaussian"], ["algorithm.exploration_noise", "leave"]),
    (["--set", "algorithm.target_entropy_weight=1.5"], ["algorithm.target_entropy_weight", "<= 1"]),
])
def test_discrete_sac_refusals_are_one_line(tmp_path, flags, fragments):
    out = tmp_path / "run"
    one_line_error(run_cli("run", str(RECIPE), "--out", str(out), *TINY, *flags), *fragments)
    assert not out.exists(), "refused before the run directory is made"
