"""The on-policy family: every algorithm trains through the same update and reports its metrics;
schedules, optimisers, value clipping and the adaptive KL penalty do what they say."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import CANONICAL
from hypothesis import given
from hypothesis import strategies as st

import rlplug
from rlplug.core.training import make_optimizer, scheduled_lr

COMMON = {"run": {"total_frames": 512}, "eval": {"episodes": 2}}
METRICS = {"fps", "episodes", "loss_objective", "entropy", "kl_approx", "grad_norm", "lr"}


def agent_for(tmp_path, algorithm: dict, **overrides):
    table = {"use": algorithm.pop("use"), "frames_per_batch": 128, **algorithm}
    return rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", **COMMON, algorithm=table, **overrides)


def last_metrics(agent) -> dict:
    import csv

    with (agent.run.run_dir / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["loss_objective"]]
    return {k: float(v) for k, v in rows[-1].items() if v}


@pytest.mark.parametrize("algorithm, extra", [
    ({"use": "ppo"}, {"clip_fraction", "clip_epsilon", "loss_critic", "explained_variance"}),
    ({"use": "ppo-kl"}, {"kl_beta", "loss_critic", "explained_variance"}),
    ({"use": "a2c"}, {"loss_critic", "explained_variance"}),
    ({"use": "surrogate", "value_clip": 0.2}, {"loss_critic", "explained_variance"}),
    ({"use": "vpg"}, {"loss_critic"}),
    ({"use": "vpg", "baseline": False, "advantage": {"use": "mc", "bootstrap": False}}, set()),
])
def test_every_algorithm_trains_and_reports(tmp_path, algorithm, extra):
    agent = agent_for(tmp_path, dict(algorithm), loggers=[{"use": "csv"}])
    before = [p.detach().clone() for p in agent.run.algorithm.policy.parameters()]
    summary = agent.train()
    assert summary["status"] == "finished" and summary["frames"] == 512
    metrics = last_metrics(agent)
    assert METRICS | extra <= set(metrics), METRICS | extra - set(metrics)
    assert all(math.isfinite(v) for v in metrics.values())
    after = list(agent.run.algorithm.policy.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after)), "the policy learned something"
    assert (agent.run.algorithm.critic is None) == (algorithm.get("baseline") is False)


@given(st.floats(1e-6, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_schedules_start_at_lr_end_at_zero_and_never_rise(lr, p, q):
    early, late = sorted((p, q))
    assert scheduled_lr(lr, "constant", late) == lr
    for schedule in ("linear", "cosine"):
        assert scheduled_lr(lr, schedule, 0.0) == pytest.approx(lr)
        assert scheduled_lr(lr, schedule, 1.0) == pytest.approx(0.0, abs=1e-12)
        assert scheduled_lr(lr, schedule, late) <= scheduled_lr(lr, schedule, early) + 1e-15


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd", "rmsprop"])
def test_optimizers_by_name_take_their_kwargs(name):
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = make_optimizer(name, [parameter], 0.1, {"weight_decay": 0.5})
    assert optimizer.param_groups[0]["weight_decay"] == 0.5
    with pytest.raises(rlplug.UserError, match="optimizer_kwargs"):
        make_optimizer(name, [parameter], 0.1, {"not_a_kwarg": 1})


def test_conflicting_options_are_user_errors(tmp_path):
    with pytest.raises(rlplug.UserError, match="anneal_lr"):
        agent_for(tmp_path, {"use": "ppo", "anneal_lr": True, "lr_schedule": "cosine"})
    with pytest.raises(rlplug.UserError, match="unknown key 'kl_target' in algorithm 'ppo'"):
        agent_for(tmp_path, {"use": "ppo", "kl_target": 0.01})
    # without a critic, an estimator that reads its values failed at the first update with no key named
    with pytest.raises(rlplug.UserError, match="bootstrap = false") as raised:
        agent_for(tmp_path, {"use": "vpg", "baseline": False, "advantage": {"use": "mc"}})
    assert raised.value.path == "algorithm.advantage"
    with pytest.raises(rlplug.UserError, match="no critic") as raised:
        agent_for(tmp_path, {"use": "vpg", "baseline": False, "advantage": {"use": "mc", "bootstrap": False},
                             "value_target": {"use": "gae"}})
    assert raised.value.path == "algorithm.value_target"


def test_advantage_comes_from_the_advantage_estimator_only(tmp_path):
    """td-lambda writes an advantage too; as the value_target estimator it must not replace GAE's."""
    agent = agent_for(tmp_path, {"use": "ppo", "advantage": {"use": "gae", "gamma": 0.9, "lmbda": 0.5},
                                 "value_target": {"use": "td-lambda", "gamma": 0.9, "lmbda": 0.5}})
    algorithm = agent.run.algorithm
    batch = algorithm.estimate(agent.run.collector.collect())
    gae = rlplug.make("estimator", "gae", gamma=0.9, lmbda=0.5)(batch.copy().exclude("advantage"))
    td_lambda = rlplug.make("estimator", "td-lambda", gamma=0.9, lmbda=0.5)(batch.copy())
    torch.testing.assert_close(batch.get("advantage"), gae.get("advantage"))
    torch.testing.assert_close(batch.get("value_target"), td_lambda.get("value_target"))


def test_select_action_sees_observations_as_training_did(tmp_path):
    agent = agent_for(tmp_path, {"use": "ppo"}, env={"normalize_observations": "running"})
    agent.train(max_frames=256)
    observation = torch.tensor([[2.0, -1.0, 0.2, 0.5]]).numpy()
    from rlplug.core.acting import ActorView

    view = ActorView.of(agent.run.algorithm.policy)
    normalized = torch.as_tensor(agent.run.env.normalize_observation(observation), dtype=torch.float32)
    assert not torch.allclose(normalized, torch.as_tensor(observation)), "statistics were learned"
    expected, _ = view.act(normalized, deterministic=True)
    assert (agent.select_action(observation) == expected.argmax(-1).numpy()).all()


def test_shared_body_trains_one_set_of_hidden_layers(tmp_path):
    agent = agent_for(tmp_path, {"use": "a2c", "shared_body": True})
    algorithm = agent.run.algorithm
    shared = {id(p) for p in algorithm.policy.parameters()} & {id(p) for p in algorithm.critic.parameters()}
    assert len(shared) == 4, "two hidden Linear layers: two weights and two biases"
    separate = agent_for(tmp_path / "separate", {"use": "a2c"}).run.algorithm
    assert len(algorithm.parameters) == len(separate.parameters) - 4
    assert agent.train()["status"] == "finished"
    with pytest.raises(rlplug.UserError, match="shared_body"):
        agent_for(tmp_path / "mismatch", {"use": "a2c", "shared_body": True, "critic": {"use": "mlp", "hidden": [32]}})
