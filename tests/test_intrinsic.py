"""Intrinsic rewards (``[algorithm.intrinsic]``, issue 41 item 1): rnd's and re3's rewards against plain references,
where each family adds them (before the estimators; before the reward shaping and the n-step sums), pretraining
(the intrinsic reward alone), coef = 0 learning exactly as no intrinsic reward, the module's state through
checkpoints, a kit algorithm from a plugin, and the CLI (runs, metrics, list and show, one-line refusals,
--init-from after pretraining)."""

from __future__ import annotations

import copy
import csv
import re

import numpy as np
import pytest
import torch
from conftest import ROOT, one_line_error, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

import rlplug
from rlplug.plugins.intrinsic.re3 import knn_rewards

CARTPOLE = ROOT / "recipes" / "cartpole-ppo.toml"
DQN = ROOT / "recipes" / "cartpole-dqn.toml"
CHAIN = ROOT / "recipes" / "sparse-chain-ppo-rnd.toml"
SIZE = 4


def spec(envs: int = 2, size: int = SIZE):
    from torchrl.data import Composite, Unbounded

    return Composite(observation=Unbounded(shape=(envs, size)), shape=(envs,))


def batch_of(next_observation: torch.Tensor, reward: float = 0.0) -> TensorDict:
    """A collected ``[envs, time]`` batch with these next observations."""
    envs, time = next_observation.shape[:2]
    return TensorDict({"observation": torch.zeros_like(next_observation),
                       "next": {"observation": next_observation, "reward": torch.full((envs, time, 1), reward),
                                "done": torch.zeros(envs, time, 1, dtype=torch.bool)}}, batch_size=[envs, time])


# -- rnd against a plain reference ---------------------------------------------------------------------------

class Moments:
    """A running mean and variance as TorchRL's RunningMeanStd defines them (a prior of mean 0, variance 1 and
    count 1e-4, merged with each batch's population moments), in float64 numpy."""

    def __init__(self, shape=()):
        self.mean, self.var, self.count = np.zeros(shape), np.ones(shape), 1e-4

    def update(self, x: np.ndarray) -> None:
        n, mean, var = len(x), x.mean(0), x.var(0)
        total = self.count + n
        delta = mean - self.mean
        m2 = self.var * self.count + var * n + delta ** 2 * self.count * n / total
        self.mean, self.var, self.count = self.mean + delta * n / total, m2 / total, total


def test_rnd_reward_is_the_predictors_squared_error_over_the_running_std_of_intrinsic_returns():
    """Two batches of 2 envs x 3 steps: observations standardised by their running moments and clipped to 5, the
    squared error of the (fixed) predictor at the (fixed) target, mean over features, divided by the running
    standard deviation of each env's discounted intrinsic return, summed along its row and across batches."""
    torch.manual_seed(0)
    rnd = rlplug.make("intrinsic", "rnd", observation_spec=spec(), gamma=0.9)
    observations, returns, carry = Moments((SIZE,)), Moments(), np.zeros(2)
    generator = torch.Generator().manual_seed(1)
    for _ in range(2):
        next_observation = torch.randn(2, 3, SIZE, generator=generator) * 3 + 1
        got = rnd.rewards(batch_of(next_observation))
        x = next_observation.double().numpy()
        observations.update(x.reshape(-1, SIZE))
        standardised = np.clip((x - observations.mean) / np.sqrt(observations.var), -5, 5)
        with torch.no_grad():
            inputs = torch.from_numpy(standardised).float()
            error = (rnd.predictor(inputs) - rnd.target(inputs)).pow(2).mean(-1).double().numpy()
        sums = []
        for t in range(3):
            carry = 0.9 * carry + error[:, t]
            sums.append(carry.copy())
        returns.update(np.stack(sums, 1).reshape(-1))
        expected = error / np.sqrt(returns.var)
        assert got.shape == (2, 3)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4)


def test_rnd_learns_its_predictor_and_novel_observations_pay_more():
    """The predictor's steps lower its error on what it saw; an observation far from them keeps a larger error."""
    torch.manual_seed(0)
    rnd = rlplug.make("intrinsic", "rnd", observation_spec=spec(), lr=1e-2, epochs=20)
    seen = batch_of(torch.randn(2, 32, SIZE, generator=torch.Generator().manual_seed(2)))
    before = rnd.error(seen.get(("next", "observation"))).mean()
    rnd.rewards(seen)
    losses = [rnd.learn(seen)["rnd_loss"] for _ in range(5)]
    assert losses[-1] < losses[0]
    familiar = rnd.error(seen.get(("next", "observation"))).mean()
    novel = rnd.error(torch.full((1, SIZE), 4.0)).mean()
    assert familiar < before and novel > familiar


# -- re3 against a brute-force reference ---------------------------------------------------------------------

def brute_force(embeddings: np.ndarray, k: int) -> np.ndarray:
    distances = np.sqrt(((embeddings[:, None, :] - embeddings[None, :, :]) ** 2).sum(-1))
    return np.log1p(np.sort(distances, axis=1)[:, k])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5).flatmap(lambda k: st.tuples(
    st.just(k), st.integers(k + 1, 24), st.integers(1, 6), st.integers(0, 2**31 - 1))))
def test_re3_reward_is_log_one_plus_the_kth_nearest_neighbours_distance(case):
    k, count, features, seed = case
    rng = np.random.default_rng(seed)
    embeddings = rng.normal(size=(count, features)) * rng.uniform(0.1, 10)
    if count > 3:  # repeated rows: neighbours at distance 0 count as neighbours
        embeddings[1] = embeddings[0]
    got = knn_rewards(torch.from_numpy(embeddings), k).numpy()
    np.testing.assert_allclose(got, brute_force(embeddings, k), rtol=1e-9, atol=1e-12)


def test_re3_encodes_each_next_observation_with_its_fixed_encoder():
    torch.manual_seed(0)
    re3 = rlplug.make("intrinsic", "re3", observation_spec=spec(), k=2)
    next_observation = torch.randn(2, 5, SIZE)
    got = re3.rewards(batch_of(next_observation))
    with torch.no_grad():
        embeddings = re3.encoder(next_observation.reshape(-1, SIZE)).double().numpy()
    np.testing.assert_allclose(got.reshape(-1).numpy(), brute_force(embeddings, 2), rtol=1e-5)
    assert re3.learn(batch_of(next_observation)) == {}
    with pytest.raises(rlplug.UserError, match="algorithm.intrinsic.k"):
        re3.rewards(batch_of(torch.randn(1, 2, SIZE)))


# -- where the families add it ------------------------------------------------------------------------------

def chain_ppo(**keys):
    env = rlplug.make("env", "sparse-chain", length=6, num_envs=2)
    algorithm = rlplug.make("algorithm", "ppo", observation_spec=env.observation_spec, action_spec=env.action_spec,
                            total_frames=10_000, frames_per_batch=16, minibatch_size=16, epochs=1, **keys)
    return env, algorithm


def collected(env, algorithm, frames: int = 16):
    from rlplug.core.collect import Collector

    return Collector(env, algorithm.policy, frames_per_batch=frames, seed=0).collect()


@pytest.mark.parametrize("pretraining", [True, False])
def test_the_on_policy_estimators_read_the_env_reward_plus_coef_times_intrinsic_or_that_alone(pretraining):
    env, ppo = chain_ppo(intrinsic={"use": "rnd", "coef": 0.5}, pretraining=pretraining)
    batch = collected(env, ppo)
    batch.set(("next", "reward"), torch.full_like(batch.get(("next", "reward")), 3.0))  # the env's, known
    expected_intrinsic = copy.deepcopy(ppo.intrinsic.module).rewards(batch).unsqueeze(-1)
    seen = []
    estimate = ppo.estimate
    ppo.estimate = lambda data: seen.append(data.get(("next", "reward")).clone()) or estimate(data)
    metrics = ppo.update(batch)
    expected = 0.5 * expected_intrinsic + (0.0 if pretraining else 3.0)
    torch.testing.assert_close(seen[0], expected)
    assert (batch.get(("next", "reward")) == 3.0).all()  # the collected batch (episode returns) keeps the env's
    assert metrics["extrinsic_reward"] == 3.0 and metrics["intrinsic_coef"] == 0.5
    assert metrics["intrinsic_reward"] == pytest.approx(float(expected_intrinsic.mean()))
    assert "rnd_loss" in metrics


def test_the_coefficient_follows_its_schedule_over_frames():
    _, ppo = chain_ppo(intrinsic={"use": "re3", "coef": 2.0, "schedule": "exponential", "decay": 0.01})
    ppo.intrinsic.frames = 100
    assert ppo.intrinsic.coef() == pytest.approx(2.0 * 0.99 ** 100)
    _, ppo = chain_ppo(intrinsic={"use": "re3", "coef": 2.0, "schedule": "linear"})
    ppo.intrinsic.frames = 2_500
    assert ppo.intrinsic.coef() == pytest.approx(1.5)


def test_the_off_policy_family_adds_it_before_the_n_step_sums():
    """DQN with n_steps = 2 stores, for each step, r'_t + gamma r'_(t+1) where r' is the env's reward plus coef
    times the intrinsic reward: the bonus is summed as the rewards are."""
    from torchrl.data import Composite, OneHot, Unbounded

    observation_spec = Composite(observation=Unbounded(shape=(1, SIZE)), shape=(1,))
    action_spec = OneHot(2, shape=(1, 2), dtype=torch.int64)
    dqn = rlplug.make("algorithm", "dqn", observation_spec=observation_spec, action_spec=action_spec,
                      total_frames=100_000, n_steps=2, gamma=0.9, learning_starts=10_000,
                      intrinsic={"use": "re3", "coef": 0.5, "k": 1})
    time = 6
    batch = batch_of(torch.randn(1, time, SIZE), reward=1.0)
    batch.update({"action": torch.zeros(1, time, 2, dtype=torch.int64),
                  ("next", "terminated"): torch.zeros(1, time, 1, dtype=torch.bool)})
    intrinsic = copy.deepcopy(dqn.intrinsic.module).rewards(batch).reshape(-1)
    metrics = dqn.update(batch)
    shaped = 1.0 + 0.5 * intrinsic
    rows = dqn.replay.state_dict()
    assert len(dqn.replay) == time - 1  # the last step waits for the next batch
    rewards = next(value for key, value in flat_items(rows) if key.endswith("reward"))[: time - 1].reshape(-1)
    torch.testing.assert_close(rewards, shaped[:-1] + 0.9 * shaped[1:])
    assert metrics["intrinsic_reward"] == pytest.approx(float(intrinsic.mean()))


def flat_items(state, prefix=""):
    for key, value in state.items():
        if isinstance(value, dict):
            yield from flat_items(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def test_the_module_state_goes_through_checkpoints():
    """An algorithm loaded from another's state gives the next batch the same intrinsic rewards and predictor
    step (statistics, predictor, its optimiser, the return carry, its random stream)."""
    env, first = chain_ppo(intrinsic={"use": "rnd", "update_fraction": 0.5})
    _, second = chain_ppo(intrinsic={"use": "rnd", "update_fraction": 0.5})
    first.update(collected(env, first))
    second.load_state_dict(copy.deepcopy(first.state_dict()))
    batch = collected(env, first)
    assert first.update(batch.clone())["rnd_loss"] == second.update(batch.clone())["rnd_loss"]
    assert first.intrinsic.report == second.intrinsic.report


def test_a_kit_algorithm_from_a_plugin_gets_intrinsic_rewards():
    """The example plugin's SAC-N, written on the kit alone, stores the bonus and reports it as the built-ins do."""
    pytest.importorskip("rlplug_example_plugin")  # examples/rlplug-example-plugin, installed for the test suite
    env = rlplug.make("env", "gym", id="Pendulum-v1", num_envs=2)
    sac_n = rlplug.make("algorithm", "sac-n", observation_spec=env.observation_spec, action_spec=env.action_spec,
                        total_frames=1000, intrinsic={"use": "rnd", "coef": 2.0}, pretraining=True)
    batch = collected(env, sac_n, frames=8)
    intrinsic = copy.deepcopy(sac_n.intrinsic.module).rewards(batch).reshape(-1)
    metrics = sac_n.update(batch)
    stored = next(value for key, value in flat_items(sac_n.replay.state_dict()) if key.endswith("reward"))
    torch.testing.assert_close(stored[:len(sac_n.replay)].reshape(-1), 2.0 * intrinsic)
    assert {"intrinsic_reward", "extrinsic_reward", "rnd_loss"} <= set(metrics)


# -- coef = 0 is the plain algorithm ------------------------------------------------------------------------

def losses_of(tmp_path, recipe, name, **overrides) -> list[dict[str, str]]:
    agent = rlplug.Agent.from_recipe(recipe, out=tmp_path / name, **overrides)
    try:
        agent.train()
    finally:
        agent.close()
    with (tmp_path / name / "metrics.csv").open() as f:
        return [{k: v for k, v in row.items() if k.startswith("loss") or k.endswith("grad_norm")}
                for row in csv.DictReader(f)]


@pytest.mark.parametrize("recipe, algorithm", [
    (CARTPOLE, {"frames_per_batch": 128, "minibatch_size": 64, "epochs": 2}),
    (DQN, {"learning_starts": 64, "target_update_interval": 64}),
])
def test_coef_zero_learns_exactly_as_the_plain_algorithm(tmp_path, recipe, algorithm):
    common = {"run": {"total_frames": 512, "seed": 3}, "eval": {"every_frames": 0, "episodes": 1},
              "loggers": [{"use": "csv"}]}
    plain = losses_of(tmp_path, recipe, "plain", **common, algorithm=algorithm)
    bonus = losses_of(tmp_path, recipe, "bonus", **common,
                      algorithm={**algorithm, "intrinsic": {"use": "rnd", "coef": 0.0}})
    assert plain and any(value for row in plain for value in row.values())
    assert plain == bonus


def test_pretraining_evaluates_with_the_envs_own_return(tmp_path):
    """CartPole pays 1 a step: an evaluation episode's return is its length, an integer, whatever the intrinsic
    reward training learned from."""
    agent = rlplug.Agent.from_recipe(CARTPOLE, out=tmp_path / "run", run={"total_frames": 256},
                                     eval={"every_frames": 0, "episodes": 2}, loggers=[{"use": "csv"}],
                                     algorithm={"frames_per_batch": 128, "minibatch_size": 128,
                                                "intrinsic": {"use": "rnd"}, "pretraining": True})
    try:
        agent.train()
        returns = agent.evaluate(episodes=2)
    finally:
        agent.close()
    assert all(value == int(value) and value >= 8 for value in returns), returns


# -- the CLI -------------------------------------------------------------------------------------------------

def metrics_columns(path) -> list[str]:
    with (path / "metrics.csv").open() as f:
        return next(csv.reader(f))


@pytest.mark.slow
@pytest.mark.parametrize("recipe, flags", [
    (CHAIN, ["--set", "run.total_frames=2048"]),
    (DQN, ["--set", "run.total_frames=600", "--set", "algorithm.learning_starts=100",
           "--set", 'algorithm.intrinsic={use = "rnd", coef = 0.1}']),
])
def test_runs_write_the_intrinsic_metrics(tmp_path, recipe, flags):
    result = run_cli("run", str(recipe), "--out", str(tmp_path / "run"), "--set", "eval.every_frames=0",
                     "--set", "eval.episodes=1", *flags)
    assert result.returncode == 0, result.stderr[-2000:]
    columns = metrics_columns(tmp_path / "run")
    assert {"intrinsic_reward", "intrinsic_coef", "extrinsic_reward", "rnd_loss", "episode_return"} <= set(columns)


@pytest.mark.slow
def test_fine_tuning_from_a_pretraining_run(tmp_path):
    """rllte's pretraining then init_model_path: a run on the intrinsic reward alone, then --init-from it without
    the intrinsic reward (the module's state is the pretraining run's own: not carried), and with it again."""
    short = ["--set", "run.total_frames=2048", "--set", "eval.every_frames=0", "--set", "eval.episodes=1"]
    result = run_cli("run", str(CHAIN), "--out", str(tmp_path / "pre"), "--set", "algorithm.pretraining=true", *short)
    assert result.returncode == 0, result.stderr[-2000:]
    plain = tmp_path / "plain.toml"
    plain.write_text(re.sub(r"\n\[algorithm\.intrinsic\]\n(?:[^\[\n].*\n)*", "\n", CHAIN.read_text()))
    assert "use = \"rnd\"" not in plain.read_text()
    result = run_cli("run", str(plain), "--out", str(tmp_path / "fine"), "--init-from", str(tmp_path / "pre"), *short)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "intrinsic_reward" not in metrics_columns(tmp_path / "fine")
    result = run_cli("run", str(CHAIN), "--out", str(tmp_path / "again"), "--init-from", str(tmp_path / "pre"), *short)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("setting, path, fragment", [
    ('algorithm.intrinsic.use="rdn"', "algorithm.intrinsic.use", "did you mean"),
    ("algorithm.intrinsic.coef=-1", "algorithm.intrinsic.coef", "must be >= 0"),
    ("algorithm.intrinsic.coef=nan", "algorithm.intrinsic.coef", "finite"),
    ('algorithm.intrinsic.schedule="exponential"', "algorithm.intrinsic.decay", "decay is 0"),
    ("algorithm.intrinsic.decay=1.5", "algorithm.intrinsic.decay", "< 1"),
    ("algorithm.intrinsic.gamma=1.0", "algorithm.intrinsic.gamma", "< 1"),
])
def test_bad_intrinsic_values_are_one_line(tmp_path, setting, path, fragment):
    one_line_error(run_cli("run", str(CHAIN), "--out", str(tmp_path / "run"), "--set", setting),
                   "sparse-chain-ppo-rnd.toml", path, fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("flags, fragment", [
    (["--seeds", "0,1", "--batched"], "--batched"),
    (["--set", 'runner={use="ray", workers=2, mode="gradients"}'], "gradient workers"),
])
def test_copies_of_the_algorithm_that_would_each_learn_the_reward_are_refused(tmp_path, flags, fragment):
    """The intrinsic module learns in the one algorithm that adds it: seeds trained together and Ray's gradient
    workers would each hold a copy learning apart, so both are refused before anything runs."""
    one_line_error(run_cli("run", str(CHAIN), "--out", str(tmp_path / "run"), *flags),
                   "sparse-chain-ppo-rnd.toml", "algorithm.intrinsic", fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_pretraining_without_an_intrinsic_reward_is_one_line(tmp_path):
    one_line_error(run_cli("run", str(CARTPOLE), "--out", str(tmp_path / "run"), "--set", "algorithm.pretraining=true"),
                   "cartpole-ppo.toml", "algorithm.pretraining", "[algorithm.intrinsic]")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_list_and_show():
    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    kind = listed.stdout.split("intrinsic", 1)[1]
    assert "rnd" in kind and "re3" in kind
    shown = run_cli("show", "rnd")
    assert shown.returncode == 0, shown.stderr
    for key in ("coef", "schedule", "decay", "update_fraction", "Burda"):
        assert key in shown.stdout, key
