"""The off-policy family (DDPG, TD3, SAC, DQN): exact polyak updates, every algorithm trains from its recipe
and reports finite metrics, evaluation is free of exploration, checkpoints hold everything (networks,
targets, optimisers, replay buffer, preprocessor statistics, noise schedule), the learning-rate pair is
checked, and mixed precision runs on the CPU close to full precision."""

from __future__ import annotations

import csv
import math
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

import rlplug
from rlplug.plugins.algorithms.offpolicy.losses import polyak_update

RECIPES = ROOT / "recipes"
#: Each recipe shrunk to a few hundred frames and small networks.
SMALL = {"run": {"total_frames": 400}, "eval": {"episodes": 1, "every_frames": 0}, "loggers": [{"use": "csv"}]}
CONTINUOUS = {"algorithm.batch_size": 32, "algorithm.random_frames": 50, "algorithm.learning_starts": 100,
              "algorithm.replay_buffer.capacity": 1000, "algorithm.policy.hidden": [32],
              "algorithm.critic.hidden": [32]}
DISCRETE = {"algorithm.batch_size": 32, "algorithm.random_frames": 50, "algorithm.learning_starts": 100,
            "algorithm.steps_per_update": 20, "algorithm.gradient_steps": 4, "algorithm.target_update_interval": 40,
            "algorithm.replay_buffer.capacity": 1000, "algorithm.q_network.hidden": [32]}
SHRUNK = {"pendulum-ddpg": CONTINUOUS, "pendulum-td3": CONTINUOUS, "pendulum-sac": CONTINUOUS,
          "cartpole-dqn": DISCRETE}
METRICS = {
    "pendulum-ddpg": {"loss_value", "loss_actor", "pred_value", "target_value"},
    "pendulum-td3": {"loss_qvalue", "loss_actor", "pred_value", "target_value"},
    "pendulum-sac": {"loss_qvalue", "loss_actor", "loss_alpha", "alpha", "entropy"},
    "cartpole-dqn": {"loss", "q_value", "epsilon"},
}


def agent_for(tmp_path, name: str, out: str = "run", **overrides) -> rlplug.Agent:
    return rlplug.Agent.from_recipe(RECIPES / f"{name}.toml", out=tmp_path / out, **SMALL,
                                    **{**SHRUNK[name], **overrides})


def last_losses(agent) -> dict[str, float]:
    """The metrics of the last two updates with gradient steps (TD3 updates its actor every other step)."""
    with (agent.run.run_dir / "metrics.csv").open() as f:
        rows = [row for row in csv.DictReader(f) if row.get("loss_value") or row.get("loss_qvalue") or row.get("loss")]
    return {k: float(v) for row in rows[-2:] for k, v in row.items() if v}


def targets(algorithm) -> dict[str, torch.Tensor]:
    """The loss's target networks' weights by name (copies)."""
    return {k: v.detach().clone() for k, v in algorithm.loss_module.named_parameters() if "target" in k}


def observation_batch(agent) -> TensorDict:
    env = agent.run.env
    return env.reset()


# -- target networks -------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(tau=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_polyak_update_is_the_formula_exactly(tau, seed):
    torch.manual_seed(seed)
    online, target = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2)), \
        torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
    expected = [(1 - tau) * t.detach() + tau * o.detach() for t, o in zip(target.parameters(), online.parameters())]
    before = [o.detach().clone() for o in online.parameters()]
    polyak_update(target, online, tau)
    for t, e in zip(target.parameters(), expected):
        torch.testing.assert_close(t.detach(), e, rtol=0, atol=1e-6)
    for o, b in zip(online.parameters(), before):
        assert torch.equal(o, b), "the online network is never touched"
    polyak_update(target, online, 1.0)
    assert all(torch.equal(t, o) for t, o in zip(target.parameters(), online.parameters()))
    with torch.no_grad():
        next(online.parameters()).add_(1.0)
    assert not torch.equal(next(target.parameters()), next(online.parameters())), "a copy, not an alias"


# -- training --------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", list(METRICS))
def test_every_algorithm_trains_reports_and_evaluates_without_exploration(tmp_path, name):
    agent = agent_for(tmp_path, name)
    algorithm = agent.run.algorithm
    before = [p.detach().clone() for p in algorithm.parameters]
    targets_before = targets(algorithm)
    summary = agent.train()
    assert summary["status"] == "finished" and summary["frames"] == 400
    assert math.isfinite(summary["eval_return_mean"])
    metrics = last_losses(agent)
    assert METRICS[name] | {"lr", "buffer_size"} <= set(metrics), METRICS[name] - set(metrics)
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert metrics["buffer_size"] == 400
    assert all(not torch.equal(a, b) for a, b in zip(before, algorithm.parameters)), "every network learned"
    assert targets_before, "the loss keeps target networks"
    for key, moved in targets(algorithm).items():  # the targets followed
        assert not torch.equal(targets_before[key], moved), key

    observation = observation_batch(agent)
    first = agent.act(observation.clone(), deterministic=True).get("action")
    second = agent.act(observation.clone(), deterministic=True).get("action")
    assert torch.equal(first, second), "deterministic evaluation has no exploration noise"
    if name != "cartpole-dqn":  # collection explores: noise (ddpg, td3) or sampling (sac)
        explored = agent.act(observation.clone(), deterministic=False).get("action")
        assert not torch.equal(explored, first)
        low, high = agent.run.env.action_spec.space.low, agent.run.env.action_spec.space.high
        assert ((explored >= low) & (explored <= high)).all()


def test_a_parameter_turned_nan_stops_training_even_without_a_gradient_step(tmp_path):
    """The trainer checks the parameters (by storage: the learners' flat tensors) after every update, not
    only the losses: before learning starts no loss is computed at all."""
    agent = agent_for(tmp_path, "pendulum-ddpg")
    agent.train(max_frames=20)
    with torch.no_grad():
        list(agent.run.algorithm.critic_networks.parameters())[-1][0] = float("nan")
    with pytest.raises(rlplug.UserError, match="training diverged: a network parameter is not finite at iteration"):
        agent.train(max_frames=20)


def test_dqn_explores_by_epsilon_on_its_schedule_and_double_dqn_trains(tmp_path):
    agent = agent_for(tmp_path, "cartpole-dqn", **{"algorithm.double": True, "algorithm.epsilon_end": 0.5,
                                                   "algorithm.exploration_fraction": 0.5})
    algorithm = agent.run.algorithm
    assert algorithm.greedy.epsilon == 1.0
    agent.train(max_frames=100)
    assert algorithm.greedy.epsilon == pytest.approx(1.0 - 0.5 * 100 / 200)
    agent.train()
    assert algorithm.greedy.epsilon == 0.5 and math.isfinite(last_losses(agent)["loss"])
    observation = observation_batch(agent)
    actions = torch.stack([agent.act(observation.clone(), deterministic=False).get("action") for _ in range(40)])
    greedy = agent.act(observation.clone(), deterministic=True).get("action")
    assert (actions != greedy).any(), "random exploration takes other actions half the time"


# -- checkpoints -----------------------------------------------------------------------------------------

def assert_same(a, b, where: str = "") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


@pytest.mark.parametrize("name, extra", [
    ("pendulum-td3", {"algorithm.exploration_noise": {"use": "ornstein-uhlenbeck", "sigma": 0.3, "final_sigma": 0.05,
                                                      "schedule": "linear"},
                      "algorithm.replay_buffer": {"use": "prioritized", "capacity": 1000}}),
    ("pendulum-sac", {}),
    ("cartpole-dqn", {}),
])
@pytest.mark.slow
def test_checkpoint_round_trip_then_training_goes_on(tmp_path, name, extra):
    agent = agent_for(tmp_path, name, **{"algorithm.observation_preprocessor": "running-standard-scaler", **extra})
    agent.train(max_frames=200)
    saved = agent.run.algorithm
    path = agent.save(tmp_path / "agent.pt")
    loaded_agent = rlplug.Agent.load(path, out=tmp_path / "loaded")
    loaded = loaded_agent.run.algorithm

    assert (loaded.frames, loaded.steps) == (saved.frames, saved.steps) and saved.steps > 0
    assert targets(saved)  # the networks, their targets (and SAC's entropy coefficient)
    assert_same(saved.loss_module.state_dict(), loaded.loss_module.state_dict(), "loss")
    assert_same(saved.learners.state_dict(), loaded.learners.state_dict(), "learners")  # optimiser moments, steps
    assert len(loaded.replay) == len(saved.replay) == 200
    assert_same(saved.replay.sample(64).to_dict(), loaded.replay.sample(64).to_dict(), "replay")  # same data, same RNG
    assert_same(saved.preprocessor.state_dict(), loaded.preprocessor.state_dict(), "preprocessor")
    assert int(loaded.preprocessor.count) == 200
    if saved.noise is not None:
        assert loaded.noise.frames == saved.noise.frames == 200 and loaded.noise.sigma == saved.noise.sigma < 0.3
    if name == "cartpole-dqn":
        assert loaded.greedy.epsilon == saved.greedy.epsilon < 1.0

    summary = loaded_agent.train()
    assert summary["status"] == "finished" and loaded_agent.frames == 400
    assert all(math.isfinite(v) for v in last_losses(loaded_agent).values())


@pytest.mark.slow
def test_a_run_stopped_at_a_checkpoint_and_loaded_ends_exactly_where_one_left_alone_does(tmp_path):
    stateful = {"run.checkpoint_every_frames": 200, "algorithm.observation_preprocessor": "running-standard-scaler",
                "algorithm.exploration_noise": {"use": "ornstein-uhlenbeck"},
                "algorithm.replay_buffer": {"use": "prioritized", "capacity": 1000}}
    straight = agent_for(tmp_path, "pendulum-td3", out="straight", **stateful)
    straight.train()
    stopped = agent_for(tmp_path, "pendulum-td3", out="stopped", **stateful)
    stopped.train(max_frames=200)
    resumed = rlplug.Agent.load(stopped.save(tmp_path / "stopped.pt"), out=tmp_path / "resumed")
    resumed.train()
    assert_same(straight.run.algorithm.state_dict()["loss"], resumed.run.algorithm.state_dict()["loss"])



def test_a_memmap_replay_buffer_lives_in_the_run_directory_and_a_resumed_run_reads_it(tmp_path):
    from rlplug.run.trainer import Run

    agent = agent_for(tmp_path, "pendulum-ddpg", **{"algorithm.replay_buffer.storage": "memmap"})
    agent.train(max_frames=200)
    agent.run.checkpoint()
    run_dir = agent.run.run_dir
    assert (run_dir / "replay" / "observation.memmap").stat().st_size > 0
    saved = agent.run.algorithm.replay
    agent.run.close()  # a run directory is trained in by one run at a time
    resumed = Run.resume(run_dir).algorithm.replay
    assert len(resumed) == len(saved) == 200
    assert_same(saved.sample(64).to_dict(), resumed.sample(64).to_dict(), "replay")

# -- options ---------------------------------------------------------------------------------------------

SKRL_OPTIONS = ["gradient_steps", "batch_size", "discount_factor", "polyak", "learning_rate",
                "learning_rate_scheduler", "observation_preprocessor", "state_preprocessor", "random_timesteps",
                "learning_starts", "grad_norm_clip", "exploration_noise", "exploration_scheduler", "rewards_shaper",
                "mixed_precision", "experiment"]


def test_the_skrl_mapping_names_every_ddpg_cfg_option_and_only_keys_ddpg_has():
    from rlplug.registry import get_registry

    text = (ROOT / "docs" / "from-skrl.md").read_text()
    table = text.split("## The configuration", 1)[1].split("## The agent's parts", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| `")]
    documented = {name for skrl, _ in rows for name in re.findall(r"`(\w+)", skrl)}
    assert set(SKRL_OPTIONS) <= documented, set(SKRL_OPTIONS) - documented
    keys = set(get_registry().lookup("algorithm", "ddpg").schema.params)
    for skrl, ours in rows:
        if any(option in skrl for option in ("experiment", "exploration_scheduler")):
            continue  # the [run] and [[loggers]] tables; the noise table's own keys
        first = re.search(r"`\[?(?:algorithm\.)?([a-z_]+)", ours).group(1)
        assert first in keys, (skrl, first)


@pytest.mark.parametrize("lr, fragment", [
    ([1e-3], "a pair [actor, critic], got a list of 1"),
    ([1e-3, 1e-3, 1e-3], "got a list of 3"),
    ([1e-3, -1.0], "must be > 0"),
    ("fast", "expected float or list[float]"),
])
def test_learning_rate_is_a_number_or_a_pair(tmp_path, lr, fragment):
    with pytest.raises(rlplug.UserError) as error:
        agent_for(tmp_path, "pendulum-ddpg", **{"algorithm.lr": lr})
    message = str(error.value)
    assert "\n" not in message and "algorithm.lr" in message and fragment in message, message
    assert not (tmp_path / "run").exists()


def test_a_learning_rate_pair_sets_actor_and_critic(tmp_path):
    agent = agent_for(tmp_path, "pendulum-td3", **{"algorithm.lr": [1e-4, 2e-3], "algorithm.lr_schedule": "linear"})
    learners = agent.run.algorithm.learners
    assert learners.optimisers["actor"].param_groups[0]["lr"] == 1e-4
    assert learners.optimisers["critic"].param_groups[0]["lr"] == 2e-3
    agent.train(max_frames=200)
    metrics = last_losses(agent)
    assert metrics["lr_actor"] == pytest.approx(1e-4 * 0.5) and metrics["lr_critic"] == pytest.approx(2e-3 * 0.5)


@pytest.mark.parametrize("name, env", [("sac", "Pendulum-v1"), ("tqc", "Pendulum-v1"), ("redq", "Pendulum-v1"),
                                       ("crossq", "Pendulum-v1"), ("cql", "Pendulum-v1"),
                                       ("discrete-sac", "CartPole-v1")])
def test_a_fixed_entropy_coefficient_trains_and_stays_where_it_was_set(tmp_path, name, env):
    # TQC, REDQ, CQL and discrete SAC refused to build with learn_entropy_coef = false (an optimiser for no
    # parameters); the coefficient must also stay put while the networks learn
    agent = rlplug.Agent.from_recipe(
        {"env": {"use": "gym", "id": env, "num_envs": 2},
         "algorithm": {"use": name, "learn_entropy_coef": False, "initial_entropy_coef": 0.2, "batch_size": 32,
                       "learning_starts": 64}},
        out=tmp_path / "run", run={"total_frames": 160}, eval={"episodes": 1}, loggers=[{"use": "csv"}])
    agent.train()
    metrics = last_losses(agent)
    assert metrics["alpha"] == pytest.approx(0.2)
    assert "loss_qvalue" in metrics or "loss_value" in metrics


def test_reward_shaping_is_applied_to_stored_rewards(tmp_path):
    agent = agent_for(tmp_path, "cartpole-dqn", **{"algorithm.reward_scale": 2.0, "algorithm.reward_offset": -1.5,
                                                   "algorithm.reward_clip": 0.25})
    agent.train(max_frames=40)
    rewards = agent.run.algorithm.replay.sample(64).get(("next", "reward"))
    assert torch.all(rewards == 0.25)  # CartPole's 1 -> 2 * 1 - 1.5 = 0.5 -> clipped to 0.25


@pytest.mark.parametrize("name, loss", [("pendulum-td3", "loss_qvalue"), ("pendulum-sac", "loss_qvalue"),
                                        ("cartpole-dqn", "loss")])
@pytest.mark.slow
def test_mixed_precision_runs_on_the_cpu_close_to_full_precision(tmp_path, name, loss):
    first = {}
    for mixed in (False, True):
        overrides = {"algorithm.mixed_precision": mixed, "algorithm.learning_starts": 100,
                     "algorithm.random_frames": 200, "algorithm.gradient_steps": 1}
        if name == "cartpole-dqn":
            overrides["algorithm.steps_per_update"] = 100
        agent = agent_for(tmp_path, name, out=f"run-{mixed}", **overrides)
        agent.train(max_frames=100)  # exactly one update with a gradient step: the losses of the same weights
        first[mixed] = last_losses(agent)[loss]
        algorithm = agent.run.algorithm
        if mixed:
            observation = torch.zeros(4, 3 if name != "cartpole-dqn" else 4)
            with algorithm.autocast():
                out = algorithm.loss_module.q(observation) if name == "cartpole-dqn" else \
                    algorithm.loss_module.q[0](observation, torch.zeros(4, 1))
            assert out.dtype == torch.bfloat16
        agent.train()
        assert all(math.isfinite(v) for v in last_losses(agent).values())
    assert first[True] == pytest.approx(first[False], rel=0.05)


@pytest.mark.parametrize("recipe, observation", [("pendulum-ddpg", [1.0, 0.0, 0.5]),
                                                 ("cartpole-dqn", [0.0, 0.1, 0.0, -0.1])])
def test_select_action_for_deterministic_and_q_value_policies(tmp_path, recipe, observation):
    agent = rlplug.Agent.from_recipe(ROOT / "recipes" / f"{recipe}.toml", out=tmp_path / "run",
                                     run={"total_frames": 512}, eval={"episodes": 1})
    action = agent.select_action(np.array(observation, dtype=np.float32))
    assert np.array_equal(action, agent.select_action(np.array(observation, dtype=np.float32)))
    env = gym.make("Pendulum-v1" if "pendulum" in recipe else "CartPole-v1")
    assert env.action_space.contains(action.astype(env.action_space.dtype) if hasattr(action, "astype") else action)


def test_missing_loss_members_are_named_as_before():
    """The off-policy loss check names a missing member by its attribute name (what ``fget.__name__`` gave)."""
    from rlplug.registry import protocols

    for member in (protocols.Loss.parameter_groups, protocols.Loss.term_learners):
        assert protocols.optional_name(member) == member.fget.__name__
