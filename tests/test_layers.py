"""Layer types of the ``sequential`` network, each one record of ``rlplug.core.layers.LAYER_TYPES``: BatchNorm1d
and LayerNorm over any batch dims, train and eval modes, their options checked in one line, through the CLI."""

from __future__ import annotations

import pytest
import torch
from conftest import CANONICAL, one_line_error, run_cli

import rlplug
from rlplug.core.acting import ActorView
from rlplug.core.layers import LAYER_TYPES, LAYERS, BatchNorm1d, build_layers

NORMS = [{"type": "Linear", "out": 8}, {"type": "BatchNorm1d", "momentum": 0.5}, {"type": "ReLU"},
         {"type": "LayerNorm"}]


def sequential_trunk(layers):
    from torchrl.data import Categorical, Composite, Unbounded

    policy = rlplug.make("network", "sequential", observation_spec=Composite(observation=Unbounded(shape=(3,))),
                         action_spec=Categorical(2), role="policy", layers=layers)
    return ActorView.of(policy).params_module


def test_batch_and_layer_norm_build_from_tables_and_read_any_batch_dims():
    trunk = sequential_trunk(NORMS)
    assert [type(m).__name__ for m in trunk] == ["Linear", "BatchNorm1d", "ReLU", "LayerNorm", "Linear"]
    norm = trunk[1]
    assert (norm.num_features, norm.momentum, trunk[3].normalized_shape) == (8, 0.5, (8,))
    assert trunk(torch.randn(5, 3)).shape == (5, 2)  # [B, C]
    assert trunk(torch.randn(4, 6, 3)).shape == (4, 6, 2)  # [envs, time, C]
    assert trunk.eval()(torch.randn(3)).shape == (2,)  # one observation, no batch dims


def test_batch_norm_normalises_over_every_batch_dim_in_train_mode_and_uses_running_stats_in_eval():
    torch.manual_seed(0)
    norm = BatchNorm1d(4, momentum=1.0, affine=False)  # momentum 1: the running stats are the last batch's
    x = torch.randn(3, 5, 4) * torch.tensor([1.0, 2.0, 3.0, 4.0]) + 10.0
    y = norm.train()(x)
    flat = y.reshape(-1, 4)
    torch.testing.assert_close(flat.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(flat.var(0, unbiased=False), torch.ones(4), atol=1e-3, rtol=0)
    torch.testing.assert_close(norm.running_mean, x.reshape(-1, 4).mean(0))
    new = torch.randn(2, 4) + 10.0
    expected = (new - norm.running_mean) / torch.sqrt(norm.running_var + norm.eps)
    torch.testing.assert_close(norm.eval()(new), expected)
    assert not torch.allclose(norm.train()(new), expected)  # train mode would use the batch's own stats


def test_every_layer_type_infers_its_size_argument():
    for name, kind in LAYER_TYPES.items():
        table = {"type": name, **{key: 4 for key in kind.required}}
        (layer,), shape = build_layers([table], (6,))
        assert isinstance(layer, (kind.module, torch.nn.Identity)), name
        if kind.size is not None:
            assert getattr(layer, kind.size) in (6, (6,)), name
        assert layer.eval()(torch.randn(2, 6)).shape == (2, *shape), name


@pytest.mark.parametrize("table, fragments", [
    ({"type": "BatchNorm1d", "momentum": 2.0}, ["layer 0 (BatchNorm1d)", "momentum: must be <= 1"]),
    ({"type": "BatchNorm1d", "eps": 0}, ["layer 0 (BatchNorm1d)", "eps: must be > 0"]),
    ({"type": "BatchNorm1d", "num_features": 8}, ["'num_features' is inferred", "remove it"]),
    ({"type": "BatchNorm1d", "momentun": 0.1}, ["unknown option 'momentun'", "did you mean 'momentum'"]),
    ({"type": "BatchNorm1d", "affine": "yes"}, ["layer 0 (BatchNorm1d)", "affine"]),
    ({"type": "LayerNorm", "normalized_shape": 8}, ["'normalized_shape' is inferred"]),
    ({"type": "Batchnorm1d"}, ["unknown layer type 'Batchnorm1d'", "did you mean 'BatchNorm1d'"]),
])
def test_bad_layer_options_are_one_line_errors(table, fragments):
    with pytest.raises(rlplug.UserError) as caught:
        sequential_trunk([table])
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.slow
def test_cli_refuses_a_bad_batch_norm_option_before_the_run(tmp_path):
    recipe = tmp_path / "recipe.toml"
    text = CANONICAL.read_text()
    old = '[algorithm.policy]\nuse = "mlp"\nhidden = [64, 64]\nactivation = "tanh"\n'
    assert old in text
    layers = 'layers = [{type = "Linear", out = 8}, {type = "BatchNorm1d", momentum = 2}]\n'
    recipe.write_text(text.replace(old, '[algorithm.policy]\nuse = "sequential"\n' + layers))
    out = tmp_path / "run"
    result = run_cli("run", str(recipe), "--out", str(out))
    one_line_error(result, str(recipe), "algorithm.policy.layers", "layer 1 (BatchNorm1d)", "momentum: must be <= 1")
    assert not out.exists()


@pytest.mark.slow
def test_show_sequential_names_every_layer_type():
    result = run_cli("show", "sequential")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for name in LAYERS:
        assert name in text, name
    assert "BatchNorm1d (eps, momentum, affine, track_running_stats" in text


@pytest.mark.parametrize("first, refused", [("Dropout", False), ("Identity", False), ("Tanh", False),
                                            ("LayerNorm", True), ("BatchNorm1d", True)])
def test_a_critic_reads_the_action_only_behind_elementwise_layers(first, refused):
    """A critic of (observation, action) joins the action at its first Linear: only a layer that acts on each
    feature alone (LayerType.elementwise) may come before it."""
    from torchrl.data import Bounded, Composite, Unbounded

    specs = {"observation_spec": Composite(observation=Unbounded(shape=(3,))),
             "action_spec": Bounded(-2.0, 2.0, shape=(1,))}
    layers = [{"type": first}, {"type": "Linear", "out": 8}]
    if not refused:
        rlplug.make("network", "sequential", role="q_value", layers=layers, **specs)
        return
    with pytest.raises(rlplug.UserError, match=f"a {first} before it would read the observation alone"):
        rlplug.make("network", "sequential", role="q_value", layers=layers, **specs)
