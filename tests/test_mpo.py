"""MPO: each formula of rlplug's loss on known inputs against a plain reference written here (the temperature's
dual and its minimum, the sample weights, the decoupled weighted log-likelihood, the KL penalties, the critic's
target, the directions the temperature and the Lagrange multipliers move in); and the recipe through the CLI
(two envs, resume, refused keys, batched seeds)."""

from __future__ import annotations

import copy
import json
import math
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, one_line_error, run_cli
from conftest import pendulum_transitions as sample
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

import rlplug

RECIPE = ROOT / "recipes" / "pendulum-mpo.toml"
SETTINGS = SimpleNamespace(gamma=0.9, action_samples=7, epsilon=0.1, epsilon_mean=0.01, epsilon_sigma=1e-4,
                           initial_temperature=0.7, initial_multiplier=2.0)
#: a short run of the recipe
TINY = ["--set", "run.total_frames=512", "--set", "algorithm.learning_starts=128", "--set", "algorithm.batch_size=64",
        "--set", "algorithm.action_samples=4", "--set", "eval.every_frames=0", "--set", "eval.episodes=1"]


def specs() -> dict:
    env = rlplug.make("env", "gym", id="Pendulum-v1")
    return {"observation_spec": env.observation_spec, "action_spec": env.action_spec}


class Bowl(torch.nn.Module):
    """Q(s, a) = -w (a - s_0 / 2)^2: the best action is half the observation's first entry."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, observation, action):
        return -self.w * (action - observation[:, :1] / 2).pow(2)


def critic_network():
    return TensorDictModule(Bowl(), in_keys=["observation", "action"], out_keys=["state_action_value"])


def actor_network(seed: int = 0):
    torch.manual_seed(seed)
    return rlplug.make("network", "mlp", role="policy", hidden=[16], log_std="state", squash="tanh", **specs())


def loss_of(actor, critic, **changes):
    networks = {"policy": actor, "critic": critic, "critics": [critic]}
    return rlplug.make("loss", "mpo-loss", networks=networks, settings=SimpleNamespace(**{**vars(SETTINGS), **changes}),
                       **specs())


def nudged(actor, scale: float = 0.1, seed: int = 1):
    """``actor`` with its parameters moved at random (away from the loss's target copy, made when it was built)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in actor.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
    return actor


def normal_log_density(x, loc, scale):
    return -0.5 * ((x - loc) / scale) ** 2 - torch.log(scale) - 0.5 * math.log(2 * math.pi)


def reference_dual(q, temperature, epsilon):
    """eta epsilon + eta (1/B) sum_i log((1/N) sum_j exp(Q_ij / eta)), state by state."""
    samples, states = len(q), len(q[0])
    total = 0.0
    for i in range(states):
        total += math.log(sum(math.exp(q[j][i] / temperature) for j in range(samples)) / samples)
    return temperature * epsilon + temperature * total / states


def test_the_dual_of_the_temperature_on_known_values():
    from rlplug.plugins.algorithms.mpo.algorithm import dual

    q = torch.tensor([[1.0, -2.0, 0.5], [3.0, -1.0, 0.5], [0.0, 4.0, 0.5], [-1.0, 0.0, 0.5]], dtype=torch.float64)
    for temperature in (0.3, 1.0, 5.0):
        got = dual(q, torch.tensor(temperature, dtype=torch.float64), 0.2)
        assert float(got) == pytest.approx(reference_dual(q.tolist(), temperature, 0.2), rel=1e-12)


def test_at_the_duals_minimum_the_weights_are_epsilon_away_from_the_sampling_policy():
    """d dual / d eta = epsilon - mean_i KL(softmax_j(Q_ij / eta) || uniform): the minimising temperature puts
    the weights exactly epsilon (in mean KL) from the target policy's samples."""
    from rlplug.plugins.algorithms.mpo.algorithm import dual

    q = torch.randn(16, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    epsilon = 0.1
    log_temperature = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([log_temperature], max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-14)

    def closure():
        optimiser.zero_grad()
        value = dual(q, log_temperature.exp(), epsilon)
        value.backward()
        return value

    optimiser.step(closure)
    temperature = float(log_temperature.detach().exp())
    weights = [[math.exp(q[j, i] / temperature) for j in range(16)] for i in range(8)]
    kls = []
    for row in weights:
        total = sum(row)
        kls.append(sum(w / total * math.log(w / total * 16) for w in row))
    assert sum(kls) / 8 == pytest.approx(epsilon, rel=1e-5)


def test_every_term_on_known_draws_matches_the_plain_formulas():
    """The same random draws (the loss draws the next states' actions, then the states'): the critic's target is
    the mean target value of the target policy's actions at s'; the weights softmax(Q / eta) over each state's
    draws; the actor's term minus the weighted decoupled log-likelihood plus the multipliers times the KLs of
    the mean and of the covariance from the target policy (diagonal: closed forms written here)."""
    target_actor = actor_network(0)
    actor = nudged(copy.deepcopy(target_actor))
    critic = critic_network()
    loss = loss_of(copy.deepcopy(target_actor), critic)
    loss.actor_network.load_state_dict(actor.state_dict())  # the online actor moves; its target copy stays
    data = sample(5, 0)
    written = data.clone()
    torch.manual_seed(3)
    out = loss(written)

    n, gamma, eta, alpha = SETTINGS.action_samples, SETTINGS.gamma, SETTINGS.initial_temperature, 2.0
    torch.manual_seed(3)
    next_noise, noise = torch.randn(n, 5, 1), torch.randn(n, 5, 1)
    s, s_next = data["observation"], data["next", "observation"]
    with torch.no_grad():
        next_loc, next_scale = target_params(target_actor, s_next)
        old_loc, old_scale = target_params(target_actor, s)
        loc, scale = target_params(actor, s)

    def q_of(states, actions):  # actions [n, 5, 1] -> [n, 5]
        return torch.stack([-(actions[j] - states[:, :1] / 2).pow(2).squeeze(-1) for j in range(n)])

    next_actions = 2 * torch.tanh(next_loc + next_scale * next_noise)
    not_done = 1 - data["next", "terminated"].float()
    target = data["next", "reward"] + gamma * not_done * q_of(s_next, next_actions).mean(0).unsqueeze(-1)
    q_online = -(data["action"] - s[:, :1] / 2).pow(2)
    out = {key: value.detach() for key, value in out.items()}
    assert float(out["loss_qvalue"]) == pytest.approx(float((q_online - target).pow(2).mean()), rel=1e-5)
    torch.testing.assert_close(written.get("td_error"), (q_online - target).abs().reshape(-1))

    draws = old_loc + old_scale * noise
    q = q_of(s, 2 * torch.tanh(draws))
    assert float(out["loss_temperature"]) == pytest.approx(reference_dual(q.tolist(), eta, SETTINGS.epsilon),
                                                           rel=1e-5)
    weights = torch.exp(q / eta) / torch.exp(q / eta).sum(0)
    log_likelihood = (normal_log_density(draws, loc, old_scale) + normal_log_density(draws, old_loc, scale)).squeeze(-1)
    fit = -(weights * log_likelihood).sum(0).mean()
    kl_mean = (0.5 * (loc - old_loc).pow(2) / old_scale.pow(2)).sum(-1).mean()
    ratio = old_scale.pow(2) / scale.pow(2)
    kl_sigma = (0.5 * (ratio - 1 - torch.log(ratio))).sum(-1).mean()
    assert float(out["kl_mean"]) == pytest.approx(float(kl_mean), rel=1e-4) and float(kl_mean) > 1e-4
    assert float(out["kl_sigma"]) == pytest.approx(float(kl_sigma), rel=1e-4) and float(kl_sigma) > 1e-6
    expected = fit + alpha * kl_mean + alpha * kl_sigma
    assert float(out["loss_actor"]) == pytest.approx(float(expected), rel=1e-5)
    expected_multipliers = alpha * (SETTINGS.epsilon_mean - kl_mean) + alpha * (SETTINGS.epsilon_sigma - kl_sigma)
    assert float(out["loss_multipliers"]) == pytest.approx(float(expected_multipliers), rel=1e-5)


def target_params(actor, observation):
    """The Gaussian's (loc, scale) before the squash, as the actor's network gives them."""
    td = actor(TensorDict({"observation": observation}, [len(observation)]))
    return td["loc"], td["scale"]


def test_the_decoupled_log_likelihood_of_a_two_dimensional_action():
    from rlplug.plugins.algorithms.mpo.algorithm import decoupled_log_likelihood

    generator = torch.Generator().manual_seed(0)
    loc, old_loc = torch.randn(3, 2, generator=generator), torch.randn(3, 2, generator=generator)
    scale, old_scale = torch.rand(3, 2, generator=generator) + 0.5, torch.rand(3, 2, generator=generator) + 0.5
    draws = torch.randn(4, 3, 2, generator=generator)
    got = decoupled_log_likelihood(draws, (loc, scale), (old_loc, old_scale))
    for j in range(4):
        for i in range(3):
            expected = sum(float(normal_log_density(draws[j, i, d], loc[i, d], old_scale[i, d])
                                 + normal_log_density(draws[j, i, d], old_loc[i, d], scale[i, d])) for d in range(2))
            assert float(got[j, i]) == pytest.approx(expected, rel=1e-5)


def gradient_of(loss, out, term: str, parameter) -> torch.Tensor:
    return torch.autograd.grad(out[term], [parameter])[0]


def test_a_multiplier_rises_while_its_kl_is_above_its_bound_and_falls_below_it():
    """Gradient descent on ``loss_multipliers``: the mean's multiplier (its KL above epsilon_mean) goes up,
    the covariance's (its KL under a loose epsilon_sigma) goes down; and the actor's term weighs each KL by its
    multiplier, so a larger multiplier pulls the actor back towards the target policy harder."""
    loss = loss_of(actor_network(0), critic_network(), epsilon_mean=1e-6, epsilon_sigma=10.0)
    nudged(loss.actor_network, 0.3)
    torch.manual_seed(0)
    out = loss(sample(8, 1))
    assert float(out["kl_mean"]) > 1e-6 and float(out["kl_sigma"]) < 10.0
    step = gradient_of(loss, out, "loss_multipliers", loss.log_multipliers)
    assert step[0] < 0 < step[1], "descent raises the mean's multiplier and lowers the covariance's"
    before = float(out["loss_actor"].detach())
    with torch.no_grad():
        loss.log_multipliers.add_(1.0)
    torch.manual_seed(0)  # the same draws: only the penalties' weights differ
    assert float(loss(sample(8, 1))["loss_actor"].detach()) > before


@pytest.mark.parametrize("epsilon, rises", [(1e-6, True), (5.0, False)])
def test_the_temperature_rises_while_the_weights_are_further_than_epsilon_and_falls_otherwise(epsilon, rises):
    """With 7 draws the weights' KL from uniform is at most log 7 < 5, and above 1e-6 unless every Q is equal."""
    loss = loss_of(actor_network(0), critic_network(), epsilon=epsilon)
    out = loss(sample(8, 2))
    step = gradient_of(loss, out, "loss_temperature", loss.log_temperature)
    assert (step < 0) == rises


def test_the_loss_keeps_its_dual_variables_and_targets_and_refuses_batched_seeds():
    loss = loss_of(actor_network(0), critic_network())
    state = loss.state_dict()
    assert {"log_temperature", "log_multipliers"} <= state.keys() and "bounds" not in state
    assert any(key.startswith("target_actor.") for key in state) and any(key.startswith("target_critics.")
                                                                         for key in state)
    assert loss.parameter_groups["dual"] == [loss.log_temperature, loss.log_multipliers]
    assert loss.term_learners == {"loss_actor": "actor", "loss_qvalue": "critic", "loss_temperature": "dual",
                                  "loss_multipliers": "dual"}
    assert loss.batchable is False


@pytest.mark.slow
def test_the_recipe_trains_with_two_envs_and_resumes(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(RECIPE), "--out", str(out), "--set", "env.num_envs=2", *TINY)
    assert result.returncode == 0, result.stderr
    first = torch.load(out / "checkpoint.pt", weights_only=False)["algorithm"]["loss"]
    assert float(first["log_temperature"]) != math.log(1.0), "the temperature was learned"
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"kl_mean", "kl_sigma", "temperature", "multiplier_mean", "lr_dual"} <= set(header)
    resumed = run_cli("resume", str(out), "--set", "run.total_frames=768")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "summary.json").read_text())["frames"] == 768
    again = torch.load(out / "checkpoint.pt", weights_only=False)["algorithm"]
    assert again["steps"] > 0 and float(again["loss"]["log_temperature"]) != float(first["log_temperature"])


@pytest.mark.slow
@pytest.mark.parametrize("key, value", [("epsilon", "0"), ("epsilon_mean", "-0.01"), ("epsilon_sigma", "0"),
                                        ("action_samples", "0"), ("initial_temperature", "0"), ("dual_lr", "0")])
def test_a_bad_key_is_refused_in_one_line_before_any_run_directory(tmp_path, key, value):
    result = run_cli("run", str(RECIPE), "--out", str(tmp_path / "run"), "--set", f"algorithm.{key}={value}")
    one_line_error(result, f"algorithm.{key}")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_batched_seeds_and_recurrent_networks_are_refused_in_one_line(tmp_path):
    result = run_cli("run", str(RECIPE), "--out", str(tmp_path / "a"), "--seeds", "0,1", "--batched",
                     "--set", "run.total_frames=256")
    one_line_error(result, "algorithm.loss", "cannot compute several seeds at once")
    result = run_cli("run", str(RECIPE), "--out", str(tmp_path / "b"), "--set", "run.total_frames=256",
                     "--set", 'algorithm.policy={use = "lstm", hidden_size = 8}')
    one_line_error(result, "algorithm.policy")  # no recurrent 'policy' role (yet), or mpo's single transitions
