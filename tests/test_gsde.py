"""gSDE (``use_sde``): the noise is ``z @ theta`` with one matrix per env copy, the learned Gaussian's variance is
``z^2 @ sigma^2``, matrices are kept between redraws (``sde_sample_freq``), evaluation and ``select_action`` act
with the mean, a recipe without it acts as before, training moves sigma, a resumed run goes on exactly, and
misuse is one line at the key."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import ROOT, one_line_error, run_cli
from tensordict import TensorDict
from torch import nn
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs.utils import ExplorationType, set_exploration_type

import rlplug
from rlplug.core.acting import ActorView
from rlplug.core.heads import with_head
from rlplug.core.sde import ExplorationMatrices, StateDependentScale, state_dependent_exploration

RECIPES = ROOT / "recipes"
SMALL = {"run": {"total_frames": 200}, "eval": {"episodes": 1, "every_frames": 0}, "loggers": [{"use": "csv"}],
         "algorithm.batch_size": 32, "algorithm.learning_starts": 64, "algorithm.replay_buffer.capacity": 1000,
         "algorithm.policy.hidden": [16], "algorithm.critic.hidden": [16]}
SDE = {"algorithm.use_sde": True, "algorithm.policy.log_std_init": -1.0}


def specs(envs: int = 3, features: int = 4, actions: int = 2):
    observation = Composite(observation=Unbounded(shape=(envs, features)), shape=(envs,))
    return observation, Bounded(low=-1.0, high=1.0, shape=(envs, actions))


def gsde_policy(squash: str = "none", steps_per_batch: int = 100, sample_freq: int = -1, log_std: str = "state"):
    """A small Gaussian policy of rlplug's heads with gSDE: (the learned actor, the acting actor, its explorer)."""
    observation_spec, action_spec = specs()
    policy = with_head([nn.Linear(4, 5), nn.Tanh()], 5, role="policy", observation_spec=observation_spec,
                       action_spec=action_spec, log_std=log_std, squash=squash)
    acting = state_dependent_exploration(policy, log_std_init=-0.5, steps_per_batch=steps_per_batch,
                                         sample_freq=sample_freq)
    explorer = next(m for m in acting.modules() if isinstance(m, ExplorationMatrices))
    return policy, acting, explorer


def step(acting, observation: torch.Tensor, kind=ExplorationType.RANDOM) -> TensorDict:
    with set_exploration_type(kind), torch.no_grad():
        return acting(TensorDict({"observation": observation}, batch_size=observation.shape[:1]))


# -- the arithmetic on known inputs ------------------------------------------------------------------------

def test_the_scale_is_the_square_root_of_z_squared_times_sigma_squared_summed_over_features():
    torch.manual_seed(0)
    scale = StateDependentScale(nn.Identity(), nn.Linear(3, 2), log_std_init=0.0)
    with torch.no_grad():  # a different sigma per (feature, action): a transposed matrix would not match
        scale.log_std.copy_(torch.tensor([[-1.0, 0.5], [0.2, -2.0], [1.0, 0.0]]))
    z = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    sigma = scale.log_std.exp()
    expected = torch.stack([torch.stack([sum(z[b, i] ** 2 * sigma[i, j] ** 2 for i in range(3))
                                         for j in range(2)]) for b in range(2)]) + 1e-6
    loc, got = scale(z)
    torch.testing.assert_close(got, expected.sqrt())
    torch.testing.assert_close(loc, scale.head(z))


@pytest.mark.parametrize("learn_features", [False, True])
def test_the_scale_reaches_the_features_only_where_they_learn(learn_features):
    scale = StateDependentScale(nn.Linear(3, 4), nn.Linear(4, 2), log_std_init=0.0, learn_features=learn_features)
    scale.scale_of(scale.body(torch.randn(5, 3))).sum().backward()
    assert scale.log_std.grad is not None and scale.log_std.grad.abs().sum() > 0
    reached = scale.body.weight.grad is not None and bool(scale.body.weight.grad.abs().sum() > 0)
    assert reached == learn_features


def test_sac_learns_the_features_through_the_scale_and_ppo_does_not(tmp_path):
    """As Stable-Baselines3 does: its SAC actor sets learn_features, its PPO policy keeps the default (detached)."""
    for recipe, learns in (("pendulum-sac", True), ("pendulum-ppo", False)):
        agent = rlplug.Agent.from_recipe(RECIPES / f"{recipe}.toml", out=tmp_path / recipe, **SMALL_OF[recipe], **SDE)
        explorer = next(m for m in agent.run.algorithm.policy.modules() if isinstance(m, ExplorationMatrices))
        assert explorer.scale.learn_features is learns, recipe


def test_the_log_probability_is_a_normal_of_that_variance():
    policy, _, _ = gsde_policy(squash="none")
    observation = torch.randn(3, 4)
    module = ActorView.of(policy).params_module
    z = module.body(observation)
    loc = module.head(z)
    variance = z.detach() ** 2 @ module.log_std.exp() ** 2
    action = torch.randn(3, 2)
    expected = torch.distributions.Normal(loc, (variance + 1e-6).sqrt()).log_prob(action).sum(-1)
    torch.testing.assert_close(ActorView.of(policy).distribution(observation).log_prob(action), expected)


def test_the_noise_is_z_times_each_env_copys_own_matrix():
    policy, acting, explorer = gsde_policy(squash="none")
    observation = torch.randn(3, 4)
    out = step(acting, observation)
    module = ActorView.of(policy).params_module
    z = module.body(observation).detach()
    theta = explorer.theta
    assert theta is not None and theta.shape == (3, 5, 2)
    assert not torch.allclose(theta[0], theta[1])  # one matrix per copy
    expected = torch.stack([z[i] @ theta[i] for i in range(3)])
    torch.testing.assert_close(out["sde_noise"], expected)
    torch.testing.assert_close(out["action"], out["loc"] + expected)  # unsquashed: the action is mean + noise
    # the acting log-probability is the learned Gaussian's (PPO's ratio starts at 1)
    torch.testing.assert_close(out["action_log_prob"],
                               ActorView.of(policy).distribution(observation).log_prob(out["action"]))


def test_matrices_are_drawn_with_the_learned_sigma():
    torch.manual_seed(1)
    _, _, explorer = gsde_policy()
    with torch.no_grad():
        explorer.scale.log_std.fill_(-1.5)
    explorer.resample(torch.Size([4000]))
    assert explorer.theta is not None
    assert abs(explorer.theta.std().item() - np.exp(-1.5)) < 0.01
    assert abs(explorer.theta.mean().item()) < 0.01


def test_a_tanh_policy_squashes_the_clipped_mean_plus_noise():
    policy, acting, _ = gsde_policy(squash="tanh")
    module = ActorView.of(policy).params_module
    with torch.no_grad():
        module.head.bias.fill_(5.0)  # a mean far out: clipped to 2 before the squash
    out = step(acting, torch.randn(3, 4))
    assert torch.all(out["loc"] == 2.0)
    torch.testing.assert_close(out["action"], torch.tanh(out["loc"] + out["sde_noise"]))


# -- when matrices are redrawn --------------------------------------------------------------------------

def noises(acting, steps: int) -> list[torch.Tensor]:
    observation = torch.ones(3, 4)  # the same state: the noise changes only with the matrix
    return [step(acting, observation)["sde_noise"] for _ in range(steps)]


def test_a_sample_freq_of_four_keeps_the_matrix_for_four_steps():
    torch.manual_seed(2)
    _, acting, _ = gsde_policy(steps_per_batch=100, sample_freq=4)
    seen = noises(acting, 9)
    for index in (1, 2, 3):
        torch.testing.assert_close(seen[index], seen[0])
    assert not torch.allclose(seen[4], seen[3])
    for index in (5, 6, 7):
        torch.testing.assert_close(seen[index], seen[4])
    assert not torch.allclose(seen[8], seen[7])


def test_minus_one_redraws_only_at_the_start_of_each_batch():
    torch.manual_seed(3)
    _, acting, _ = gsde_policy(steps_per_batch=3, sample_freq=-1)
    seen = noises(acting, 7)
    torch.testing.assert_close(seen[1], seen[0])
    torch.testing.assert_close(seen[2], seen[0])
    assert not torch.allclose(seen[3], seen[2])
    torch.testing.assert_close(seen[5], seen[3])
    assert not torch.allclose(seen[6], seen[5])


def test_evaluation_acts_with_the_mean_and_leaves_the_schedule_alone():
    policy, acting, explorer = gsde_policy(squash="tanh", steps_per_batch=2)
    observation = torch.randn(3, 4)
    step(acting, observation)
    theta = explorer.theta
    deterministic = step(acting, observation, ExplorationType.DETERMINISTIC)
    torch.testing.assert_close(deterministic["action"], torch.tanh(deterministic["loc"]))
    assert explorer.steps == 1 and explorer.theta is theta
    # the next exploring step is still the batch's second: the same matrix
    assert explorer.theta is theta and not explorer.due()


# -- through the algorithms -------------------------------------------------------------------------------

PPO_SMALL = {"run": {"total_frames": 256}, "eval": {"episodes": 1, "every_frames": 0}, "loggers": [{"use": "csv"}],
             "algorithm.frames_per_batch": 128, "algorithm.minibatch_size": 64, "algorithm.epochs": 2,
             "algorithm.policy.hidden": [16], "algorithm.critic.hidden": [16]}
OBSERVATIONS = np.array([[0.5, -0.5, 0.1], [0.1, 0.2, -0.3]], dtype=np.float32)
SMALL_OF = {"pendulum-sac": SMALL, "pendulum-ppo": PPO_SMALL}
#: what each small run's policy chose for OBSERVATIONS after training at seed 0, at commit 036fb7a (before gSDE):
#: the same collection, the same updates, the same draws from the generator
BEFORE_GSDE = {"pendulum-sac": [[-0.023399537429213524], [-0.3676877021789551]],
               "pendulum-ppo": [[0.009879952296614647], [0.0031764833256602287]]}


@pytest.mark.parametrize(("recipe", "explicit"), [("pendulum-sac", False), ("pendulum-ppo", True)])
def test_without_use_sde_a_recipe_trains_and_acts_exactly_as_before(tmp_path, recipe, explicit):
    small = SMALL if recipe == "pendulum-sac" else PPO_SMALL
    agent = rlplug.Agent.from_recipe(RECIPES / f"{recipe}.toml", out=tmp_path / "run", **small,
                                     **({"algorithm.use_sde": False} if explicit else {}))
    assert not any(isinstance(m, (StateDependentScale, ExplorationMatrices))
                   for m in agent.run.algorithm.policy.modules())
    agent.train()
    np.testing.assert_allclose(agent.select_action(OBSERVATIONS), BEFORE_GSDE[recipe], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("recipe", ["pendulum-sac", "pendulum-ppo"])
def test_training_moves_sigma_and_select_action_is_the_mean(tmp_path, recipe):
    small = SMALL if recipe == "pendulum-sac" else {**PPO_SMALL, "algorithm.sde_sample_freq": 8}
    agent = rlplug.Agent.from_recipe(RECIPES / f"{recipe}.toml", out=tmp_path / "run", **small, **SDE)
    explorer = next(m for m in agent.run.algorithm.policy.modules() if isinstance(m, ExplorationMatrices))
    before = explorer.scale.log_std.detach().clone()
    agent.train()
    assert explorer.steps > 0  # the collector explored with it
    assert not torch.allclose(explorer.scale.log_std.detach(), before)  # the loss trains sigma
    first = agent.select_action(OBSERVATIONS)
    np.testing.assert_array_equal(agent.select_action(OBSERVATIONS), first)  # deterministic: the mean
    loc, _ = explorer.scale(torch.as_tensor(OBSERVATIONS))
    expected = 2 * torch.tanh(loc) if recipe == "pendulum-sac" else loc  # Pendulum's torque is in [-2, 2]
    np.testing.assert_allclose(first, expected.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_checkpoint_keeps_sigma_and_not_the_matrices(tmp_path):
    """sigma (log_std) is a parameter and travels; theta is not in the checkpoint: the resumed run redraws at its
    first exploring step (a batch start) from the restored generator."""
    settings = {**SMALL, **SDE, "run.total_frames": 320, "algorithm.steps_per_update": 16,
                "algorithm.gradient_steps": 4, "algorithm.sde_sample_freq": 4}
    stopped = rlplug.Agent.from_recipe(RECIPES / "pendulum-sac.toml", out=tmp_path / "stopped", **settings)
    stopped.train(max_frames=160)
    saved = next(m for m in stopped.run.algorithm.policy.modules() if isinstance(m, ExplorationMatrices))
    assert saved.theta is not None
    state = stopped.run.algorithm.state_dict()
    assert not any("theta" in key for key in state["loss"])
    resumed = rlplug.Agent.load(stopped.save(tmp_path / "stopped.pt"), out=tmp_path / "resumed")
    explorer = next(m for m in resumed.run.algorithm.policy.modules() if isinstance(m, ExplorationMatrices))
    torch.testing.assert_close(explorer.scale.log_std, saved.scale.log_std)
    assert explorer.theta is None and explorer.steps == 0
    resumed.train()
    assert explorer.theta is not None and explorer.steps == 160


def test_two_env_copies_explore_with_their_own_matrices(tmp_path):
    agent = rlplug.Agent.from_recipe(RECIPES / "pendulum-sac.toml", out=tmp_path / "run",
                                     **{**SMALL, **SDE, "env.num_envs": 2, "algorithm.random_frames": 64,
                                        "algorithm.use_sde_at_warmup": True})
    assert agent.run.algorithm.random_actions is None  # gSDE acts during the warm-up instead
    agent.train(max_frames=64)
    explorer = next(m for m in agent.run.algorithm.policy.modules() if isinstance(m, ExplorationMatrices))
    assert explorer.theta is not None and explorer.theta.shape[0] == 2
    assert not torch.allclose(explorer.theta[0], explorer.theta[1])


# -- the command line -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("recipe", "key", "value", "fragment"), [
    ("cartpole-ppo", "use_sde", "true", "discrete"),
    ("cartpole-discrete-sac", "use_sde", "true", "discrete"),
    ("pendulum-td3", "use_sde", "true", "deterministic"),
    ("pendulum-sac", "sde_sample_freq", "0", "-1"),
    ("pendulum-ppo", "sde_sample_freq", "-2", "-1"),
    ("pendulum-sac", "use_sde_at_warmup", "true", "use_sde = true"),
])
def test_misuse_is_one_line_at_the_key(tmp_path, recipe, key, value, fragment):
    result = run_cli("run", f"recipes/{recipe}.toml", "--out", str(tmp_path / "run"), "--set",
                     f"algorithm.{key}={value}", "--set", "run.total_frames=64")
    one_line_error(result, f"recipes/{recipe}.toml", f"algorithm.{key}", fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_ppo_with_gsde_runs_from_the_command_line(tmp_path):
    result = run_cli("run", "recipes/pendulum-ppo.toml", "--out", str(tmp_path / "run"),
                     "--set", "algorithm.use_sde=true", "--set", "algorithm.sde_sample_freq=4",
                     "--set", "run.total_frames=512", "--set", "algorithm.frames_per_batch=256",
                     "--set", "eval.every_frames=0", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["frames"] >= 512


@pytest.mark.slow
def test_the_mountaincar_gsde_recipe_runs(tmp_path):
    result = run_cli("run", "recipes/mountaincarcontinuous-sac-gsde.toml", "--out", str(tmp_path / "run"),
                     "--set", "run.total_frames=600", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["frames"] >= 600 and np.isfinite(summary["eval_return_mean"])


@pytest.mark.slow
def test_the_onnx_export_acts_with_the_mean(tmp_path):
    import onnxruntime

    run_dir = tmp_path / "run"
    result = run_cli("run", "recipes/pendulum-sac.toml", "--out", str(run_dir), "--set", "algorithm.use_sde=true",
                     "--set", "run.total_frames=200", "--set", "algorithm.learning_starts=64",
                     "--set", "algorithm.batch_size=32", "--set", "eval.every_frames=0", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    result = run_cli("export", str(run_dir), "--format", "onnx", "-o", str(tmp_path / "policy.onnx"))
    assert result.returncode == 0, result.stderr
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["action"], {"observation": OBSERVATIONS})[0]
    agent = rlplug.Agent.load(run_dir / "checkpoint.pt", out=tmp_path / "agent")
    np.testing.assert_allclose(got, agent.select_action(OBSERVATIONS), rtol=1e-5, atol=1e-5)
    explorer = next(m for m in agent.run.algorithm.policy.modules() if isinstance(m, ExplorationMatrices))
    loc, _ = explorer.scale(torch.as_tensor(OBSERVATIONS))
    np.testing.assert_allclose(got, 2 * torch.tanh(loc).detach().numpy(), rtol=1e-5, atol=1e-5)
