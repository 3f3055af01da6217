"""The observation preprocessor ``running-standard-scaler`` (``rlplug/preprocessing.py``).

Why: running statistics are easy to get subtly wrong (a biased variance, a merge of batches that depends
on how the data was split, statistics that keep moving during evaluation, or that are lost in a
checkpoint), and none of that crashes. So: the mean and variance after feeding the same data in arbitrary
splits against numpy's over all of it (hypothesis), the frozen ``eval()`` mode, the output formula with and
without clipping, and state round trips through ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torchrl.data import Composite, Unbounded

import rlplug
from rlplug.plugins.preprocessors.scalers import RunningStandardScaler

SETTINGS = settings(max_examples=60, deadline=None)


def observation_spec(*shape, envs=2):
    return Composite(observation=Unbounded(shape=(envs, *shape)), shape=(envs,))


def scaler(*shape, **params):
    spec = observation_spec(*shape) if shape else None
    return rlplug.make("preprocessor", "running-standard-scaler", observation_spec=spec, device="cpu", **params)


def roundtrip(state):
    data = io.BytesIO()
    torch.save(state, data)
    data.seek(0)
    return torch.load(data, weights_only=True)


@SETTINGS
@given(data=arrays(np.float64, st.tuples(st.integers(1, 60), st.integers(1, 4)),
                   elements=st.floats(-1e3, 1e3, allow_nan=False)),
       cuts=st.lists(st.integers(0, 60), max_size=6))
def test_statistics_match_numpy_for_any_split(data, cuts):
    n, d = data.shape
    module = scaler(d)
    bounds = sorted({0, n, *(c for c in cuts if c <= n)})
    for start, stop in zip(bounds[:-1], bounds[1:]):
        module(torch.tensor(data[start:stop], dtype=torch.float64))
    assert module.count.item() == n
    np.testing.assert_allclose(module.mean.numpy(), data.mean(0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(module.var.numpy(), data.var(0), rtol=1e-7, atol=1e-7)


def test_batch_dims_are_pooled():
    torch.manual_seed(0)
    x = torch.randn(5, 3, 2, 4)  # [time, envs, *observation shape]
    module = scaler(2, 4)
    module(x)
    assert module.count.item() == 15
    assert torch.allclose(module.mean, x.double().reshape(15, 2, 4).mean(0))
    assert torch.allclose(module.var, x.double().reshape(15, 2, 4).var(0, unbiased=False))
    single = scaler(2, 4)
    single(x[0, 0])  # one unbatched observation
    assert single.count.item() == 1
    with pytest.raises(ValueError, match="shape"):
        module(torch.zeros(3, 5))


def test_output_is_standardised_and_clipped():
    torch.manual_seed(1)
    x = torch.randn(1000, 3) * torch.tensor([1.0, 10.0, 0.1]) + torch.tensor([5.0, -3.0, 0.0])
    module = scaler(3, epsilon=1e-8, clip=None)
    y = module(x)  # statistics first, then scaled with them
    mean, var = x.double().mean(0), x.double().var(0, unbiased=False)
    assert torch.allclose(y.double(), (x.double() - mean) / torch.sqrt(var + 1e-8), atol=1e-5)
    assert y.dtype == torch.float32
    clipped = scaler(3, clip=1.5)
    out = clipped(x)
    assert out.abs().max() == 1.5
    assert torch.allclose(out, y.clamp(-1.5, 1.5), atol=1e-5)


def test_eval_freezes_the_statistics():
    module = scaler(2)
    module(torch.tensor([[0.0, 1.0], [2.0, 3.0]]))
    state = {k: v.clone() for k, v in module.state_dict().items()}
    module.eval()
    out = module(torch.tensor([[100.0, 100.0]]))
    for key, value in module.state_dict().items():
        assert torch.equal(value, state[key])
    assert torch.allclose(out, torch.tensor([[5.0, 5.0]]))  # clipped at the default 5
    module.train()
    module(torch.tensor([[100.0, 100.0]]))
    assert module.count.item() == 3


def test_state_round_trips():
    torch.manual_seed(2)
    module = scaler(4)
    module(torch.randn(50, 4) * 3 + 1)
    state = roundtrip(module.state_dict())
    assert set(state) == {"mean", "var", "count"}
    other = scaler(4)
    other.load_state_dict(state)
    other.eval(), module.eval()
    x = torch.randn(7, 4)
    assert torch.equal(module(x), other(x))
    lazy = scaler()  # built without a spec: takes the saved shape
    lazy.load_state_dict(state)
    lazy.eval()
    assert torch.equal(lazy(x), module(x))


def test_without_a_spec_the_last_dim_is_the_feature_dim():
    module = RunningStandardScaler()
    module(torch.arange(12.0).reshape(2, 2, 3))
    assert module.shape == (3,) and module.count.item() == 4


def test_parameters_are_checked():
    with pytest.raises(rlplug.UserError):
        scaler(2, epsilon=0.0)
    with pytest.raises(rlplug.UserError):
        scaler(2, clip=-1.0)
