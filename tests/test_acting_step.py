"""pytorchrl's acting half on every built-in algorithm (rlplug.plugins.algorithms.acting): ``acting_step`` on known
inputs (the mode when deterministic, the clipped action, the log-probability and value the networks give, the
recurrent state carried and reset where done, as the LSTM/GRU over the whole sequence gives it), the eight
read-only numbers against the recipe keys they stand for, and both through ``rlplug.Agent``."""

from __future__ import annotations

import math
import re

import pytest
import torch
from conftest import CANONICAL, ROOT
from tensordict import TensorDict
from torch import nn

import rlplug
from rlplug.core.acting import ActorView, deterministic_sample
from rlplug.errors import UserError
from rlplug.registry import protocols

NUMBERS = ("gamma", "num_epochs", "mini_batch_size", "num_mini_batch", "num_test_episodes", "start_steps",
           "test_every", "update_every")


def built(env_id: str, name: str, **params):
    env = rlplug.make("env", "gym", id=env_id, num_envs=2)
    return rlplug.make("algorithm", name, observation_spec=env.observation_spec, action_spec=env.action_spec,
                       total_frames=10_000, **params)


def no_done(batch: int) -> torch.Tensor:
    return torch.zeros(batch, dtype=torch.bool)


# -- known inputs -------------------------------------------------------------------------------------------

def test_on_policy_continuous_mode_log_prob_value_and_clipping():
    torch.manual_seed(0)
    ppo = built("Pendulum-v1", "ppo", policy={"use": "mlp", "squash": "none"})  # a plain Normal: the env clips
    view = ActorView.of(ppo.policy)
    last = [m for m in view.params_module.modules() if isinstance(m, nn.Linear)][-1]
    with torch.no_grad():
        last.bias.fill_(3.0)  # the mean beyond the bounds [-2, 2]
    obs = torch.randn(50, 3) * 0.1
    acted = ppo.acting_step(obs, None, no_done(50), deterministic=True)
    dist = view.distribution(obs)
    assert torch.allclose(acted.action, deterministic_sample(dist))
    assert (acted.action > 2).all(), "the raw action is the policy's, beyond the bounds"
    assert torch.equal(acted.clipped_action, torch.full_like(acted.action, 2.0))
    assert torch.allclose(acted.other["log_prob"], dist.log_prob(acted.action))
    assert torch.allclose(acted.other["value"], ppo.critic(TensorDict({"observation": obs}, [50])).get("state_value"))
    assert acted.rhs.is_empty() and acted.rhs.batch_size == torch.Size([50])
    sampled = ppo.acting_step(obs, None, no_done(50))
    assert not torch.equal(sampled.action, acted.action), "not deterministic: a sample"
    assert torch.equal(sampled.clipped_action, sampled.action.clamp(-2, 2))
    assert torch.allclose(sampled.other["log_prob"], dist.log_prob(sampled.action))


def test_on_policy_discrete_takes_the_most_likely_choice():
    torch.manual_seed(0)
    ppo = built("CartPole-v1", "ppo")
    obs = torch.randn(6, 4)
    logits = ActorView.of(ppo.policy).params_module(obs)
    acted = ppo.acting_step(obs, None, no_done(6), deterministic=True)
    assert torch.equal(acted.action.argmax(-1), logits.argmax(-1))
    assert torch.equal(acted.clipped_action, acted.action), "discrete actions have no bounds to clip to"
    assert torch.allclose(acted.other["log_prob"], logits.log_softmax(-1).max(-1).values)


def test_sac_deterministic_is_the_squashed_mode_with_its_log_prob():
    torch.manual_seed(0)
    sac = built("Pendulum-v1", "sac")
    obs = torch.randn(5, 3) * 3
    dist = ActorView.of(sac.policy).distribution(obs)
    acted = sac.acting_step(obs, None, no_done(5), deterministic=True)
    assert torch.allclose(acted.action, deterministic_sample(dist))
    assert torch.allclose(acted.other["log_prob"], dist.log_prob(acted.action), atol=1e-4)
    assert "value" not in acted.other, "SAC's critics value (state, action): no state value"
    sampled = sac.acting_step(obs, None, no_done(5))
    assert not torch.equal(sampled.action, acted.action)
    assert ((sampled.clipped_action >= -2) & (sampled.clipped_action <= 2)).all()


def test_dqn_greedy_when_deterministic_epsilon_greedy_otherwise_and_rhs_passed_through():
    torch.manual_seed(0)
    dqn = built("CartPole-v1", "dqn")  # epsilon starts at 1: every exploring action is random
    obs = torch.randn(200, 4)
    greedy = nn.functional.one_hot(dqn.network.module(obs).argmax(-1), 2)
    memo = TensorDict({"memo": torch.arange(200)}, [200])
    acted = dqn.acting_step(obs, memo, no_done(200), deterministic=True)
    assert torch.equal(acted.action, greedy) and torch.equal(acted.clipped_action, greedy)
    assert acted.other == {} and acted.rhs is memo, "no recurrent state: rhs passes through"
    exploring = dqn.acting_step(obs, None, no_done(200)).action
    assert 50 < (exploring != greedy).any(-1).sum() < 150


@pytest.mark.parametrize("name, cell, keys", [("ddpg", "lstm", ("h", "c")), ("td3", "gru", ("h",))])
def test_recurrent_state_carried_and_reset_where_done_as_over_the_whole_sequence(name, cell, keys):
    torch.manual_seed(0)
    network = {"use": cell, "hidden_size": 8, "hidden": [8]}
    algorithm = built("Pendulum-v1", name, policy=network, critic=network)
    batch, steps = 3, 7
    obs = torch.randn(batch, steps, 3)
    done = torch.zeros(batch, steps, dtype=torch.bool)
    done[:, 0], done[1, 3], done[2, 5] = True, True, True  # episodes start at 0 and, for two rows, again later
    actions, rhs = [], None
    for t in range(steps):
        acted = algorithm.acting_step(obs[:, t], rhs, done[:, t], deterministic=True)
        actions.append(acted.action)
        rhs = acted.rhs
    assert sorted(rhs.keys()) == sorted(f"deterministic_policy_{k}" for k in keys)
    actor = algorithm.actor

    def over_sequence(is_init: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            features = actor.sequence_features(obs, is_init.unsqueeze(-1))
            return actor.head(TensorDict({actor.features_key: features}, [batch, steps])).get("action")

    assert torch.allclose(torch.stack(actions, 1), over_sequence(done), atol=1e-5)
    no_resets = done.clone()
    no_resets[:, 1:] = False
    assert not torch.allclose(over_sequence(no_resets), over_sequence(done)), "the resets change the actions"


def test_recurrent_state_from_none_is_zeros_and_a_wrong_rhs_is_one_line():
    torch.manual_seed(0)
    network = {"use": "lstm", "hidden_size": 8, "hidden": [8]}
    ddpg = built("Pendulum-v1", "ddpg", policy=network, critic=network)
    obs = torch.randn(4, 3)
    first = ddpg.acting_step(obs, None, no_done(4), deterministic=True)
    zeros = first.rhs.apply(torch.zeros_like)
    assert torch.equal(ddpg.acting_step(obs, zeros, no_done(4), deterministic=True).action, first.action)
    carried = ddpg.acting_step(obs, first.rhs, no_done(4), deterministic=True)
    assert not torch.allclose(carried.action, first.action), "the state carried changes the action"
    restarted = ddpg.acting_step(obs, first.rhs, torch.ones(4, 1), deterministic=True)
    assert torch.equal(restarted.action, first.action), "done: the state restarts from zeros"
    with pytest.raises(UserError) as error:
        ddpg.acting_step(obs, TensorDict({"h": torch.zeros(4, 1, 8)}, [4]), no_done(4))
    assert "deterministic_policy_h" in str(error.value) and "\n" not in str(error.value)


def test_every_built_in_algorithm_offers_the_acting_half():
    optional = {name for name, required in protocols.members(protocols.Algorithm).items() if not required}
    assert {"acting_step", *NUMBERS} <= optional
    for env_id, name in [("Pendulum-v1", n) for n in ("ppo", "ppo-kl", "a2c", "vpg", "surrogate", "impala", "ddpg",
                                                      "td3", "sac", "crossq", "redq")] + [("CartPole-v1", "dqn")]:
        algorithm = built(env_id, name)
        acted = protocols.capability(algorithm, protocols.Algorithm.acting_step)(torch.randn(2, *{
            "Pendulum-v1": (3,), "CartPole-v1": (4,)}[env_id]), None, no_done(2))
        assert acted.action.shape[0] == 2, name
        assert all(protocols.has_member(algorithm, getattr(protocols.Algorithm, n)) for n in NUMBERS), name
        assert algorithm.num_test_episodes is None and algorithm.test_every is None, "built outside a run"


# -- the read-only numbers, from the recipe's keys, through rlplug.Agent ----------------------------------------

RUN = {"run": {"total_frames": 10_000}, "loggers": [{"use": "csv"}]}


def numbers(agent: rlplug.Agent) -> dict:
    try:
        return {name: getattr(agent.algorithm, name) for name in NUMBERS}
    finally:
        agent.close()


def test_on_policy_numbers_are_the_recipes_keys(tmp_path):
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "ppo", **RUN, **{
        "algorithm.frames_per_batch": 256, "algorithm.epochs": 3, "algorithm.num_minibatches": 4,
        "algorithm.advantage": {"use": "gae", "gamma": 0.9}, "eval.episodes": 3, "eval.every_frames": 1000})
    assert numbers(agent) == {"gamma": 0.9, "num_epochs": 3, "mini_batch_size": 64, "num_mini_batch": 4,
                              "num_test_episodes": 3, "start_steps": 0, "test_every": math.ceil(1000 / 256),
                              "update_every": 256}
    agent = rlplug.Agent.from_recipe(ROOT / "recipes" / "cartpole-vpg.toml", out=tmp_path / "vpg", **RUN, **{
        "algorithm.advantage": {"use": "mc", "gamma": 0.8}, "eval.every_frames": 0})
    vpg = numbers(agent)
    assert vpg["gamma"] == 0.8 and vpg["num_epochs"] == 1 and vpg["num_mini_batch"] == 1, vpg
    assert vpg["test_every"] == 0, "eval.every_frames = 0: only at the end"


@pytest.mark.parametrize("recipe, env, keys, expected", [
    ("pendulum-sac.toml", {"env.num_envs": 1},
     {"gamma": 0.95, "batch_size": 32, "gradient_steps": 2, "random_frames": 100, "steps_per_update": 2},
     {"gamma": 0.95, "num_epochs": 1, "mini_batch_size": 32, "num_mini_batch": 2, "start_steps": 100,
      "update_every": 2, "num_test_episodes": 4, "test_every": 50}),
    ("cartpole-dqn.toml", {"env.num_envs": 2},
     {"gamma": 0.9, "batch_size": 16, "gradient_steps": 3, "random_frames": 50, "steps_per_update": 4},
     {"gamma": 0.9, "num_epochs": 1, "mini_batch_size": 16, "num_mini_batch": 3, "start_steps": 50,
      "update_every": 8, "num_test_episodes": 4, "test_every": 13}),
])
def test_off_policy_numbers_are_the_recipes_keys(tmp_path, recipe, env, keys, expected):
    agent = rlplug.Agent.from_recipe(ROOT / "recipes" / recipe, out=tmp_path / "run", **RUN, **env,
                                     **{f"algorithm.{k}": v for k, v in keys.items()},
                                     **{"algorithm.replay_buffer.capacity": 1000, "eval.episodes": 4,
                                        "eval.every_frames": 100})
    assert numbers(agent) == expected


def test_acting_step_through_the_agent_acts_as_agent_act(tmp_path):
    agent = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "run", **RUN)
    try:
        obs = torch.randn(5, 4)
        acted = agent.algorithm.acting_step(obs, None, no_done(5), deterministic=True)
        assert torch.equal(acted.action, agent.act(TensorDict({"observation": obs}, [5])).get("action"))
    finally:
        agent.close()


def test_the_pytorchrl_mapping_names_every_member_of_the_seeds_algorithm():
    """docs/from-pytorchrl.md has a row for each member of pytorchrl's Algorithm, and the numbers' rows name the
    properties the algorithms have."""
    text = (ROOT / "docs" / "from-pytorchrl.md").read_text()
    table = text.split("## The interface", 1)[1].split("## `acting_step`", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| `")]
    documented = {name for seed, _ in rows for name in re.findall(r"`(?:utils\.)?(\w+)", seed)}
    assert {"acting_step", "compute_gradients", "apply_gradients", "set_weights", "update_algorithm_parameter",
            "create_factory", "gaussian_kl", *NUMBERS} <= documented
    numbers = {name: ours for seed, ours in rows for name in NUMBERS if seed.strip().startswith(f"`{name}`")}
    assert sorted(numbers) == sorted(NUMBERS) and all(f"`{name}`" in ours for name, ours in numbers.items())
