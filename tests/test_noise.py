"""Exploration noises ``gaussian`` and ``ornstein-uhlenbeck`` (``rlplug/noise.py``).

Why: exploration noise fails silently. Noise that leaks into deterministic evaluation makes every
reported return worse; a wrong scale (sigma in absolute units where a fraction of the range was meant,
or the wrong half of it) over- or under-explores; actions outside the bounds reach the env; a schedule
off by a factor at the end, or an OU process that is not correlated in time (or never restarts at an
episode's end) is simply a different algorithm. So: moments of many draws with a fixed seed against the
intended scale, the exploration-type switch, bounds under huge noise, the schedules at 0, 1/2 and 1 of
the run (hypothesis), the OU process against its exact AR(1) variance and autocorrelation, ``reset``, and
state round trips through ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import io
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs.utils import ExplorationType, set_exploration_type

import rlplug

SETTINGS = settings(max_examples=50, deadline=None)
RANDOM = ExplorationType.RANDOM


def spec(low, high, batch=()):
    low, high = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
    shape = (*batch, *low.shape)
    return Bounded(low=low.expand(shape), high=high.expand(shape), shape=shape)


def noise(name, action_spec, **params):
    return rlplug.make("noise", name, action_spec=action_spec, device="cpu", total_frames=1000, **params)


def actions(n, dims=3, value=0.0):
    return TensorDict({"action": torch.full((n, dims), value)}, [n])


def noisy(module, td):
    with set_exploration_type(RANDOM):
        return module(td.clone())["action"]


def roundtrip(state):
    data = io.BytesIO()
    torch.save(state, data)
    data.seek(0)
    return torch.load(data, weights_only=True)


@pytest.mark.parametrize("name", ["gaussian", "ornstein-uhlenbeck"])
def test_no_noise_outside_random_exploration(name):
    module = noise(name, spec([-1.0] * 3, [1.0] * 3))
    td = actions(16, value=0.25)
    for kind in (ExplorationType.DETERMINISTIC, ExplorationType.MODE, ExplorationType.MEAN):
        with set_exploration_type(kind):
            assert torch.equal(module(td.clone())["action"], td["action"])
    assert torch.equal(module(td.clone())["action"], td["action"])  # no exploration type set
    assert not torch.equal(noisy(module, td), td["action"])


def test_gaussian_is_zero_mean_with_sigma_times_half_range():
    torch.manual_seed(0)
    low, high = torch.tensor([-10.0, 0.0, 5.0]), torch.tensor([10.0, 40.0, 7.0])
    module = noise("gaussian", spec(low, high), sigma=0.05)
    center = (low + high) / 2
    out = noisy(module, TensorDict({"action": center.expand(200_000, 3).clone()}, [200_000]))
    half_range = (high - low) / 2
    deviation = (out - center) / half_range  # in units of half the range: N(0, 0.05^2), far from the bounds
    assert deviation.mean(0).abs().max() < 5 * 0.05 / math.sqrt(200_000)
    assert torch.allclose(deviation.std(0), torch.full((3,), 0.05), rtol=0.01)


@pytest.mark.parametrize("name", ["gaussian", "ornstein-uhlenbeck"])
def test_actions_stay_within_the_bounds(name):
    torch.manual_seed(1)
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 0.5])
    module = noise(name, spec(low, high, batch=(4,)), sigma=5.0, **({"dt": 1.0} if name != "gaussian" else {}))
    for _ in range(20):
        out = noisy(module, actions(1000, dims=2, value=0.25))
        assert (out >= low).all() and (out <= high).all()
    assert (out == low).any() and (out == high).any()  # clamped, not rescaled


def test_unbounded_dimensions_are_scaled_by_one_and_not_clamped():
    torch.manual_seed(2)
    module = noise("gaussian", Unbounded(shape=(2,)), sigma=3.0)
    out = noisy(module, actions(100_000, dims=2))
    assert torch.allclose(out.std(0), torch.full((2,), 3.0), rtol=0.02)


def test_the_spec_may_be_a_composite_with_env_batch_dims():
    action_spec = Composite(action=spec([-2.0], [2.0], batch=(3,)), shape=(3,))
    module = noise("gaussian", action_spec, sigma=0.1)
    assert torch.equal(module.scale, torch.tensor([2.0]))


def test_discrete_actions_and_incomplete_schedules_are_user_errors():
    with pytest.raises(rlplug.UserError, match="continuous"):
        noise("gaussian", Categorical(4))
    with pytest.raises(rlplug.UserError, match="final_sigma"):
        noise("gaussian", spec([-1.0], [1.0]), schedule="linear")
    with pytest.raises(rlplug.UserError, match="exponential"):
        noise("ornstein-uhlenbeck", spec([-1.0], [1.0]), schedule="exponential", final_sigma=0.0)
    with pytest.raises(rlplug.UserError):
        noise("gaussian", spec([-1.0], [1.0]), sigma=-0.1)


def expected_sigma(schedule, sigma, final, progress):
    if schedule == "constant":
        return sigma
    if schedule == "linear":
        return sigma + (final - sigma) * progress
    return sigma * (final / sigma) ** progress


@SETTINGS
@given(name=st.sampled_from(["gaussian", "ornstein-uhlenbeck"]),
       schedule=st.sampled_from(["constant", "linear", "exponential"]),
       sigma=st.floats(1e-3, 2.0), final=st.floats(1e-3, 2.0), total=st.integers(2, 10**7))
def test_schedules_give_the_right_sigma_along_the_run(name, schedule, sigma, final, total):
    module = rlplug.make("noise", name, action_spec=spec([-1.0], [1.0]), total_frames=total, sigma=sigma,
                         schedule=schedule, **({} if schedule == "constant" else {"final_sigma": final}))
    for frames, progress in [(0, 0.0), (total / 2, 0.5), (total, 1.0), (3 * total, 1.0)]:
        module.step(int(frames))
        progress = int(frames) / total if progress == 0.5 else progress
        assert module.sigma == pytest.approx(expected_sigma(schedule, sigma, final, progress), rel=1e-9)
    module.step(total)
    assert module.sigma == pytest.approx(final if schedule != "constant" else sigma, rel=1e-9)


def test_the_scheduled_sigma_is_the_one_applied():
    torch.manual_seed(3)
    module = noise("gaussian", spec([-100.0] * 2, [100.0] * 2), sigma=0.01, final_sigma=0.001,
                   schedule="exponential")
    module.step(500)  # halfway: sigma * sqrt(final / sigma)
    out = noisy(module, actions(100_000, dims=2)) / 100.0
    assert torch.allclose(out.std(0), torch.full((2,), 0.01 * math.sqrt(0.1)), rtol=0.02)


def test_ou_is_an_ar1_process_with_the_right_variance_and_correlation():
    torch.manual_seed(4)
    theta, dt, sigma = 1.0, 0.1, 0.3
    module = noise("ornstein-uhlenbeck", spec([-100.0], [100.0]), theta=theta, dt=dt, sigma=sigma)
    steps = [noisy(module, actions(20_000, dims=1)).squeeze(-1) / 100.0 for _ in range(120)]
    x = torch.stack(steps[60:]).double()  # stationary after 60 steps: (1 - theta dt)^120 ~ 3e-6
    phi = 1 - theta * dt
    variance = sigma**2 * dt / (1 - phi**2)  # the exact stationary variance of the discrete process
    assert x.var() == pytest.approx(variance, rel=0.02)
    correlation = ((x[1:] * x[:-1]).mean() / x.var()).item()
    assert correlation == pytest.approx(phi, abs=0.01)
    gaussian = noise("gaussian", spec([-100.0], [100.0]), sigma=0.01)
    g = torch.stack([noisy(gaussian, actions(20_000, dims=1)).squeeze(-1) for _ in range(10)]).double()
    assert abs(((g[1:] * g[:-1]).mean() / g.var()).item()) < 0.02  # Gaussian noise: uncorrelated


def test_ou_with_the_defaults_drifts_slowly():
    torch.manual_seed(5)
    module = noise("ornstein-uhlenbeck", spec([-1.0] * 2, [1.0] * 2))
    first = noisy(module, actions(1000, dims=2))
    second = noisy(module, actions(1000, dims=2))
    assert (second - first).std() == pytest.approx(0.2 * math.sqrt(0.01), rel=0.1)  # one step's innovation


def test_ou_reset_restarts_the_masked_processes():
    torch.manual_seed(6)
    module = noise("ornstein-uhlenbeck", spec([-10.0] * 2, [10.0] * 2, batch=(4,)), theta=0.5, dt=0.5, sigma=1.0)
    for _ in range(10):
        noisy(module, actions(4, dims=2))
    before = module.state.clone()
    assert (before != 0).all()
    done = torch.tensor([[True], [False], [False], [True]])  # ("next", "done"): [envs, 1]
    module.reset(done)
    assert torch.equal(module.state[[0, 3]], torch.zeros(2, 2)) and torch.equal(module.state[[1, 2]], before[[1, 2]])
    module.reset(torch.tensor([False, True, False, False]))  # [envs] works too
    assert torch.equal(module.state[1], torch.zeros(2)) and torch.equal(module.state[2], before[2])
    module.reset()
    after = noisy(module, actions(4, dims=2)) / 10.0  # one step from 0: sigma sqrt(dt) N(0, 1)
    assert after.abs().max() < 1.0 * math.sqrt(0.5) * 5


def test_ou_restarts_when_the_batch_shape_changes():
    module = noise("ornstein-uhlenbeck", spec([-1.0], [1.0]))
    noisy(module, actions(4, dims=1))
    noisy(module, actions(2, dims=1))
    assert module.state.shape == (2, 1)


@pytest.mark.parametrize("name", ["gaussian", "ornstein-uhlenbeck"])
def test_state_round_trips(name):
    module = noise(name, spec([-1.0] * 2, [1.0] * 2), sigma=0.3, final_sigma=0.1, schedule="linear")
    module.step(400)
    for _ in range(3):
        noisy(module, actions(5, dims=2))
    state = roundtrip(module.state_dict())
    other = noise(name, spec([-1.0] * 2, [1.0] * 2), sigma=0.3, final_sigma=0.1, schedule="linear")
    other.load_state_dict(state)
    assert other.frames == 400 and other.sigma == pytest.approx(module.sigma)
    torch.manual_seed(7)
    mine = noisy(module, actions(5, dims=2))
    torch.manual_seed(7)
    theirs = noisy(other, actions(5, dims=2))
    assert torch.equal(mine, theirs)  # OU: the same process state too
