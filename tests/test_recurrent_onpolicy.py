"""Recurrent (LSTM, GRU) policies for the on-policy family and SAC, on CartPole and Pendulum with their velocities
hidden: the hidden state restarts where episodes start (in collection and in the critic's stepping), minibatches of
whole sequences give back the collection's log-probabilities before any step (a ratio of 1), PPO-LSTM and SAC-GRU
train through the command line with several envs, a recurrent PPO run resumes exactly, and what cannot be served
is refused in one line naming the key."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from conftest import ROOT, one_line_error, run_cli

import rlplug
from rlplug.core.collect import Collector
from rlplug.core.recurrent import RecurrentNetwork, stepped_values
from rlplug.plugins.algorithms.onpolicy.base import log_prob_and_entropy
from rlplug.plugins.networks import make_gru, make_lstm

RECIPE = ROOT / "recipes" / "cartpole-novel-ppo-lstm.toml"
SAC_RECIPE = ROOT / "recipes" / "pendulum-sac.toml"
#: the recipe shrunk: 4 envs x 32 steps a batch, episodes of at most 10 steps (several start inside each sequence)
SMALL = {"run.total_frames": 512, "env.num_envs": 4, "env.max_episode_steps": 10, "algorithm.frames_per_batch": 128,
         "algorithm.sequence_length": 8, "algorithm.minibatch_size": 32, "algorithm.epochs": 2,
         "algorithm.policy.hidden_size": 16, "algorithm.critic.hidden_size": 16, "eval.episodes": 2,
         "eval.every_frames": 0, "loggers": [{"use": "csv"}]}
CLI_SMALL = ["run.total_frames=512", "env.num_envs=4", "algorithm.frames_per_batch=128", "algorithm.sequence_length=8",
             "algorithm.minibatch_size=64", "algorithm.epochs=2", "algorithm.policy.hidden_size=16",
             "algorithm.critic.hidden_size=16", "eval.episodes=2", "eval.every_frames=0",
             "run.checkpoint_every_frames=256"]
SAC_GRU = ["run.total_frames=400", "env.num_envs=2", "env.observation_indices=[0,1]", "env.max_episode_steps=50",
           'algorithm.policy={use="gru", hidden_size=16, hidden=[16]}',
           'algorithm.critic={use="gru", hidden_size=16, hidden=[16]}', "algorithm.batch_size=64",
           "algorithm.sequence_length=8", "algorithm.burn_in=2", "eval.episodes=2", "eval.every_frames=0"]


def sets(overrides: list[str]) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


def cartpole(num_envs: int, steps: int = 6):
    return rlplug.make("env", "gym", id="CartPole-v1", num_envs=num_envs, observation_indices=[0, 2],
                       max_episode_steps=steps)


# -- the hidden state ------------------------------------------------------------------------------------

@pytest.mark.parametrize("make, keys", [(make_lstm, ("h", "c")), (make_gru, ("h",))])
def test_the_policy_and_the_critic_restart_their_state_where_episodes_start(make, keys):
    torch.manual_seed(0)
    env = cartpole(3)
    policy = make(env.observation_spec, env.action_spec, "policy", hidden_size=8)
    critic = make(env.observation_spec, env.action_spec, "value", hidden_size=8)
    assert isinstance(policy, RecurrentNetwork) and isinstance(critic, RecurrentNetwork)
    batch = Collector(env, policy, 3 * 20, seed=0).collect()  # episodes of at most 6 steps: several restarts
    is_init = batch.get("is_init").squeeze(-1)
    assert is_init[:, 1:].sum() >= 3 * 2
    for name in keys:
        state, following = batch.get(f"policy_{name}"), batch.get(("next", f"policy_{name}"))
        assert (state[is_init] == 0).all(), "every episode's first action comes from a zero state"
        assert torch.equal(state[:, 1:][~is_init[:, 1:]], following[:, :-1][~is_init[:, 1:]])
        assert (state[~is_init].abs().sum(-1) > 0).all()
    values, next_values, end = stepped_values(critic, batch, None)
    for name in keys:
        state = batch.get(f"value_{name}")
        assert (state[is_init] == 0).all() and (state[~is_init].abs().sum(-1) > 0).all()
    # a fresh critic on an episode's first step gives the stepped value there: nothing leaks across the reset
    first = batch[is_init]
    fresh = critic(first.select("observation").clone())
    assert torch.allclose(fresh.get("state_value"), values[is_init], atol=1e-6)
    # the value of a step's next observation is the next step's value, inside an episode
    inside = ~is_init[:, 1:]
    assert torch.allclose(next_values[:, :-1][inside], values[:, 1:][inside], atol=1e-6)
    assert len(end) == len(keys) and end[0].shape[0] == 3


# -- learning from whole sequences -----------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "vpg", "surrogate", "ppo-kl"])
def test_minibatch_sequences_give_back_the_collection_log_probabilities(tmp_path, algorithm):
    """Before any step, the policy on each minibatch's sequences (from their stored first states, restarting
    where episodes start inside them) gives exactly the log-probabilities the collection recorded: a ratio of 1,
    nothing clipped; the recurrent critic gives the values the estimates used."""
    torch.manual_seed(0)
    table = {"use": algorithm, "frames_per_batch": 128, "sequence_length": 8, "num_minibatches": 4, "epochs": 2,
             "policy": {"use": "lstm", "hidden_size": 16}, "critic": {"use": "gru", "hidden_size": 16}}
    small = {key: value for key, value in SMALL.items() if not key.startswith("algorithm.")}
    agent = rlplug.Agent.from_recipe(RECIPE, out=tmp_path / "run", **small, algorithm=table)
    algo = agent.run.algorithm
    batch = agent.run.collector.collect()
    assert batch.batch_size == torch.Size([4, 32])
    prepared = algo.prepare(batch, algo.minibatch_size)
    assert prepared.steps == 4 and prepared.data["observation"].shape == (16, 8, 2)
    assert prepared.data["is_init"][:, 1:].sum() > 0, "episodes start inside sequences"
    for index in range(prepared.steps):
        minibatch = prepared.minibatch(index)
        assert minibatch.batch_size == torch.Size([4, 8]), "whole sequences"
        features = algo.policy.sequence_outputs(minibatch)
        log_prob, _ = log_prob_and_entropy(algo.actor, features, minibatch.get("action"))
        assert torch.allclose(log_prob, minibatch.get(algo.actor.log_prob_key), atol=1e-5)
        values = algo.loss_module.value(algo.critic.sequence_outputs(minibatch))
        assert torch.allclose(values, minibatch.get("state_value"), atol=1e-5)
        out = algo.loss_module(minibatch.clone())
        assert abs(float(out["kl_approx"])) < 1e-6
        if "clip_fraction" in out.keys():
            assert float(out["clip_fraction"]) == 0.0


def test_the_update_learns_from_sequences(tmp_path):
    torch.manual_seed(0)
    agent = rlplug.Agent.from_recipe(RECIPE, out=tmp_path / "run", **SMALL)
    algo = agent.run.algorithm
    before = [p.detach().clone() for p in algo.parameters]
    metrics = algo.update(agent.run.collector.collect())
    assert all(math.isfinite(v) for v in metrics.values()) and metrics["kl_approx"] > 0
    assert all(not torch.equal(a, b) for a, b in zip(before, algo.parameters) if b.requires_grad)
    assert algo.critic_carry is not None and algo.critic_carry[0].shape[0] == 4


# -- through the command line ----------------------------------------------------------------------------

@pytest.mark.slow
def test_ppo_lstm_trains_resumes_and_ends_as_the_run_left_alone(tmp_path):
    """A few iterations with 4 envs; stopped at a checkpoint and resumed, it ends with the parameters of the
    same run left alone (schedules off: they follow run.total_frames, which the stopped run lowers)."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    small = [*CLI_SMALL, "algorithm.anneal_lr=false", "algorithm.anneal_clip=false"]
    result = run_cli("run", str(RECIPE), "--out", str(whole), *sets(small))
    assert result.returncode == 0, result.stderr
    with open(whole / "metrics.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("loss_objective")]  # the updates' rows
    assert len(rows) >= 4 and all(math.isfinite(float(row["loss_objective"])) for row in rows)
    result = run_cli("run", str(RECIPE), "--out", str(part), *sets([*small, "run.total_frames=256"]))
    assert result.returncode == 0, result.stderr
    result = run_cli("resume", str(part), "--set", "run.total_frames=512")
    assert result.returncode == 0, result.stderr
    ends = [torch.load(run / "checkpoint.pt", weights_only=False)["algorithm"] for run in (whole, part)]
    for name in ("policy", "critic"):
        for key, value in ends[0][name].items():
            assert torch.equal(value, ends[1][name][key]), (name, key)


@pytest.mark.slow
def test_sac_gru_trains_with_several_envs(tmp_path):
    out = tmp_path / "sac"
    result = run_cli("run", str(SAC_RECIPE), "--out", str(out), *sets(SAC_GRU))
    assert result.returncode == 0, result.stderr
    with open(out / "metrics.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("loss_actor")]
    assert rows and all(math.isfinite(float(row["loss_qvalue"])) for row in rows)


@pytest.mark.slow
def test_batched_seeds_are_refused_in_one_line(tmp_path):
    one_line_error(run_cli("run", str(RECIPE), "--seeds", "0-1", "--batched", "--out", str(tmp_path / "b"),
                           *sets(CLI_SMALL)), "algorithm.policy", "recurrent", "--batched")


# -- what cannot be served ------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, fragments", [
    ({"algorithm": {"use": "impala", "policy": {"use": "lstm"}, "critic": {"use": "lstm"}}},
     ["algorithm.policy", "impala does not learn from the sequences"]),
    ({"algorithm.loss": {"use": "ClipPPOLoss"}}, ["algorithm.loss", "ClipPPOLoss", "reads single steps"]),
    ({"algorithm.policy": {"use": "mlp"}}, ["algorithm.policy", "recurrent critic needs a recurrent policy"]),
    ({"algorithm.shared_body": True}, ["algorithm.shared_body", "shared_body = false"]),
    ({"runner": {"use": "ray", "workers": 2}}, ["runner.use", "use the local runner"]),
])
def test_what_cannot_be_served_is_one_line_naming_the_key(tmp_path, overrides, fragments):
    small = {key: value for key, value in SMALL.items() if "algorithm" not in overrides or "algorithm" not in key}
    with pytest.raises(rlplug.UserError) as caught:
        rlplug.Agent.from_recipe(RECIPE, out=tmp_path / "run", **{**small, **overrides})
    message = str(caught.value)
    assert "\n" not in message and all(f in message for f in fragments), message


def test_a_sequence_length_that_does_not_divide_the_rows_is_one_line(tmp_path):
    # 64 divides frames_per_batch (128), as the build checks, but not the 32 steps of each of the 4 envs
    agent = rlplug.Agent.from_recipe(RECIPE, out=tmp_path / "run", **{**SMALL, "algorithm.sequence_length": 64})
    with pytest.raises(rlplug.UserError) as caught:
        agent.run.algorithm.prepare(agent.run.collector.collect(), 32)
    message = str(caught.value)
    assert "\n" not in message and "algorithm.sequence_length" in message and "= 32), got 64" in message
