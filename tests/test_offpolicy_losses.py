"""Off-policy losses: rlplug's own against TorchRL's (values and gradients on random replay samples, wherever
both define the same quantity), and known inputs pinning each formula: DQN's target from the target network
(and double DQN's argmax from the online one), the termination mask, TD3's lower twin, SAC's temperature
gradient. Where they differ by design:

- TD3's target-action noise: rlplug's is a fraction of the action half-range, TorchRL's in action units (the
  comparison turns the noise off);
- TorchRL's TD3 and SAC make their twin critics from one network; rlplug's algorithms build each twin.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

import rlplug

ENVS = {"discrete": "CartPole-v1", "continuous": "Pendulum-v1"}
SETTINGS = SimpleNamespace(gamma=0.9, double=False, burn_in=0, target_policy_noise=0.0, target_noise_clip=0.5,
                           initial_entropy_coef=0.5, learn_entropy_coef=True, target_entropy=None)


@functools.cache
def env_of(kind: str):
    return rlplug.make("env", "gym", id=ENVS[kind])


def specs(kind: str) -> dict:
    env = env_of(kind)
    return {"observation_spec": env.observation_spec, "action_spec": env.action_spec}


def loss_of(name: str, networks: dict, kind: str, **settings_changes):
    settings = SimpleNamespace(**{**vars(SETTINGS), **settings_changes})
    return rlplug.make("loss", name, networks=networks, settings=settings, **specs(kind))


def replay_sample(kind: str, rows: int, seed: int, terminated_share: float = 0.3) -> TensorDict:
    """A replay sample in TorchRL's layout: random observations, actions, rewards and terminations."""
    generator = torch.Generator().manual_seed(seed)
    env = env_of(kind)
    size = env.observation_spec["observation"].shape[-1]
    if kind == "discrete":
        action = torch.nn.functional.one_hot(torch.randint(2, (rows,), generator=generator), 2)
    else:
        action = 4 * torch.rand(rows, 1, generator=generator) - 2
    terminated = torch.rand(rows, 1, generator=generator) < terminated_share
    return TensorDict({
        "observation": torch.randn(rows, size, generator=generator), "action": action,
        "next": {"observation": torch.randn(rows, size, generator=generator),
                 "reward": torch.randn(rows, 1, generator=generator), "terminated": terminated,
                 "done": terminated.clone()},
    }, [rows])


def terms_and_gradients(loss, data, parameters) -> tuple[dict[str, float], list[torch.Tensor]]:
    out = loss(data.clone())
    total = sum(value for key, value in out.items() if key.startswith("loss"))
    gradients = torch.autograd.grad(total, parameters, allow_unused=True)
    terms = {key: float(value.detach()) for key, value in out.items() if key.startswith("loss")}
    return terms, [torch.zeros_like(p) if g is None else g for p, g in zip(parameters, gradients)]


def network(role: str, kind: str, seed: int):
    torch.manual_seed(seed)
    return rlplug.make("network", "mlp", role=role, hidden=[16], **specs(kind))


# -- DQN -------------------------------------------------------------------------------------------------

@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(2, 64), double=st.booleans())
def test_our_dqn_loss_is_torchrls_dqn_loss(seed, rows, double):
    q = network("q_values", "discrete", seed)
    ours = loss_of("dqn-loss", {"q_network": q}, "discrete", double=double)
    theirs = loss_of("DQNLoss", {"q_network": q}, "discrete", double=double)
    data = replay_sample("discrete", rows, seed)
    parameters = list(q.parameters())
    (mine, my_gradients), (their, their_gradients) = (terms_and_gradients(loss, data, parameters)
                                                      for loss in (ours, theirs))
    assert mine["loss"] == pytest.approx(their["loss"], rel=1e-5, abs=1e-7)
    for a, b in zip(my_gradients, their_gradients):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def constant_q(values: list[float]):
    """A Q-network module answering ``values`` for every observation (weights zero, bias the values)."""
    from tensordict.nn import TensorDictModule

    linear = torch.nn.Linear(4, len(values))
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.copy_(torch.tensor(values))
    return TensorDictModule(linear, in_keys=["observation"], out_keys=["action_value"])


@pytest.mark.parametrize("double, expected_next", [(False, 5.0), (True, 1.0)])
def test_dqn_bootstraps_from_the_target_network_and_double_dqn_lets_the_online_network_choose(double, expected_next):
    """Online Q = [0, 3] (prefers action 1), target Q' = [5, 1]: plain DQN bootstraps from max Q' = 5,
    double DQN from Q'(argmax Q) = Q'[1] = 1. The taken action is 0 (Q = 0), reward 1, gamma 0.5; the second
    row terminated, so its target is the reward alone."""
    q = constant_q([0.0, 3.0])
    loss = loss_of("dqn-loss", {"q_network": q}, "discrete", gamma=0.5, double=double)
    with torch.no_grad():
        loss.target_value_network.module.bias.copy_(torch.tensor([5.0, 1.0]))
    data = TensorDict({"observation": torch.zeros(2, 4), "action": torch.tensor([[1, 0], [1, 0]]),
                       "next": {"observation": torch.zeros(2, 4), "reward": torch.ones(2, 1),
                                "terminated": torch.tensor([[False], [True]])}}, [2])
    loss(data)
    targets = [1.0 + 0.5 * expected_next, 1.0]  # Q(s, 0) = 0: the TD error is the target itself
    assert data.get("td_error").tolist() == pytest.approx(targets)


def test_dqn_target_updates_move_the_target_by_tau_and_never_the_online_network():
    q = constant_q([0.0, 3.0])
    loss = loss_of("dqn-loss", {"q_network": q}, "discrete")
    with torch.no_grad():
        loss.target_value_network.module.bias.copy_(torch.tensor([5.0, 1.0]))
    loss.update_targets(0.25)
    assert loss.target_value_network.module.bias.tolist() == pytest.approx([3.75, 1.5])
    assert q.module.bias.tolist() == [0.0, 3.0]


# -- DDPG, TD3, SAC --------------------------------------------------------------------------------------

@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(2, 64))
def test_our_ddpg_loss_is_torchrls_ddpg_loss(seed, rows):
    actor, critic = network("deterministic_policy", "continuous", seed), network("q_value", "continuous", seed + 1)
    networks = {"policy": actor, "critic": critic, "critics": [critic]}
    ours, theirs = loss_of("ddpg-loss", networks, "continuous"), loss_of("DDPGLoss", networks, "continuous")
    data = replay_sample("continuous", rows, seed)
    parameters = [*actor.parameters(), *critic.parameters()]
    (mine, my_gradients), (their, their_gradients) = (terms_and_gradients(loss, data, parameters)
                                                      for loss in (ours, theirs))
    for key in ("loss_actor", "loss_value"):
        assert mine[key] == pytest.approx(their[key], rel=1e-5, abs=1e-7), key
    for a, b in zip(my_gradients, their_gradients):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_actor_term_moves_only_the_actor_and_the_critic_term_only_the_critic():
    actor, critic = network("deterministic_policy", "continuous", 0), network("q_value", "continuous", 1)
    loss = loss_of("ddpg-loss", {"policy": actor, "critic": critic, "critics": [critic]}, "continuous")
    out = loss(replay_sample("continuous", 16, 0))
    actor_on_critic = torch.autograd.grad(out["loss_actor"], list(critic.parameters()), allow_unused=True)
    critic_on_actor = torch.autograd.grad(out["loss_value"], list(actor.parameters()), allow_unused=True)
    assert all(g is None or not g.any() for g in (*actor_on_critic, *critic_on_actor))
    assert loss.parameter_groups.keys() == {"actor", "critic"}
    assert loss.term_learners == {"loss_actor": "actor", "loss_value": "critic"}


class ConstantCritic(torch.nn.Module):
    """Q(s, a) = ``value`` everywhere (a learnable bias)."""

    def __init__(self, value: float):
        super().__init__()
        self.value = torch.nn.Parameter(torch.tensor([value]))

    def forward(self, observation, action):
        return self.value.expand(*observation.shape[:-1], 1)


def test_td3_bootstraps_from_the_lower_of_its_twin_targets():
    """Twin critics answering 1 and 4 everywhere, no target noise: the target is r + gamma * 1."""
    from tensordict.nn import TensorDictModule

    first, second = (TensorDictModule(ConstantCritic(v), in_keys=["observation", "action"],
                                      out_keys=["state_action_value"]) for v in (1.0, 4.0))
    actor = network("deterministic_policy", "continuous", 0)
    loss = loss_of("td3-loss", {"policy": actor, "critic": first, "critics": [first, second]}, "continuous", gamma=0.5)
    data = replay_sample("continuous", 8, 0, terminated_share=0.0)
    out = loss(data)
    reward = data.get(("next", "reward"))
    assert float(out["target_value"]) == pytest.approx(float((reward + 0.5).mean()), rel=1e-6)


def test_sacs_temperature_falls_when_the_policy_is_more_random_than_its_target_entropy():
    """d loss_alpha / d log_alpha = entropy - target entropy: above the target, gradient descent lowers alpha."""
    actor = network("policy", "continuous", 0)
    critics = [network("q_value", "continuous", 1), network("q_value", "continuous", 2)]
    for target_entropy in (-5.0, 5.0):
        loss = loss_of("sac-loss", {"policy": actor, "critic": critics[0], "critics": critics}, "continuous",
                       target_entropy=target_entropy)
        out = loss(replay_sample("continuous", 64, 0))
        (gradient,) = torch.autograd.grad(out["loss_alpha"], [loss.log_alpha])
        assert float(gradient) == pytest.approx(float(out["entropy"]) - target_entropy, rel=1e-5)


@pytest.mark.parametrize("recipe, loss", [("pendulum-ddpg", "DDPGLoss"), ("pendulum-td3", "TD3Loss"),
                                          ("pendulum-sac", "SACLoss"), ("cartpole-dqn", "DQNLoss"),
                                          ("pendulum-td3", "td3-loss"), ("cartpole-dqn", "dqn-loss")])
def test_every_offpolicy_loss_trains_its_algorithm(tmp_path, recipe, loss):
    small = {"batch_size": 32, "random_frames": 50, "learning_starts": 100, "replay_buffer": {"capacity": 1000},
             "loss": {"use": loss}}
    if recipe == "cartpole-dqn":
        small.update(steps_per_update=20, gradient_steps=4, target_update_interval=40)
    agent = rlplug.Agent.from_recipe(ROOT / "recipes" / f"{recipe}.toml", out=tmp_path / "run",
                                     run={"total_frames": 300}, eval={"episodes": 1, "every_frames": 0},
                                     algorithm=small, loggers=[{"use": "csv"}])
    algorithm = agent.run.algorithm
    before = [p.detach().clone() for p in algorithm.parameters]
    targets = {k: v.clone() for k, v in algorithm.loss_module.state_dict().items() if "target" in k}
    assert agent.train()["status"] == "finished"
    assert all(not torch.equal(a, b) for a, b in zip(before, algorithm.parameters)), "every learner stepped"
    moved = {k for k, v in algorithm.loss_module.state_dict().items()
             if k in targets and not torch.equal(v, targets[k])}
    assert targets and moved, "the target networks follow the online ones"


class ConstantActor(torch.nn.Module):
    """mu(s) = 0 everywhere."""

    def forward(self, observation):
        return torch.zeros(*observation.shape[:-1], 1)


class ActionCritic(torch.nn.Module):
    """Q(s, a) = a: the critic reads back the action it is given."""

    def forward(self, observation, action):
        return action


def test_td3_target_noise_is_clipped_in_fractions_of_the_action_half_range():
    """Pendulum's actions are in [-2, 2] (half-range 2); the target actor says 0; noise of huge scale clipped at
    0.5 moves the target action to exactly +-1; with Q(s, a) = a, reward 0 and Q(s, a) = 0 for the taken action,
    each TD error is gamma * |a'| = gamma."""
    from tensordict.nn import TensorDictModule

    actor = TensorDictModule(ConstantActor(), in_keys=["observation"], out_keys=["action"])
    critics = [TensorDictModule(ActionCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
               for _ in range(2)]
    loss = loss_of("td3-loss", {"policy": actor, "critic": critics[0], "critics": critics}, "continuous",
                   gamma=0.5, target_policy_noise=1e3, target_noise_clip=0.5)
    loss.with_actor = False  # the actor here has no parameters to train
    data = replay_sample("continuous", 64, 0, terminated_share=0.0)
    data.set("action", torch.zeros(64, 1))
    data.set(("next", "reward"), torch.zeros(64, 1))
    loss(data)
    assert data.get("td_error").tolist() == pytest.approx([0.5] * 64)


def test_sacs_actor_term_trades_the_lower_critic_against_entropy():
    """Critics answering 1 and 4 everywhere: loss_actor = alpha * E[log pi] - min Q = -alpha * entropy - 1."""
    from tensordict.nn import TensorDictModule

    critics = [TensorDictModule(ConstantCritic(v), in_keys=["observation", "action"], out_keys=["state_action_value"])
               for v in (1.0, 4.0)]
    actor = network("policy", "continuous", 0)
    loss = loss_of("sac-loss", {"policy": actor, "critic": critics[0], "critics": critics}, "continuous",
                   initial_entropy_coef=0.5)
    out = loss(replay_sample("continuous", 64, 0))
    assert float(out["loss_actor"]) == pytest.approx(-0.5 * float(out["entropy"]) - 1.0, rel=1e-5)


@pytest.mark.parametrize("name, critics", [("ddpg-loss", 1), ("sac-loss", 2), ("td3-loss", 2)])
def test_a_loss_state_from_when_one_class_held_every_actor_critic_loss_still_loads(name, critics):
    """Checkpoints written when one class computed DDPG's, TD3's and SAC's losses hold the action bounds as
    buffers of each; the losses that no longer keep them load such a state strictly (resume, eval), and TD3's,
    which does, keeps its own values."""
    role = "policy" if name == "sac-loss" else "deterministic_policy"
    networks = {"policy": network(role, "continuous", 0)}
    networks["critics"] = [network("q_value", "continuous", 1 + i) for i in range(critics)]
    networks["critic"] = networks["critics"][0]
    loss = loss_of(name, networks, "continuous")
    former = {**loss.state_dict(), "action_low": torch.tensor([-2.0]), "action_high": torch.tensor([2.0])}
    loss.load_state_dict(former)  # strict: nothing unexpected, nothing missing
    assert set(loss.state_dict()) == set(former) if name == "td3-loss" else set(former) - set(loss.state_dict()) == \
        {"action_low", "action_high"}


@pytest.mark.parametrize("recipe, loss", [("pendulum-td3", "TD3Loss"), ("pendulum-sac", "SACLoss"),
                                          ("pendulum-crossq", "CrossQLoss"), ("pendulum-redq", "REDQLoss")])
def test_torchrls_losses_read_one_envs_actions_with_several_env_copies(tmp_path, recipe, loss):
    """The env's action spec has the copies' dims ([num_envs, 1] on Pendulum); TorchRL's losses read one
    transition's: TD3Loss clamped its target actions to [num_envs, 1] bounds (a shape error at the first gradient
    step), SACLoss and CrossQLoss counted num_envs action dimensions in their automatic target entropy."""
    small = {"batch_size": 32, "random_frames": 50, "learning_starts": 100, "replay_buffer": {"capacity": 1000},
             "loss": {"use": loss}}
    agent = rlplug.Agent.from_recipe(ROOT / "recipes" / f"{recipe}.toml", out=tmp_path / "run",
                                     env={"num_envs": 4}, run={"total_frames": 300},
                                     eval={"episodes": 1, "every_frames": 0}, algorithm=small, loggers=[])
    loss_module = agent.run.algorithm.loss_module
    if loss == "TD3Loss":
        assert loss_module.min_action.tolist() == [-2.0] and loss_module.max_action.tolist() == [2.0]
    else:
        assert float(loss_module.target_entropy) == -1.0  # Pendulum: one action dimension
    assert agent.train()["status"] == "finished"


def test_a_td3_loss_state_with_the_envs_dims_on_its_bounds_still_loads():
    """Checkpoints written while TD3Loss took the env's action spec hold its bounds as [num_envs, 1]."""
    from tensordict.nn import TensorDictModule
    from torchrl.data import Bounded

    from rlplug.plugins.algorithms.td3.algorithm import DelayableTD3Loss

    actor = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    critic = TensorDictModule(ActionCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    loss = DelayableTD3Loss(actor, critic, action_spec=Bounded(-2.0, 2.0, shape=(1,)))
    former = {**loss.state_dict(), "min_action": torch.full((1, 1), -2.0), "max_action": torch.full((1, 1), 2.0)}
    loss.load_state_dict(former)  # strict
    assert loss.min_action.shape == (1,) and loss.min_action.tolist() == [-2.0] and loss.max_action.tolist() == [2.0]
