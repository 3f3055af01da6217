"""Action spaces beyond one Discrete or one Box vector: MultiDiscrete and MultiBinary as independent categorical
parts whose log-probabilities and entropies add up, Discrete with a start, Box of any shape; what reaches
gymnasium on both stepping roads; DQN's refusal of parts; a two-part bandit learned through the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import toy_spaces  # noqa: F401  (registers the RlplugToy ids)
from conftest import CANONICAL, rlplug_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import assert_user_error
from test_images import learn
from torchrl.data import Binary, Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot, Unbounded

import rlplug
from rlplug.core.acting import ActorView
from rlplug.core.actions import IndependentCategoricals, action_layout

ECHO = "RlplugToy/ActionEcho-v0"


def echo_env(space: str, num_envs: int = 2):
    return rlplug.make("env", "gym", id=ECHO, num_envs=num_envs, kwargs={"space": space})


def policy_for(env, **params):
    return rlplug.make("network", "mlp", observation_spec=env.observation_spec, action_spec=env.action_spec,
                       role="policy", hidden=[8], **params)


# -- the layouts TorchRL writes actions in ------------------------------------------------------------------

@pytest.mark.parametrize("spec, kind, parts, one_hot, low", [
    (OneHot(4, shape=(2, 4)), "categorical", (4,), True, None),
    (Categorical(4, shape=(2,)), "categorical", (4,), False, None),
    (OneHot(3, shape=(2, 2, 3)), "parts", (3, 3), True, None),           # MultiDiscrete([3, 3]), one env of two
    (MultiOneHot([3, 4], shape=(2, 7)), "parts", (3, 4), True, None),
    (Categorical(3, shape=(2, 2)), "parts", (3, 3), False, None),
    (MultiCategorical([3, 4], shape=(2, 2)), "parts", (3, 4), False, None),
    (Binary(3, shape=(2, 3)), "parts", (2, 2, 2), False, None),           # MultiBinary(3)
    (Bounded(torch.tensor([5, 1]), torch.tensor([7, 4]), (2,), dtype=torch.int64).expand(2, 2), "parts", (3, 4),
     False, (5, 1)),                                                       # a vector env's MultiDiscrete with start
    (Bounded(-1.0, 1.0, (2, 2, 3)), "continuous", (), False, None),
    (Unbounded((2, 5)), "continuous", (), False, None),
])
def test_every_spec_torchrl_writes_is_read_as_its_layout(spec, kind, parts, one_hot, low):
    layout = action_layout(spec, env_dims=1)
    assert (layout.kind, layout.parts, layout.one_hot, layout.low) == (kind, parts, one_hot, low)
    assert layout.shape == tuple(spec.shape[1:])


# -- independent categoricals: known inputs and a plain reference ------------------------------------------

def test_log_prob_and_entropy_of_parts_are_their_sums():
    logits = torch.tensor([1.0, 2.0, 0.5, 0.0, -1.0, 3.0, 0.25])  # parts of 3 and 4 choices
    first, second = logits[:3].log_softmax(-1), logits[3:].log_softmax(-1)
    expected = first[2] + second[1]
    entropy = -(first.exp() * first).sum() - (second.exp() * second).sum()
    for kwargs, action in [
        ({"shape": (2,)}, torch.tensor([2, 1])),                                       # MultiCategorical
        ({"shape": (2,), "low": (5, 1)}, torch.tensor([7, 2])),                         # indices from each start
        ({"shape": (7,), "one_hot": True}, torch.tensor([0, 0, 1, 0, 1, 0, 0])),        # MultiOneHot
    ]:
        dist = IndependentCategoricals(logits, parts=(3, 4), **kwargs)
        torch.testing.assert_close(dist.log_prob(action), expected)
        torch.testing.assert_close(dist.entropy(), entropy)
    mode = IndependentCategoricals(logits, parts=(3, 4), shape=(2,), low=(5, 1)).deterministic_sample
    assert mode.tolist() == [6, 3]  # argmax 1 of the first part (+5), argmax 2 of the second (+1)


def test_equal_parts_one_hot_with_a_parts_dim():
    logits = torch.tensor([[0.0, 1.0, 2.0, 2.0, 1.0, 0.0]])
    dist = IndependentCategoricals(logits, parts=(3, 3), shape=(2, 3), one_hot=True)
    action = torch.tensor([[[1, 0, 0], [1, 0, 0]]])
    expected = logits[0, :3].log_softmax(-1)[0] + logits[0, 3:].log_softmax(-1)[0]
    torch.testing.assert_close(dist.log_prob(action), expected.reshape(1))
    assert dist.sample().shape == (1, 2, 3) and (dist.sample().sum(-1) == 1).all()


def test_multibinary_parts_are_bernoullis():
    """A bit as a part of two choices: the same probabilities as a Bernoulli of logit l1 - l0."""
    logits = torch.tensor([0.3, -0.7, 1.5, 0.0, -2.0, 0.5])  # three bits, [l0, l1] each
    bits = torch.tensor([1, 0, 1], dtype=torch.int8)
    dist = IndependentCategoricals(logits, parts=(2, 2, 2), shape=(3,), dtype=torch.int8)
    pairs = logits.reshape(3, 2)
    bernoulli = torch.distributions.Bernoulli(logits=pairs[:, 1] - pairs[:, 0])
    torch.testing.assert_close(dist.log_prob(bits), bernoulli.log_prob(bits.float()).sum())
    torch.testing.assert_close(dist.entropy(), bernoulli.entropy().sum())
    assert dist.sample().dtype == torch.int8


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.integers(0, 2**31 - 1), st.booleans())
def test_parts_against_a_categorical_per_part(parts, seed, one_hot):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, sum(parts), generator=generator) * 3
    shape = (sum(parts),) if one_hot else (len(parts),)
    dist = IndependentCategoricals(logits, parts=parts, shape=shape, one_hot=one_hot)
    action = dist.sample()
    assert action.shape == (6, *shape)
    references = [torch.distributions.Categorical(logits=piece) for piece in logits.split(parts, -1)]
    indices = ([piece.argmax(-1) for piece in action.split(parts, -1)] if one_hot else action.unbind(-1))
    torch.testing.assert_close(dist.log_prob(action), sum(r.log_prob(i) for r, i in zip(references, indices)))
    torch.testing.assert_close(dist.entropy(), sum(r.entropy() for r in references))


def test_gradients_of_unequal_parts_are_finite():
    logits = torch.randn(4, 7, requires_grad=True)
    dist = IndependentCategoricals(logits, parts=(3, 4), shape=(2,))
    (dist.log_prob(dist.sample()).sum() + dist.entropy().sum()).backward()
    assert torch.isfinite(logits.grad).all()


# -- through the gym env: what gymnasium receives ----------------------------------------------------------

def test_discrete_with_a_start_gets_start_plus_index_on_both_roads():
    env = echo_env("discrete-start")  # Discrete(3, start=5); the reward is the value gymnasium received
    assert env.supports_tensor_steps
    env.reset_arrays(seed=0)
    assert env.step_arrays(np.array([0, 2])).reward.tolist() == [5.0, 7.0]
    state = env.reset()
    state.set("action", torch.nn.functional.one_hot(torch.tensor([1, 2]), 3))
    assert env.step(state).get(("next", "reward")).reshape(-1).tolist() == [6.0, 7.0]


def test_multibinary_and_box_actions_reach_gymnasium_as_sampled():
    env = echo_env("multibinary")  # reward: the bits weighted 1, 2, 4
    data = env.rollout(4, policy_for(env), break_when_any_done=False)
    bits = data.get("action").float()
    assert data.get("action").dtype == torch.int8 and bits.shape == (2, 4, 3)
    torch.testing.assert_close(data.get(("next", "reward")).squeeze(-1), bits @ torch.tensor([1.0, 2.0, 4.0]))
    box = echo_env("box23")  # reward: the action weighted 1..6
    data = box.rollout(4, policy_for(box, squash="none", log_std_init=1.0), break_when_any_done=False)
    action = data.get("action")
    assert action.shape == (2, 4, 2, 3)
    torch.testing.assert_close(data.get(("next", "reward")).squeeze(-1),
                               (action * torch.arange(1.0, 7.0).reshape(2, 3)).sum((-1, -2)))


@pytest.mark.parametrize("squash", ["tanh", "none"])
def test_box_of_shape_2_3_log_prob_sums_every_entry(squash):
    env = echo_env("box23")
    view = ActorView.of(policy_for(env, squash=squash, log_std="state"))
    observation = torch.randn(5, 2)
    loc, scale = view.params_module(observation)
    assert loc.shape == scale.shape == (5, 2, 3)
    with torch.no_grad():
        action, log_prob = view.act(observation)
    assert action.shape == (5, 2, 3) and log_prob.shape == (5,)
    if squash == "none":
        expected = torch.distributions.Normal(loc, scale).log_prob(action).sum((-1, -2))
        torch.testing.assert_close(log_prob, expected)
    assert ((action >= -1) & (action <= 1)).all() or squash == "none"


def test_select_action_answers_in_gymnasiums_format(tmp_path):
    observation = np.zeros(2, np.float32)
    for space, check in [("discrete-start", lambda a: int(a) in (5, 6, 7)),
                         ("multibinary", lambda a: a.shape == (3,) and set(a.tolist()) <= {0, 1}),
                         ("box23", lambda a: a.shape == (2, 3))]:
        agent = rlplug.Agent.from_recipe({"env": {"use": "gym", "id": ECHO, "kwargs": {"space": space}},
                                          "algorithm": {"use": "ppo", "frames_per_batch": 16, "minibatch_size": 16},
                                          "loggers": []},
                                         out=tmp_path / space)
        action = agent.select_action(observation)
        assert check(action), (space, action)
        assert agent.select_action(np.stack([observation] * 3)).shape[0] == 3


# -- refusals ----------------------------------------------------------------------------------------------

def test_dqn_refuses_parts_naming_the_algorithm(tmp_path):
    for space in ("multibinary",):
        with pytest.raises(rlplug.UserError) as caught:
            rlplug.Agent.from_recipe({"env": {"use": "gym", "id": ECHO, "kwargs": {"space": space}},
                                      "algorithm": {"use": "dqn"}, "loggers": []}, out=tmp_path / space)
        message = str(caught.value)
        assert message.startswith("<recipe dict>: algorithm: dqn learns one Q-value per choice of one Discrete action")
        assert "3 categorical parts of 2, 2, 2 choices" in message and "\n" not in message


def test_an_action_space_no_policy_acts_in_is_one_line_naming_the_env():
    with pytest.raises(rlplug.UserError) as caught:
        echo_env("tuple")
    message = str(caught.value)
    assert message.startswith("env: RlplugToy/ActionEcho-v0 has a Tuple") and "\n" not in message
    assert "supported: Discrete, MultiDiscrete, MultiBinary and Box" in message


@pytest.mark.slow
def test_cli_dqn_on_multidiscrete_is_one_line(tmp_path):
    result = rlplug_cli("run", str(CANONICAL.parent / "cartpole-dqn.toml"), "--out", str(tmp_path / "run"),
                        "--set", "env.id=Pendulum-v1", "--set",
                        'env.wrappers=[{name = "DiscretizeAction", kwargs = {bins = 3, multidiscrete = true}}]')
    assert_user_error(result, "cartpole-dqn.toml", "algorithm:", "dqn learns one Q-value per choice",
                      "1 categorical part of 3 choices", "ppo")
    assert not (tmp_path / "run").exists()


# -- learning through the CLI ------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_ppo_learns_a_two_part_bandit(tmp_path, install):
    """Both parts must be learned: one part alone earns 10 + 3.3 (the plateau before the parts' sum)."""
    summary = learn(tmp_path, install, "RlplugToy/TwoPartBandit-v0", """
        [algorithm]
        use = "ppo"
        frames_per_batch = 256
        epochs = 10
        minibatch_size = 128
        lr = 3e-3
        policy = {use = "mlp", hidden = [32]}
        critic = {use = "mlp", hidden = [32]}
    """, frames=12_288)
    assert summary["eval_return_mean"] >= 19.0, summary  # perfect 20, random 6.7
