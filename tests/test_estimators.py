"""Property tests for the built-in estimators (``gae`` and ``from_advantage``).

Why: GAE is easy to get subtly wrong (off-by-one in time, bootstrapping through a terminal state,
letting the lambda trace leak across an episode boundary, mixing up truncation and termination), and
such bugs do not crash: they only make learning worse. So instead of a few hand-picked cases, these
tests draw random batch shapes, trajectory lengths, discounts and done/terminated patterns with
hypothesis and compare rlplug's (float32) estimator with a plain backwards loop written
here in float64, plus properties that must hold whatever the implementation.

The contract (``rlplug.registry.hookspecs.rlplug_register_estimators``): inputs are shaped
``[*batch, time, 1]``; ``done`` ends the lambda trace, ``terminated`` (a subset of ``done``) also
drops the bootstrap value ``V(s_{t+1})``; truncation (done, not terminated) keeps it.

Small gamma * lambda gets tests of its own: torchrl's vectorised GAE, which rlplug used first, failed
there (an IndexError below 1e-7, gamma = 0 and lambda = 0 included, and a geometric filter cut one
term short for gamma * lambda up to about 3e-4), so rlplug's ``gae`` now uses the recursive form.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from tensordict import TensorDict

import rlplug

SETTINGS = settings(max_examples=100, deadline=None)

# --------------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------------

MAX_T = 40
LIMIT = 10.0

#: 0 to 2 leading batch dims, each of size 1..3.
batch_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
time_lengths = st.integers(1, MAX_T)
discounts = st.floats(0.0, 1.0)
#: Any (gamma, lambda) in [0, 1]^2, the corners included.
discount_pairs = st.tuples(discounts, discounts)
#: float32-representable values, so the float64 reference sees exactly what the estimator sees.
scalars = st.floats(-LIMIT, LIMIT, allow_nan=False, allow_infinity=False, allow_subnormal=False, width=32)


def float_arrays(shape):
    return arrays(np.float32, shape, elements=scalars)


def bool_arrays(shape):
    return arrays(np.bool_, shape, elements=st.booleans())


@st.composite
def trajectories(draw, batch_shape=batch_shapes, time=time_lengths):
    """A dict of float32 / bool numpy arrays shaped ``[*batch, time]`` with terminated ⊆ done.

    ``next_value`` is drawn independently of ``value``: the estimator must use ``("next",
    "state_value")``, never ``state_value[t + 1]`` (they differ across a done).
    """
    shape = (*draw(batch_shape), draw(time))
    done = draw(bool_arrays(shape))
    terminated = done & draw(bool_arrays(shape))
    return {
        "value": draw(float_arrays(shape)),
        "next_value": draw(float_arrays(shape)),
        "reward": draw(float_arrays(shape)),
        "done": done,
        "terminated": terminated,
    }


# --------------------------------------------------------------------------------------------------
# Helpers: the reference, and running rlplug's estimators on numpy data
# --------------------------------------------------------------------------------------------------


def reference_gae(traj, gamma, lmbda):
    """Plain GAE: a backwards loop over time for each batch element, in float64.

    delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   A_T = 0
    """
    value = traj["value"].astype(np.float64)
    next_value = traj["next_value"].astype(np.float64)
    reward = traj["reward"].astype(np.float64)
    done, terminated = traj["done"], traj["terminated"]
    out = np.zeros(value.shape, dtype=np.float64)
    *batch, T = value.shape
    for idx in np.ndindex(*batch):
        next_adv = 0.0
        for t in reversed(range(T)):
            i = (*idx, t)
            delta = reward[i] + gamma * next_value[i] * (0.0 if terminated[i] else 1.0) - value[i]
            next_adv = delta + gamma * lmbda * (0.0 if done[i] else 1.0) * next_adv
            out[i] = next_adv
    return out


def to_tensordict(traj):
    """The estimator's input layout: ``[*batch, time]`` TensorDict with ``[..., 1]`` leaves."""

    def leaf(name):
        return torch.from_numpy(np.ascontiguousarray(traj[name])).unsqueeze(-1)

    return TensorDict(
        {
            "state_value": leaf("value"),
            "next": {
                "state_value": leaf("next_value"),
                "reward": leaf("reward"),
                "done": leaf("done"),
                "terminated": leaf("terminated"),
            },
        },
        batch_size=traj["value"].shape,
    )


def run_gae(traj, gamma, lmbda):
    """rlplug's ``gae`` on ``traj``; returns the advantage as float64 numpy ``[*batch, time]``."""
    td = rlplug.make("estimator", "gae", gamma=gamma, lmbda=lmbda)(to_tensordict(traj))
    advantage = td.get("advantage")
    assert advantage.shape == (*traj["value"].shape, 1)
    assert advantage.dtype == torch.float32
    return advantage.squeeze(-1).double().numpy()


def assert_close(actual, expected, traj):
    """float32 tolerance; round-off grows with the inputs' magnitude and the horizon summed over."""
    T = traj["value"].shape[-1]
    magnitude = max(float(np.abs(traj[k]).max(initial=0.0)) for k in ("value", "next_value", "reward"))
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 + 4e-7 * T * magnitude)


# --------------------------------------------------------------------------------------------------
# gae against the reference
# --------------------------------------------------------------------------------------------------


@SETTINGS
@given(traj=trajectories(), discount=discount_pairs)
def test_gae_matches_reference_loop(traj, discount):
    gamma, lmbda = discount
    assert_close(run_gae(traj, gamma, lmbda), reference_gae(traj, gamma, lmbda), traj)


@SETTINGS
@given(traj=trajectories(), gamma=st.sampled_from([1.0, 0.99]), lmbda=st.sampled_from([1.0, 0.95]))
def test_gae_matches_reference_at_usual_and_undiscounted_settings(traj, gamma, lmbda):
    assert_close(run_gae(traj, gamma, lmbda), reference_gae(traj, gamma, lmbda), traj)


@SETTINGS
@given(traj=trajectories(), discount=discount_pairs)
def test_gae_writes_advantage_and_leaves_inputs_alone(traj, discount):
    gamma, lmbda = discount
    td = to_tensordict(traj)
    before = td.clone()
    rlplug.make("estimator", "gae", gamma=gamma, lmbda=lmbda)(td)
    assert set(td.keys(True, True)) - set(before.keys(True, True)) == {"advantage"}
    for key in before.keys(True, True):
        assert torch.equal(td.get(key), before.get(key)), key


# --------------------------------------------------------------------------------------------------
# Properties that hold whatever the implementation
# --------------------------------------------------------------------------------------------------


def td_error(traj, gamma):
    """One-step TD error r + gamma * V(s') * (1 - terminated) - V(s), float64."""
    return (traj["reward"].astype(np.float64)
            + gamma * traj["next_value"].astype(np.float64) * ~traj["terminated"]
            - traj["value"].astype(np.float64))
@SETTINGS
@given(traj=trajectories(), gamma=discounts)
def test_lambda_zero_is_one_step_td_error(traj, gamma):
    assert_close(run_gae(traj, gamma, 0.0), td_error(traj, gamma), traj)
@SETTINGS
@given(traj=trajectories(), lmbda=discounts)
def test_gamma_zero_is_immediate_reward_minus_value(traj, lmbda):
    assert_close(run_gae(traj, 0.0, lmbda), td_error(traj, 0.0), traj)
@SETTINGS
@given(traj=trajectories(), gamma=st.floats(0.5, 1.0), lmbda=st.floats(1e-12, 5e-8))
def test_tiny_gamma_lambda_matches_reference(traj, gamma, lmbda):
    assert_close(run_gae(traj, gamma, lmbda), reference_gae(traj, gamma, lmbda), traj)
@SETTINGS
@given(traj=trajectories(time=st.integers(2, MAX_T)), gamma=st.floats(0.5, 1.0),
       gamma_lambda=st.floats(2e-4, 3e-4))
def test_small_gamma_lambda_keeps_the_next_step(traj, gamma, gamma_lambda):
    """A_{T-2} = delta_{T-2} + gamma * lambda * A_{T-1}; a large last reward makes the second term show."""
    lmbda = gamma_lambda / gamma
    traj["done"][..., :-1] = False
    traj["terminated"][..., :-1] = False
    traj["reward"][..., -1] += np.float32(1000.0)
    assert_close(run_gae(traj, gamma, lmbda), reference_gae(traj, gamma, lmbda), traj)


@SETTINGS
@given(traj=trajectories())
def test_lambda_one_gamma_one_without_done_is_monte_carlo_return(traj):
    """A consistent critic (next value = following value) and no done before the last step:
    A_t = sum_{k>=t} r_k + V(s_T) [unless terminated] - V(s_t)."""
    traj["next_value"][..., :-1] = traj["value"][..., 1:]
    traj["done"][..., :-1] = False
    traj["terminated"][..., :-1] = False
    reward = traj["reward"].astype(np.float64)
    future_rewards = np.flip(np.cumsum(np.flip(reward, -1), -1), -1)
    bootstrap = traj["next_value"][..., -1:].astype(np.float64) * ~traj["terminated"][..., -1:]
    expected = future_rewards + bootstrap - traj["value"].astype(np.float64)
    assert_close(run_gae(traj, 1.0, 1.0), expected, traj)


@SETTINGS
@given(
    traj=trajectories(time=st.integers(2, MAX_T)),
    gamma=st.floats(0.5, 1.0),
    lmbda=st.floats(0.5, 1.0),
    data=st.data(),
)
def test_advantage_ignores_data_after_a_done(traj, gamma, lmbda, data):
    """Steps up to and including a done never see what comes after it, whatever it is.

    gamma and lambda are >= 0.5 and the new later rewards are far from the old ones, so a leak across
    the boundary would be far larger than the tolerance.
    """
    T = traj["value"].shape[-1]
    cut = data.draw(st.integers(0, T - 2), label="done at")
    traj["done"][..., cut] = True
    before = run_gae(traj, gamma, lmbda)

    later = data.draw(trajectories(batch_shape=st.just(traj["value"].shape[:-1]), time=st.just(T - cut - 1)),
                      label="replacement after the done")
    later["reward"] += np.float32(100.0)
    changed = {k: v.copy() for k, v in traj.items()}
    for key, new in later.items():
        changed[key][..., cut + 1:] = new
    after = run_gae(changed, gamma, lmbda)

    assert_close(after[..., : cut + 1], before[..., : cut + 1], traj)


@SETTINGS
@given(traj=trajectories(), discount=discount_pairs)
def test_truncation_bootstraps_and_termination_does_not(traj, discount):
    """Same data, done at the last step: truncated keeps gamma * V(s_T), terminated drops it.

    At the last step the difference is exactly gamma * V(s_T); earlier steps of the same episode see
    it discounted by gamma * lambda per step, and steps before an earlier done not at all.
    """
    gamma, lmbda = discount
    traj["done"][..., -1] = True
    truncated = {**traj, "terminated": traj["terminated"].copy()}
    terminated = {**traj, "terminated": traj["terminated"].copy()}
    truncated["terminated"][..., -1] = False
    terminated["terminated"][..., -1] = True

    adv_truncated = run_gae(truncated, gamma, lmbda)
    adv_terminated = run_gae(terminated, gamma, lmbda)

    r, v, nv = (traj[k][..., -1].astype(np.float64) for k in ("reward", "value", "next_value"))
    assert_close(adv_truncated[..., -1], r + gamma * nv - v, traj)
    assert_close(adv_terminated[..., -1], r - v, traj)

    # Expected difference: gamma * V(s_T) * prod_{k=t}^{T-2} gamma * lambda * (1 - done_k).
    expected = np.zeros(traj["value"].shape)
    carry = gamma * nv
    expected[..., -1] = carry
    for t in reversed(range(traj["value"].shape[-1] - 1)):
        carry = carry * gamma * lmbda * ~traj["done"][..., t]
        expected[..., t] = carry
    assert_close(adv_truncated - adv_terminated, expected, traj)


# --------------------------------------------------------------------------------------------------
# from_advantage
# --------------------------------------------------------------------------------------------------


@SETTINGS
@given(shape=st.tuples(batch_shapes, time_lengths).map(lambda bt: (*bt[0], bt[1])), data=st.data())
def test_from_advantage_is_advantage_plus_value_exactly(shape, data):
    advantage = torch.from_numpy(data.draw(float_arrays(shape), label="advantage")).unsqueeze(-1)
    value = torch.from_numpy(data.draw(float_arrays(shape), label="value")).unsqueeze(-1)
    td = TensorDict({"advantage": advantage.clone(), "state_value": value.clone()}, batch_size=shape)
    out = rlplug.make("estimator", "from_advantage")(td)
    assert torch.equal(out.get("value_target"), advantage + value)
    assert torch.equal(out.get("advantage"), advantage)
    assert torch.equal(out.get("state_value"), value)


@SETTINGS
@given(traj=trajectories(), discount=discount_pairs)
def test_gae_then_from_advantage_gives_the_lambda_return(traj, discount):
    gamma, lmbda = discount
    td = rlplug.make("estimator", "gae", gamma=gamma, lmbda=lmbda)(to_tensordict(traj))
    td = rlplug.make("estimator", "from-advantage")(td)
    assert torch.equal(td.get("value_target"), td.get("advantage") + td.get("state_value"))
    expected = reference_gae(traj, gamma, lmbda) + traj["value"].astype(np.float64)
    assert_close(td.get("value_target").squeeze(-1).double().numpy(), expected, traj)


# --------------------------------------------------------------------------------------------------
# Parameter checks
# --------------------------------------------------------------------------------------------------


def test_gamma_above_one_is_a_user_error_naming_gamma_and_the_bound():
    with pytest.raises(rlplug.UserError) as excinfo:
        rlplug.make("estimator", "gae", gamma=1.5)
    message = str(excinfo.value)
    assert "gamma" in message
    assert re.search(r"(?<![\d.])1(\.0*)?(?![\d.])", message), f"bound 1 not in {message!r}"


@SETTINGS
@given(
    name=st.sampled_from(["gamma", "lmbda"]),
    bad=st.one_of(st.floats(max_value=0.0, exclude_max=True, allow_nan=False, allow_infinity=False),
                  st.floats(min_value=1.0, exclude_min=True, allow_nan=False, allow_infinity=False)),
)
def test_out_of_range_discounts_are_user_errors(name, bad):
    with pytest.raises(rlplug.UserError, match=name):
        rlplug.make("estimator", "gae", **{name: bad})


@SETTINGS
@given(gamma=discounts, lmbda=discounts)
def test_in_range_discounts_are_accepted(gamma, lmbda):
    estimator = rlplug.make("estimator", "gae", gamma=gamma, lmbda=lmbda)
    assert "advantage" in estimator.out_keys
