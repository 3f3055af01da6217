"""Networks: heads for discrete and continuous actions (state-independent log-std, tanh or no squashing),
the ``sequential`` network's size inference and its recipe-time rejections, mlp and sequential alike."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import CANONICAL, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli import assert_user_error, write_recipe

import rlplug
from rlplug import recipe as recipes
from rlplug.core.acting import ActorView
from rlplug.core.layers import LAYERS, build_layers
from rlplug.plugins.algorithms.onpolicy.base import log_prob_and_entropy
from rlplug.run.trainer import Run

NETWORKS = ["mlp", "sequential"]
SMALL = {"mlp": {"hidden": [16]}, "sequential": {"layers": [{"type": "Linear", "out": 16}, {"type": "Tanh"}]}}


@pytest.fixture(scope="module")
def cartpole():
    return rlplug.make("env", "gym", id="CartPole-v1", num_envs=2)


@pytest.fixture(scope="module")
def pendulum():
    return rlplug.make("env", "gym", id="Pendulum-v1", num_envs=2)


def network(env, name: str, role: str, **params):
    return rlplug.make("network", name, observation_spec=env.observation_spec, action_spec=env.action_spec,
                       role=role, **params)


@pytest.mark.parametrize("name", NETWORKS)
def test_discrete_policy_and_value_shapes(cartpole, name):
    policy = network(cartpole, name, "policy", **SMALL[name])
    view = ActorView.of(policy)
    assert view.categorical and view.observation_key == "observation"
    observation = torch.randn(5, 3, 4)
    assert view.params_module(observation).shape == (5, 3, 2)
    action, log_prob = view.act(observation)
    assert log_prob.shape == (5, 3) and torch.isfinite(log_prob).all()
    data = policy(cartpole.reset())
    assert data.get("action").shape == cartpole.action_spec.shape and data.get("action_log_prob").shape == (2,)
    value = network(cartpole, name, "value", **SMALL[name])
    assert value(cartpole.reset()).get("state_value").shape == (2, 1)


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize("log_std", ["parameter", "state"])
@pytest.mark.parametrize("squash", ["tanh", "none"])
def test_continuous_heads_keep_the_actor_shape(pendulum, name, log_std, squash):
    policy = network(pendulum, name, "policy", log_std=log_std, squash=squash, **SMALL[name])
    view = ActorView.of(policy)
    assert not view.categorical and view.param_keys == ("loc", "scale")
    observation = torch.randn(7, 3)
    loc, scale = view.params_module(observation)
    assert loc.shape == scale.shape == (7, 1) and (scale > 0).all()
    with torch.no_grad():
        action, log_prob = view.act(observation)
        assert action.shape == (7, 1) and log_prob.shape == (7,)
        torch.testing.assert_close(log_prob, view.distribution(observation).log_prob(action))
        evaluated, entropy = log_prob_and_entropy(view, observation, action, with_entropy=True)
        torch.testing.assert_close(evaluated, log_prob)
        assert entropy.shape == (7,)
        mode, _ = view.act(observation, deterministic=True)
        assert mode.shape == (7, 1)
    # The TensorDict road (the ProbabilisticActor itself) gives the same log-probability for its action.
    data = policy(pendulum.reset())
    assert data.get("action").shape == (2, 1)
    with torch.no_grad():
        expected = view.distribution(data.get("observation")).log_prob(data.get("action"))
    torch.testing.assert_close(data.get("action_log_prob"), expected)
    value = network(pendulum, name, "value", log_std=log_std, squash=squash, **SMALL[name])
    assert value(pendulum.reset()).get("state_value").shape == (2, 1)


@pytest.mark.parametrize("name", NETWORKS)
def test_tanh_samples_stay_in_the_bounds_with_finite_log_prob(pendulum, name):
    # A wide Gaussian around large means: most pre-tanh samples saturate, the worst case for log_prob.
    policy = network(pendulum, name, "policy", squash="tanh", log_std_init=3.0, init="default", **SMALL[name])
    view = ActorView.of(policy)
    assert view.distribution_kwargs["low"].tolist() == [-2.0] and view.distribution_kwargs["high"].tolist() == [2.0]
    with torch.no_grad():
        observation = torch.randn(4096, 3) * 100
        action, log_prob = view.act(observation)
        assert action.abs().max() <= 2.0 and action.abs().max() > 1.9
        assert torch.isfinite(log_prob).all()
        assert torch.isfinite(log_prob_and_entropy(view, observation, action)[0]).all()


def test_unsquashed_normal_is_unbounded_and_the_env_takes_its_actions(pendulum):
    policy = network(pendulum, "mlp", "policy", squash="none", log_std_init=2.0)
    view = ActorView.of(policy)
    assert view.distribution_kwargs == {}
    with torch.no_grad():
        action, log_prob = view.act(torch.randn(2048, 3))
        assert action.abs().max() > 2.0 and torch.isfinite(log_prob).all()
        # Exactly an independent Normal's density (summed over the action dims).
        loc, scale = view.params_module(torch.zeros(1, 3))
        one = torch.tensor([[0.5]])
        torch.testing.assert_close(view.distribution(torch.zeros(1, 3)).log_prob(one),
                                   torch.distributions.Normal(loc, scale).log_prob(one).sum(-1))
        rollout = pendulum.rollout(5, policy)  # Pendulum clips out-of-bounds torques itself
    assert rollout.batch_size == (2, 5)


@pytest.mark.parametrize("name", NETWORKS)
def test_parameter_log_std_is_state_independent_and_learnable(pendulum, name):
    policy = network(pendulum, name, "policy", log_std="parameter", log_std_init=-0.5, **SMALL[name])
    view = ActorView.of(policy)
    log_std = [p for n, p in policy.named_parameters() if n.endswith("log_std")]
    assert len(log_std) == 1 and log_std[0].requires_grad and log_std[0].shape == (1,)
    assert torch.equal(log_std[0].detach(), torch.tensor([-0.5]))
    _, scale = view.params_module(torch.randn(9, 3) * 10)
    assert torch.allclose(scale, torch.full_like(scale, math.exp(-0.5)))
    # A gradient reaches it through the log-probability, and a step changes the scale.
    optimiser = torch.optim.SGD(policy.parameters(), lr=0.1)
    observation = torch.randn(16, 3)
    log_prob, _ = log_prob_and_entropy(view, observation, torch.full((16, 1), 1.5))
    (-log_prob.mean()).backward()
    assert log_std[0].grad is not None and log_std[0].grad.abs().item() > 0
    optimiser.step()
    _, after = view.params_module(observation)
    assert not torch.allclose(after, scale[:1].expand_as(after))


def test_state_log_std_depends_on_the_observation(pendulum):
    policy = network(pendulum, "mlp", "policy", log_std="state", init="default")
    _, scale = ActorView.of(policy).params_module(torch.randn(9, 3) * 10)
    assert scale.unique().numel() > 1
    assert not any(n.endswith("log_std") for n, _ in policy.named_parameters())


@pytest.mark.parametrize("name", NETWORKS)
def test_orthogonal_init_uses_the_head_gains(cartpole, name):
    for role, gain in [("policy", 0.01), ("value", 1.0)]:
        net = network(cartpole, name, role, **SMALL[name])
        linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
        hidden, head = linears[0], linears[-1]
        # An orthogonal matrix times the gain: its rows (fewer than its columns for the head) are orthogonal.
        torch.testing.assert_close(head.weight @ head.weight.T, gain**2 * torch.eye(head.out_features))
        assert torch.count_nonzero(head.bias) == 0
        torch.testing.assert_close(hidden.weight.T @ hidden.weight, 2.0 * torch.eye(hidden.in_features))


def test_sequential_infers_sizes(cartpole, pendulum):
    layers = [{"type": "Linear", "out": 128}, {"type": "ReLU"}, {"type": "LayerNorm"},
              {"type": "Linear", "out": 64, "bias": False}, {"type": "LeakyReLU", "negative_slope": 0.1},
              {"type": "Dropout", "p": 0.0}, {"type": "Tanh"}]
    policy = network(cartpole, "sequential", "policy", layers=layers)
    trunk = ActorView.of(policy).params_module
    assert [type(m).__name__ for m in trunk] == ["Linear", "ReLU", "LayerNorm", "Linear", "LeakyReLU", "Dropout",
                                                 "Tanh", "Linear"]
    assert (trunk[0].in_features, trunk[0].out_features) == (4, 128)
    assert trunk[2].normalized_shape == (128,)
    assert (trunk[3].in_features, trunk[3].out_features, trunk[3].bias) == (128, 64, None)
    assert trunk[4].negative_slope == 0.1
    assert (trunk[7].in_features, trunk[7].out_features) == (64, 2)
    continuous = ActorView.of(network(pendulum, "sequential", "policy", layers=layers, log_std="state"))
    assert continuous.params_module[0][-1].out_features == 2  # mean and scale
    mean_only = ActorView.of(network(pendulum, "sequential", "policy", layers=layers))
    assert mean_only.params_module.trunk[-1].out_features == 1
    # No layers at all: a linear policy.
    linear = ActorView.of(network(cartpole, "sequential", "policy", layers=[])).params_module
    assert [type(m).__name__ for m in linear] == ["Linear"]


def test_sequential_default_is_mlps_default(cartpole):
    torch.manual_seed(0)
    mlp = network(cartpole, "mlp", "policy")
    torch.manual_seed(0)
    sequential = network(cartpole, "sequential", "policy")
    a, b = mlp.state_dict(), sequential.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "layers, fragments",
    [
        ([{"type": "Lineer", "out": 8}], ["layers", "layer 0", "unknown layer type 'Lineer'", "did you mean 'Linear'"]),
        ([{"type": "ReLU"}, {"type": "Linear"}], ["layer 1 (Linear)", "needs 'out'"]),
        ([{"type": "Linear", "out": 0}], ["layer 0 (Linear)", "out", "must be >= 1"]),
        ([{"type": "Linear", "out": "x"}], ["layer 0 (Linear)", "expected an integer"]),
        ([{"type": "Linear", "out_features": 8}], ["'out_features' is written 'out'"]),
        ([{"type": "Linear", "in_features": 3, "out": 8}], ["'in_features' is inferred"]),
        ([{"type": "LeakyReLU", "negative_slop": 0.1}], ["unknown option 'negative_slop'",
                                                         "did you mean 'negative_slope'"]),
        ([{"type": "Dropout", "p": 1.5}], ["layer 0 (Dropout)", "p: must be <= 1"]),
        ([{"out": 8}], ["layer 0", "needs a 'type'"]),
        ([{"type": "__class__"}], ["unknown layer type '__class__'"]),
        ([{"type": "Conv2d"}], ["unknown layer type 'Conv2d'"]),
        (["Linear"], ["layers[0]", "expected a table"]),
    ],
)
def test_sequential_rejects_bad_layers_before_building(cartpole, layers, fragments):
    with pytest.raises(rlplug.UserError) as caught:
        network(cartpole, "sequential", "policy", layers=layers)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_sequential_rejects_non_flat_features_at_build():
    from torchrl.data import Categorical, Composite, Unbounded

    observation_spec = Composite(observation=Unbounded(shape=(2, 3, 5)), shape=(2,))
    action_spec = Categorical(4, shape=(2,))
    with pytest.raises(rlplug.UserError, match="add {type = \"Flatten\"}"):
        rlplug.make("network", "sequential", observation_spec=observation_spec, action_spec=action_spec,
                    role="policy", layers=[{"type": "Linear", "out": 8}])
    layers = [{"type": "LayerNorm"}, {"type": "Flatten"}, {"type": "Linear", "out": 8}]
    policy = rlplug.make("network", "sequential", observation_spec=observation_spec, action_spec=action_spec,
                         role="policy", layers=layers)
    view = ActorView.of(policy)
    assert view.params_module(torch.randn(6, 7, 3, 5)).shape == (6, 7, 4)  # any batch dims in front
    assert view.params_module[0].normalized_shape == (5,) and view.params_module[2].in_features == 15


# Shape inference over random layer lists -------------------------------------------------------------------

OPTIONS = {
    "Linear": st.fixed_dictionaries({"out": st.integers(1, 9)}, optional={"bias": st.booleans()}),
    "LeakyReLU": st.fixed_dictionaries({}, optional={"negative_slope": st.floats(0, 1)}),
    "ELU": st.fixed_dictionaries({}, optional={"alpha": st.floats(0.1, 2)}),
    "GELU": st.fixed_dictionaries({}, optional={"approximate": st.sampled_from(["none", "tanh"])}),
    "LayerNorm": st.fixed_dictionaries({}, optional={"eps": st.floats(1e-6, 1e-3),
                                                     "elementwise_affine": st.booleans()}),
    "Dropout": st.fixed_dictionaries({}, optional={"p": st.floats(0, 1)}),
}
LAYER_TABLES = st.sampled_from(sorted(LAYERS)).flatmap(
    lambda kind: OPTIONS.get(kind, st.just({})).map(lambda options: {"type": kind, **options}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(LAYER_TABLES, max_size=6), st.lists(st.integers(1, 4), min_size=1, max_size=3),
       st.lists(st.integers(1, 3), max_size=2))
def test_inferred_shapes_match_the_layers_outputs(tables, shape, batch):
    layers, inferred = build_layers(tables, shape)
    assert len(layers) == len(tables)
    out = torch.nn.Sequential(*layers).eval()(torch.randn(*batch, *shape))
    assert tuple(out.shape) == (*batch, *inferred)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(LAYER_TABLES, max_size=5), st.sampled_from(["policy", "value"]))
def test_any_layer_list_makes_a_working_cartpole_network(cartpole, tables, role):
    net = network(cartpole, "sequential", role, layers=tables).eval()
    output = net(cartpole.reset())
    if role == "value":
        assert output.get("state_value").shape == (2, 1)
    else:
        assert ActorView.of(net).params_module(torch.randn(3, 4)).shape == (3, 2)
        assert output.get("action").shape == cartpole.action_spec.shape


# Through recipes and the real command line --------------------------------------------------------------------

def recipe_with_plain_policy(tmp_path):
    """The canonical recipe with a policy table that only names its network (no mlp keys)."""
    text = CANONICAL.read_text()
    old = '[algorithm.policy]\nuse = "mlp"\nhidden = [64, 64]\nactivation = "tanh"\n'
    assert old in text
    return write_recipe(tmp_path, text.replace(old, '[algorithm.policy]\nuse = "mlp"\n'))


@pytest.mark.slow
def test_cli_rejects_an_unknown_layer_in_one_line(tmp_path):
    recipe = recipe_with_plain_policy(tmp_path)
    out = tmp_path / "run"
    result = run_cli("run", str(recipe), "--out", str(out), "--set", "algorithm.policy.use=sequential",
                     "--set", 'algorithm.policy.layers=[{type="Lineer", out=8}]')
    assert_user_error(result, str(recipe), "algorithm.policy.layers", "unknown layer type 'Lineer'",
                      "did you mean 'Linear'")
    assert not out.exists()


def test_sequential_continuous_policy_trains_and_its_recipe_runs_again(tmp_path):
    recipe = recipes.load(recipe_with_plain_policy(tmp_path), [
        "run.total_frames=256", "eval.episodes=1", "env.id=Pendulum-v1", "env.num_envs=2",
        "algorithm.frames_per_batch=128", "algorithm.minibatch_size=64", "algorithm.epochs=1",
        "algorithm.policy.use=sequential", "algorithm.policy.squash=none", "algorithm.policy.log_std_init=-0.5",
        'algorithm.policy.layers=[{type="Linear", out=32}, {type="LayerNorm"}, {type="SiLU"}]'])
    run = Run.build(recipe, tmp_path / "run")
    assert run.train()["status"] == "finished"
    again = recipes.load(tmp_path / "run" / "recipe.toml")
    policy = again.resolved()["algorithm"]["policy"]
    assert policy["layers"][0] == {"type": "Linear", "out": 32}
    assert (policy["squash"], policy["log_std"], policy["log_std_init"]) == ("none", "parameter", -0.5)
