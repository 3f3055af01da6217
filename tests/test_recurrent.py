"""Recurrent (LSTM, GRU) DDPG on a partially observed Pendulum: the hidden state is carried from step to
step and restarts where episodes end (collection and evaluation), sampled sequences stay inside one
episode, the shrunk recipe trains with finite losses, a checkpoint brings the agent back exactly, and
mistakes are one-line errors naming the key."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from conftest import ROOT, run_cli
from tensordict import TensorDict

import rlplug
from rlplug.core.collect import Collector
from rlplug.core.recurrent import RecurrentNetwork
from rlplug.plugins.networks import make_gru, make_lstm
from rlplug.run.evaluation import evaluate

RECIPE = ROOT / "recipes" / "pendulum-ddpg-lstm.toml"
#: The recipe shrunk to a few hundred frames, small networks and short episodes (several per batch).
SMALL = {"run": {"total_frames": 300}, "eval": {"episodes": 2, "every_frames": 0}, "loggers": [{"use": "csv"}],
         "env.max_episode_steps": 20, "algorithm.batch_size": 32, "algorithm.sequence_length": 8,
         "algorithm.burn_in": 2, "algorithm.random_frames": 50, "algorithm.learning_starts": 100,
         "algorithm.replay_buffer.capacity": 250, "algorithm.policy.hidden_size": 16,
         "algorithm.critic.hidden_size": 16, "algorithm.policy.hidden": [16], "algorithm.critic.hidden": [16]}


def agent_for(tmp_path, out: str = "run", **overrides) -> rlplug.Agent:
    return rlplug.Agent.from_recipe(RECIPE, out=tmp_path / out, **{**SMALL, **overrides})


def pendulum(num_envs: int, steps: int = 5):
    return rlplug.make("env", "gym", id="Pendulum-v1", num_envs=num_envs, observation_indices=[0, 1],
                       max_episode_steps=steps)


# -- the hidden state in collection and evaluation ---------------------------------------------------------

@pytest.mark.parametrize("make, keys", [(make_lstm, ("h", "c")), (make_gru, ("h",))])
@pytest.mark.parametrize("num_envs", [1, 2])
def test_collection_carries_the_hidden_state_and_resets_it_on_done(make, keys, num_envs):
    torch.manual_seed(0)
    env = pendulum(num_envs)
    network = make(env.observation_spec, env.action_spec, "deterministic_policy", hidden_size=8)
    assert isinstance(network, RecurrentNetwork)
    batch = Collector(env, network, 12 * num_envs, seed=0).collect()  # episodes of 5 steps: 2 resets
    is_init, done = batch.get("is_init").squeeze(-1), batch.get(("next", "done")).squeeze(-1)
    expected_init = torch.zeros_like(is_init)
    expected_init[..., 0], expected_init[..., 1:] = True, done[..., :-1]
    assert torch.equal(is_init, expected_init) and is_init[..., 1:].sum() == 2 * num_envs
    for name in keys:
        state = batch.get(f"deterministic_policy_{name}")
        following = batch.get(("next", f"deterministic_policy_{name}"))
        assert (state[is_init] == 0).all(), "every episode starts from a zero state"
        assert torch.equal(state[:, 1:][~is_init[:, 1:]], following[:, :-1][~is_init[:, 1:]]), \
            "within an episode each step starts from the state the previous step left"
        assert (following.abs().sum(-1) > 0).all() and (state[~is_init].abs().sum(-1) > 0).all()
    # the action at each episode start is the fresh-state action: the reset reaches the output
    first = batch[is_init]
    fresh = network(TensorDict({"observation": first.get("observation")}, batch_size=first.batch_size))
    assert torch.allclose(fresh.get("action"), first.get("action"))


def test_evaluation_carries_and_resets_the_hidden_state():
    torch.manual_seed(0)
    env = pendulum(3)
    network = make_lstm(env.observation_spec, env.action_spec, "deterministic_policy", hidden_size=8)
    seen: list[TensorDict] = []
    network.core.register_forward_hook(lambda module, args, output: seen.append(output.select(
        "is_init", "deterministic_policy_h", ("next", "deterministic_policy_h")).clone()))
    returns = evaluate(env, network, episodes=6, seed=3)
    assert len(returns) == 6 and returns == evaluate(env, network, episodes=6, seed=3)
    steps = torch.stack(seen)  # [time, envs]
    is_init = steps.get("is_init").squeeze(-1)
    assert is_init[0].all() and is_init[5].all() and not is_init[1:5].any(), "a reset after each 5-step episode"
    state = steps.get("deterministic_policy_h")
    assert (state[is_init] == 0).all() and (state[~is_init].abs().sum(-1) > 0).all()
    assert torch.equal(state[1:5], steps.get(("next", "deterministic_policy_h"))[0:4])


# -- learning from sequences ------------------------------------------------------------------------------

def test_the_recipe_trains_and_sampled_sequences_stay_inside_one_episode(tmp_path):
    # two envs interleave in the ring, which wraps (capacity 250 < 300 frames); episodes of 20 steps
    agent = agent_for(tmp_path, **{"env.num_envs": 2, "algorithm.steps_per_update": 3, "run.total_frames": 300})
    summary = agent.train()
    assert summary["status"] == "finished" and math.isfinite(summary["eval_return_mean"])
    with (agent.run.run_dir / "metrics.csv").open() as f:
        rows = [row for row in csv.DictReader(f) if row.get("loss_value")]
    assert rows and all(math.isfinite(float(row[key])) for row in rows for key in ("loss_value", "loss_actor"))

    replay = agent.run.algorithm.replay
    sample = replay.sample_sequences(256, 8)
    assert sample.batch_size == (32, 8)
    episode, step = sample.get("episode"), sample.get("step")
    assert (episode == episode[:, :1]).all(), "one episode per sequence"
    assert (step[:, 1:] == step[:, :-1] + 1).all(), "consecutive steps"
    assert torch.equal(sample.get(("next", "observation"))[:, :-1], sample.get("observation")[:, 1:]), \
        "each step's next observation is the following step's observation"
    assert not sample.get(("next", "terminated"))[:, :-1].any()
    assert (sample.get("is_init")[:, 1:] == 0).all(), "no episode starts inside a sequence"
    stored = replay.sample(4 * len(replay))  # with replacement: every transition, most likely several times
    assert stored.get("is_init").squeeze(-1).eq(stored.get("step") == 0).all()


@pytest.mark.slow
def test_a_checkpoint_brings_the_recurrent_agent_back_exactly(tmp_path):
    agent = agent_for(tmp_path)
    agent.train(max_frames=200)
    path = agent.save(tmp_path / "agent.pt")
    loaded = rlplug.Agent.load(path, out=tmp_path / "loaded")
    before, after = agent.run.algorithm, loaded.run.algorithm
    saved, loaded_state = before.loss_module.state_dict(), after.loss_module.state_dict()
    assert saved.keys() == loaded_state.keys() and any("target" in key for key in saved)  # networks and targets
    for key, value in saved.items():
        assert torch.equal(value, loaded_state[key]), key
    assert before.episodes.state_dict()["next_id"] == after.episodes.state_dict()["next_id"] > 0
    assert (before.replay.sample_sequences(64, 8) == after.replay.sample_sequences(64, 8)).all(), \
        "the same stored sequences and sampling generator"
    observation = agent.run.env.reset()
    assert torch.equal(agent.act(observation.clone()).get("action"), loaded.act(observation.clone()).get("action"))
    assert loaded.train(max_frames=40)["frames"] == 240, "and it trains on"


# -- mistakes --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("params, fragments", [
    ({"observation_indices": [0, 3]}, ["env.observation_indices", "3 entries (indices 0 to 2), got 3"]),
    ({"observation_indices": []}, ["observation_indices", "at least one"]),
    ({"observation_indices": [1, 1]}, ["observation_indices", "twice"]),
    ({"observation_indices": [-1]}, ["observation_indices", ">= 0"]),
])
def test_bad_observation_indices_are_one_line_errors(params, fragments):
    with pytest.raises(rlplug.UserError) as caught:
        rlplug.make("env", "gym", id="Pendulum-v1", **params)
    message = str(caught.value)
    assert "\n" not in message and all(f in message for f in fragments), message


@pytest.mark.parametrize("overrides, fragments", [
    ({"algorithm.burn_in": 8}, ["algorithm.burn_in", "less than sequence_length (8)"]),
    ({"algorithm.batch_size": 30}, ["algorithm.batch_size", "multiple of sequence_length"]),
    ({"algorithm.policy": {"use": "mlp"}}, ["algorithm.policy", "recurrent critic needs a recurrent actor"]),
    ({"algorithm.replay_buffer": {"use": "prioritized", "capacity": 100}}, ["algorithm.replay_buffer", "uniform"]),
    ({"algorithm": {"use": "crossq", "policy": {"use": "gru"}}}, ["algorithm.policy", "single transitions", "sac"]),
    ({"algorithm.loss": {"use": "DDPGLoss"}}, ["algorithm.loss", "recurrent networks", "ddpg-loss"]),
])
def test_recipe_mistakes_are_one_line_errors_naming_the_key(tmp_path, overrides, fragments):
    with pytest.raises(rlplug.UserError) as caught:
        agent_for(tmp_path, **overrides)
    message = str(caught.value)
    assert "\n" not in message and all(f in message for f in fragments), message


@pytest.mark.parametrize("algorithm, offered", [("crossq", False), ("redq", False), ("dqn", False),
                                                 ("ddpg", True), ("td3", True), ("sac", True)])
def test_sequence_keys_are_offered_only_to_the_algorithms_that_learn_from_sequences(tmp_path, algorithm, offered):
    """DDPG, TD3 and SAC learn from sequences; the other off-policy algorithms are not offered sequence_length or
    burn_in (keys that would do nothing), so setting one is the unknown-key error naming it."""
    for key in ("sequence_length", "burn_in"):
        path = tmp_path / f"{key}.toml"
        path.write_text(f'[env]\nuse = "gym"\nid = "Pendulum-v1"\n[algorithm]\nuse = "{algorithm}"\n{key} = 1\n')
        if offered:
            rlplug.recipe.load(path)
            continue
        with pytest.raises(rlplug.UserError, match=f"algorithm.{key}"):
            rlplug.recipe.load(path)


@pytest.mark.slow
def test_cli_reports_a_bad_observation_index_in_one_line(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(RECIPE), "--out", str(out), "--set", "env.observation_indices=[0,7]")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "env.observation_indices" in lines[0] and "got 7" in lines[0]
    assert not out.exists()
