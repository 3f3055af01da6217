"""Property tests for the built-in estimators (``gae``, ``from_advantage``, ``td0``, ``td-lambda``, ``mc``,
``vtrace``).

Why: GAE is easy to get subtly wrong (off-by-one in time, bootstrapping through a terminal state,
letting the lambda trace leak across an episode boundary, mixing up truncation and termination), and
such bugs do not crash: they only make learning worse; the other returns share the same traps. So
instead of a few hand-picked cases, these tests draw random batch shapes, trajectory lengths, discounts
and done/terminated patterns (all done and none done included) with hypothesis and compare rlplug's
(float32) estimators with plain backwards loops written here in float64, plus properties and identities
that must hold whatever the implementation (TD(0) is TD(lambda = 0), GAE + V is the lambda-return, ...).

The contract (``rlplug.registry.hookspecs.rlplug_register_estimators``): inputs are shaped
``[*batch, time, 1]``; ``done`` ends the lambda trace, ``terminated`` (a subset of ``done``) also
drops the bootstrap value ``V(s_{t+1})``; truncation (done, not terminated) keeps it.

Small gamma * lambda gets tests of its own: torchrl's vectorised GAE, which rlplug used first, failed
there (an IndexError below 1e-7, gamma = 0 and lambda = 0 included, and a geometric filter cut one
term short for gamma * lambda up to about 3e-4), so rlplug's ``gae`` now uses the recursive form.
torchrl's ``vec_td_lambda_return_estimate`` fails the same way, so ``td-lambda`` and ``mc`` use the
loop-based ``td_lambda_return_estimate``; the same small-gamma * lambda tests run on ``td-lambda``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from tensordict import TensorDict

import rlplug

SETTINGS = settings(max_examples=100, deadline=None)
#: for checks of structure rather than arithmetic (keys, shapes, parameter checks), which fewer draws cover
FEW = settings(max_examples=30, deadline=None)

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


def flag_arrays(shape):
    """Random flags, or the batch edges random flags rarely give: none set, all set (fresh arrays:
    tests edit them in place)."""
    return st.one_of(bool_arrays(shape),
                     st.builds(np.zeros, st.just(shape), st.just(np.bool_)),
                     st.builds(np.ones, st.just(shape), st.just(np.bool_)))


def log_prob_arrays(shape):
    """Log-probs of taken actions; importance weights exp(target - behaviour) then lie in [e^-1.5, e^1.5], so
    that unclipped traces (``c_bar = inf``) multiplied over the longest trajectory stay inside float32's range
    (e^3 over 30 steps is 1e39, past it: both sides would be right, float32 would read inf)."""
    return arrays(np.float32, shape, elements=st.floats(-1.5, 0.0, width=32))


@st.composite
def trajectories(draw, batch_shape=batch_shapes, time=time_lengths, log_probs=False):
    """A dict of float32 / bool numpy arrays shaped ``[*batch, time]`` with terminated ⊆ done.

    ``next_value`` is drawn independently of ``value``: the estimator must use ``("next",
    "state_value")``, never ``state_value[t + 1]`` (they differ across a done). With ``log_probs``,
    also the behaviour and target policies' log-probs of each action, for V-trace.
    """
    shape = (*draw(batch_shape), draw(time))
    done = draw(flag_arrays(shape))
    terminated = done & draw(flag_arrays(shape))
    traj = {
        "value": draw(float_arrays(shape)),
        "next_value": draw(float_arrays(shape)),
        "reward": draw(float_arrays(shape)),
        "done": done,
        "terminated": terminated,
    }
    if log_probs:
        traj["behaviour_log_prob"] = draw(log_prob_arrays(shape))
        traj["target_log_prob"] = draw(log_prob_arrays(shape))
    return traj


def consistent_critic(traj):
    """Make ``V(s_{t+1})`` the next step's ``state_value`` within each episode, as a real critic's are.

    Identities that telescope (GAE + V = lambda-return, on-policy V-trace = TD(1)) need it.
    """
    inside = ~traj["done"][..., :-1]
    traj["next_value"][..., :-1] = np.where(inside, traj["value"][..., 1:], traj["next_value"][..., :-1])
    return traj


# --------------------------------------------------------------------------------------------------
# Helpers: the references, and running rlplug's estimators on numpy data
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


def td_error(traj, gamma):
    """One-step TD error r + gamma * V(s') * (1 - terminated) - V(s), float64."""
    return (traj["reward"].astype(np.float64)
            + gamma * traj["next_value"].astype(np.float64) * ~traj["terminated"]
            - traj["value"].astype(np.float64))


def reference_td0(traj, gamma):
    """value_target = r + gamma * V(s') * (1 - terminated): one step, so done plays no part."""
    advantage = td_error(traj, gamma)
    return {"advantage": advantage, "value_target": advantage + traj["value"].astype(np.float64)}


def reference_lambda_return(traj, gamma, lmbda):
    """The recursive lambda-return, in float64.

    G_t = r_t + gamma * (1 - terminated_t) * ((1 - lambda) * V(s_{t+1}) + lambda * G_{t+1}),
    with G_{t+1} replaced by V(s_{t+1}) at a done and at the batch end.
    """
    next_value = traj["next_value"].astype(np.float64)
    reward = traj["reward"].astype(np.float64)
    done, terminated = traj["done"], traj["terminated"]
    out = np.zeros(reward.shape, dtype=np.float64)
    *batch, T = reward.shape
    for idx in np.ndindex(*batch):
        following = 0.0
        for t in reversed(range(T)):
            i = (*idx, t)
            if done[i] or t == T - 1:
                following = next_value[i]
            keep = 0.0 if terminated[i] else 1.0
            following = reward[i] + gamma * keep * ((1 - lmbda) * next_value[i] + lmbda * following)
            out[i] = following
    return {"advantage": out - traj["value"].astype(np.float64), "value_target": out}


def reference_mc(traj, gamma, bootstrap):
    """Discounted reward-to-go, stopped at each done; the tail after a truncation or at the batch end is
    V(s') with ``bootstrap``, else 0, and after a termination 0. Without ``value``, advantage = return."""
    reward = traj["reward"].astype(np.float64)
    done, terminated = traj["done"], traj["terminated"]
    out = np.zeros(reward.shape, dtype=np.float64)
    *batch, T = reward.shape
    for idx in np.ndindex(*batch):
        following = 0.0
        for t in reversed(range(T)):
            i = (*idx, t)
            if done[i] or t == T - 1:
                following = float(traj["next_value"][i]) if bootstrap and not terminated[i] else 0.0
            following = reward[i] + gamma * following
            out[i] = following
    advantage = out - traj["value"].astype(np.float64) if "value" in traj else out
    return {"advantage": advantage, "value_target": out}


def reference_vtrace(traj, gamma, rho_bar, c_bar):
    """V-trace by its definition (Espeholt et al. 2018, eq. 1), in float64.

    v_s = V(s) + sum_t gamma^(t-s) (prod_{i<t} c_i) delta_t, delta_t = rho_t (r_t + gamma V(s_{t+1})
    (1 - terminated_t) - V(s_t)), summed backwards and cut at done; rho_t = min(rho_bar, pi/mu), c_t =
    min(c_bar, pi/mu). advantage_t = rho_t (r_t + gamma (1 - terminated_t) v_{t+1} - V(s_t)), with v_{t+1}
    = V(s_{t+1}) at a done or the batch end. Also returns ``scale``: the same sums over absolute
    values, what float32 round-off is proportional to (trace products grow when c_bar > 1).
    """
    value, next_value, reward = (traj[k].astype(np.float64) for k in ("value", "next_value", "reward"))
    ratio = np.exp(traj["target_log_prob"].astype(np.float64) - traj["behaviour_log_prob"].astype(np.float64))
    done, terminated = traj["done"], traj["terminated"]
    vs, advantage = np.zeros(value.shape), np.zeros(value.shape)
    scale = 0.0
    *batch, T = value.shape
    for idx in np.ndindex(*batch):
        trace = trace_abs = 0.0
        for t in reversed(range(T)):
            i = (*idx, t)
            keep, cont = (0.0 if terminated[i] else 1.0), (0.0 if done[i] else 1.0)
            rho, c = min(rho_bar, ratio[i]), min(c_bar, ratio[i])
            following = next_value[i] if done[i] or t == T - 1 else vs[(*idx, t + 1)]
            advantage[i] = rho * (reward[i] + gamma * keep * following - value[i])
            scale = max(scale, rho * cont * trace_abs)  # the advantage's share of the later trace
            trace = rho * (reward[i] + gamma * keep * next_value[i] - value[i]) + gamma * cont * c * trace
            trace_abs = rho * (abs(reward[i]) + abs(next_value[i]) + abs(value[i])) + cont * c * trace_abs
            vs[i] = value[i] + trace
            scale = max(scale, trace_abs)
    return {"advantage": advantage, "value_target": vs, "scale": scale}


def to_tensordict(traj):
    """The estimator's input layout: a ``[*batch, time]`` TensorDict with ``[..., 1]`` leaves.

    Only the keys ``traj`` has; log-probs stay ``[*batch, time]``, as ProbabilisticActor writes them.
    """
    layout = {"value": "state_value", "next_value": ("next", "state_value"), "reward": ("next", "reward"),
              "done": ("next", "done"), "terminated": ("next", "terminated")}
    log_probs = {"behaviour_log_prob": "action_log_prob", "target_log_prob": "target_log_prob"}
    td = TensorDict({}, batch_size=traj["reward"].shape)
    for name, array in traj.items():
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if name in layout:
            td.set(layout[name], tensor.unsqueeze(-1))
        else:
            td.set(log_probs[name], tensor)
    return td


def run(name, traj, **params):
    """rlplug's estimator ``name`` on ``traj``: each output it writes, as float64 numpy ``[*batch, time]``."""
    td = rlplug.make("estimator", name, **params)(to_tensordict(traj))
    outputs = {}
    for key in ("advantage", "value_target"):
        if key in td.keys():
            tensor = td.get(key)
            assert tensor.shape == (*traj["reward"].shape, 1), key
            assert tensor.dtype == torch.float32, key
            outputs[key] = tensor.squeeze(-1).double().numpy()
    return outputs


def run_gae(traj, gamma, lmbda):
    """rlplug's ``gae`` on ``traj``; returns the advantage as float64 numpy ``[*batch, time]``."""
    return run("gae", traj, gamma=gamma, lmbda=lmbda)["advantage"]


def assert_close(actual, expected, traj, scale=0.0):
    """float32 tolerance; round-off grows with the inputs' magnitude (or ``scale``, if larger) and the
    horizon summed over."""
    T = traj["reward"].shape[-1]
    magnitude = max(float(np.abs(traj[k]).max(initial=0.0)) for k in ("value", "next_value", "reward") if k in traj)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 + 4e-7 * T * max(magnitude, scale))


def assert_outputs_close(actual, expected, traj):
    """Both dicts of outputs hold the same keys and close values (``expected`` may carry a ``scale``)."""
    scale = expected.get("scale", 0.0)
    expected = {k: v for k, v in expected.items() if k != "scale"}
    assert actual.keys() == expected.keys()
    for key in expected:
        assert_close(actual[key], expected[key], traj, scale)


@dataclass(frozen=True)
class Case:
    """One registered estimator: its parameters' strategy, its reference and the data it needs."""

    name: str
    params: st.SearchStrategy
    reference: Callable
    log_probs: bool = False

    def trajectories(self, **kwargs):
        return trajectories(log_probs=self.log_probs, **kwargs)

    def __str__(self):
        return self.name


clips = st.one_of(st.floats(0.1, 3.0), st.just(math.inf))
CASES = [
    Case("gae", st.fixed_dictionaries({"gamma": discounts, "lmbda": discounts}),
         lambda traj, gamma, lmbda: {"advantage": reference_gae(traj, gamma, lmbda)}),
    Case("td0", st.fixed_dictionaries({"gamma": discounts}), reference_td0),
    Case("td-lambda", st.fixed_dictionaries({"gamma": discounts, "lmbda": discounts}), reference_lambda_return),
    Case("mc", st.fixed_dictionaries({"gamma": discounts, "bootstrap": st.booleans()}), reference_mc),
    Case("vtrace", st.fixed_dictionaries({"gamma": discounts, "rho_bar": clips, "c_bar": clips}), reference_vtrace,
         log_probs=True),
]
each_estimator = pytest.mark.parametrize("case", CASES, ids=str)
#: the estimators with a lambda trace, whose small gamma * lambda tripped torchrl's vectorised filters
LAMBDA_CASES = [case for case in CASES if case.name in ("gae", "td-lambda")]


# --------------------------------------------------------------------------------------------------
# Each estimator against its reference
# --------------------------------------------------------------------------------------------------


@each_estimator
@SETTINGS
@given(data=st.data())
def test_matches_reference_loop(case, data):
    traj = data.draw(case.trajectories(), label="trajectory")
    params = data.draw(case.params, label="params")
    assert_outputs_close(run(case.name, traj, **params), case.reference(traj, **params), traj)


def set_edge(traj, edge):
    """Force a batch edge onto ``traj``: no done at all, or every step truncated or terminated."""
    if edge == "no done":
        traj["done"][...] = False
    elif edge in ("all truncated", "all terminated"):
        traj["done"][...] = True
    traj["terminated"][...] = edge == "all terminated"
    return traj


@each_estimator
@SETTINGS
@given(data=st.data(), edge=st.sampled_from(["one step", "no done", "all truncated", "all terminated"]))
def test_matches_reference_at_batch_edges(case, data, edge):
    time = st.just(1) if edge == "one step" else time_lengths
    traj = data.draw(case.trajectories(time=time), label="trajectory")
    if edge != "one step":
        set_edge(traj, edge)
    params = data.draw(case.params, label="params")
    assert_outputs_close(run(case.name, traj, **params), case.reference(traj, **params), traj)


@SETTINGS
@given(traj=trajectories(), gamma=st.sampled_from([1.0, 0.99]), lmbda=st.sampled_from([1.0, 0.95]))
def test_gae_matches_reference_at_usual_and_undiscounted_settings(traj, gamma, lmbda):
    assert_close(run_gae(traj, gamma, lmbda), reference_gae(traj, gamma, lmbda), traj)


@each_estimator
@FEW
@given(data=st.data())
def test_writes_its_out_keys_and_leaves_inputs_alone(case, data):
    traj = data.draw(case.trajectories(), label="trajectory")
    estimator = rlplug.make("estimator", case.name, **data.draw(case.params, label="params"))
    td = to_tensordict(traj)
    before = td.clone()
    estimator(td)
    assert set(td.keys(True, True)) - set(before.keys(True, True)) == set(estimator.out_keys)
    assert set(estimator.in_keys) <= set(before.keys(True, True))
    for key in before.keys(True, True):
        assert torch.equal(td.get(key), before.get(key)), key


# --------------------------------------------------------------------------------------------------
# Properties that hold whatever the implementation
# --------------------------------------------------------------------------------------------------


@SETTINGS
@given(traj=trajectories(), gamma=discounts)
def test_lambda_zero_is_one_step_td_error(traj, gamma):
    """(td-lambda at lambda = 0 is compared with td0 below.)"""
    assert_close(run_gae(traj, gamma, 0.0), td_error(traj, gamma), traj)


@pytest.mark.parametrize("case", [case for case in CASES if case.name in ("gae", "td-lambda", "mc")], ids=str)
@SETTINGS
@given(data=st.data())
def test_gamma_zero_is_immediate_reward_minus_value(case, data):
    """Whatever else: no future term survives gamma = 0 (td0 has none to begin with; V-trace scales it by
    the weight rho)."""
    traj = data.draw(case.trajectories(), label="trajectory")
    params = {**data.draw(case.params, label="params"), "gamma": 0.0}
    outputs = run(case.name, traj, **params)
    assert_close(outputs["advantage"], td_error(traj, 0.0), traj)
    if "value_target" in outputs:
        assert_close(outputs["value_target"], traj["reward"].astype(np.float64), traj)


@pytest.mark.parametrize("case", LAMBDA_CASES, ids=str)
@SETTINGS
@given(traj=trajectories(), gamma=st.floats(0.5, 1.0), lmbda=st.floats(1e-12, 5e-8))
def test_tiny_gamma_lambda_matches_reference(case, traj, gamma, lmbda):
    assert_outputs_close(run(case.name, traj, gamma=gamma, lmbda=lmbda), case.reference(traj, gamma, lmbda), traj)


@pytest.mark.parametrize("case", LAMBDA_CASES, ids=str)
@SETTINGS
@given(traj=trajectories(time=st.integers(2, MAX_T)), gamma=st.floats(0.5, 1.0),
       gamma_lambda=st.floats(2e-4, 3e-4))
def test_small_gamma_lambda_keeps_the_next_step(case, traj, gamma, gamma_lambda):
    """A_{T-2} = delta_{T-2} + gamma * lambda * A_{T-1}; a large last reward makes the second term show."""
    lmbda = gamma_lambda / gamma
    traj["done"][..., :-1] = False
    traj["terminated"][..., :-1] = False
    traj["reward"][..., -1] += np.float32(1000.0)
    assert_outputs_close(run(case.name, traj, gamma=gamma, lmbda=lmbda), case.reference(traj, gamma, lmbda), traj)


# td-lambda at lambda = 1 is mc with bootstrap (an identity tested below)
@pytest.mark.parametrize("name, params", [("gae", {"lmbda": 1.0}), ("mc", {"bootstrap": True})])
@SETTINGS
@given(traj=trajectories())
def test_lambda_one_gamma_one_without_done_is_monte_carlo_return(name, params, traj):
    """A consistent critic (next value = following value) and no done before the last step:
    A_t = sum_{k>=t} r_k + V(s_T) [unless terminated] - V(s_t)."""
    traj["next_value"][..., :-1] = traj["value"][..., 1:]
    traj["done"][..., :-1] = False
    traj["terminated"][..., :-1] = False
    reward = traj["reward"].astype(np.float64)
    future_rewards = np.flip(np.cumsum(np.flip(reward, -1), -1), -1)
    bootstrap = traj["next_value"][..., -1:].astype(np.float64) * ~traj["terminated"][..., -1:]
    expected = future_rewards + bootstrap - traj["value"].astype(np.float64)
    assert_close(run(name, traj, gamma=1.0, **params)["advantage"], expected, traj)


@pytest.mark.parametrize("case", [case for case in CASES if case.name != "td0"], ids=str)  # td0: no trace
@SETTINGS
@given(data=st.data())
def test_outputs_ignore_data_after_a_done(case, data):
    """Steps up to and including a done never see what comes after it, whatever it is.

    gamma and lambda are >= 0.5 and the new later rewards are far from the old ones, so a leak across
    the boundary would be far larger than the tolerance.
    """
    traj = data.draw(case.trajectories(time=st.integers(2, MAX_T)), label="trajectory")
    params = data.draw(case.params, label="params")
    params.update({k: data.draw(st.floats(0.5, 1.0), label=k) for k in ("gamma", "lmbda") if k in params})
    T = traj["reward"].shape[-1]
    cut = data.draw(st.integers(0, T - 2), label="done at")
    traj["done"][..., cut] = True
    before = run(case.name, traj, **params)

    later = data.draw(case.trajectories(batch_shape=st.just(traj["reward"].shape[:-1]), time=st.just(T - cut - 1)),
                      label="replacement after the done")
    later["reward"] += np.float32(100.0)
    changed = {k: v.copy() for k, v in traj.items()}
    for key, new in later.items():
        changed[key][..., cut + 1:] = new
    after = run(case.name, changed, **params)

    scale = reference_vtrace(traj, **params)["scale"] if case.name == "vtrace" else 0.0
    for key in before:
        assert_close(after[key][..., : cut + 1], before[key][..., : cut + 1], traj, scale)


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
# Identities between the estimators
# --------------------------------------------------------------------------------------------------


@SETTINGS
@given(traj=trajectories(), gamma=discounts)
def test_td_lambda_at_lambda_zero_is_td0(traj, gamma):
    assert_outputs_close(run("td-lambda", traj, gamma=gamma, lmbda=0.0), run("td0", traj, gamma=gamma), traj)


@SETTINGS
@given(traj=trajectories(), gamma=discounts)
def test_td_lambda_at_lambda_one_is_bootstrapped_monte_carlo(traj, gamma):
    """Holds with any done pattern, not only without one: both bootstrap V(s') after a truncation."""
    assert_outputs_close(run("td-lambda", traj, gamma=gamma, lmbda=1.0),
                         run("mc", traj, gamma=gamma, bootstrap=True), traj)


@SETTINGS
@given(traj=trajectories(), discount=discount_pairs)
def test_gae_plus_value_is_the_td_lambda_return(traj, discount):
    """A_GAE + V(s) = G_lambda for the same gamma, lambda, given a consistent critic (the GAE sum
    telescopes through V(s_{t+1}) = state_value[t + 1])."""
    gamma, lmbda = discount
    consistent_critic(traj)
    td_lambda = run("td-lambda", traj, gamma=gamma, lmbda=lmbda)
    gae = run_gae(traj, gamma, lmbda)
    assert_close(gae + traj["value"].astype(np.float64), td_lambda["value_target"], traj)
    assert_close(gae, td_lambda["advantage"], traj)


@SETTINGS
@given(traj=trajectories(log_probs=True), gamma=discounts, rho_bar=st.floats(1.0, 10.0), c_bar=st.floats(1.0, 10.0))
def test_on_policy_vtrace_is_the_lambda_one_return(traj, gamma, rho_bar, c_bar):
    """Behaviour = target policy makes every weight 1, so no clip at or above 1 acts, and v_s is the
    bootstrapped n-step return TD(1) (again through a consistent critic)."""
    consistent_critic(traj)
    traj["target_log_prob"] = traj["behaviour_log_prob"].copy()
    assert_outputs_close(run("vtrace", traj, gamma=gamma, rho_bar=rho_bar, c_bar=c_bar),
                         run("td-lambda", traj, gamma=gamma, lmbda=1.0), traj)


# --------------------------------------------------------------------------------------------------
# vtrace and mc specifics
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rho_bar, c_bar, value_target, advantage", [
    (1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 2.0, 2.0), (10.0, 1.0, 1.0, 2.0), (1.0, 10.0, 2.0, 1.0),
])
def test_vtrace_weight_is_target_over_behaviour_by_hand(rho_bar, c_bar, value_target, advantage):
    """Two steps, V = 0 everywhere, gamma = 1, reward 1 at the second step only, which the target policy
    takes as often as the behaviour one did (rho = 1); the first action it takes twice as often
    (rho = 2). Then v_0 = min(c_bar, 2) * 1 and advantage_0 = min(rho_bar, 2) * v_1 = min(rho_bar, 2).
    The weight the wrong way round (behaviour / target = 0.5) would give 0.5 for both.
    """
    traj = {"value": np.zeros(2, np.float32), "next_value": np.zeros(2, np.float32),
            "reward": np.array([0.0, 1.0], np.float32), "done": np.zeros(2, bool), "terminated": np.zeros(2, bool),
            "behaviour_log_prob": np.log([0.25, 0.5]).astype(np.float32),
            "target_log_prob": np.log([0.5, 0.5]).astype(np.float32)}
    outputs = run("vtrace", traj, gamma=1.0, rho_bar=rho_bar, c_bar=c_bar)
    np.testing.assert_allclose(outputs["value_target"], [value_target, 1.0], rtol=1e-6)
    np.testing.assert_allclose(outputs["advantage"], [advantage, 1.0], rtol=1e-6)


@FEW
@given(traj=trajectories(log_probs=True), gamma=discounts)
def test_vtrace_reads_log_probs_with_or_without_a_trailing_dim(traj, gamma):
    td = to_tensordict(traj)
    with_dim = td.clone()
    for key in ("action_log_prob", "target_log_prob"):
        with_dim.set(key, td.get(key).unsqueeze(-1))
    estimator = rlplug.make("estimator", "vtrace", gamma=gamma)
    assert torch.equal(estimator(td).get("value_target"), estimator(with_dim).get("value_target"))
    assert torch.equal(td.get("advantage"), with_dim.get("advantage"))


def test_vtrace_says_what_is_missing_or_misshapen():
    traj = {"value": np.zeros((2, 3), np.float32), "next_value": np.zeros((2, 3), np.float32),
            "reward": np.ones((2, 3), np.float32), "done": np.zeros((2, 3), bool),
            "terminated": np.zeros((2, 3), bool), "behaviour_log_prob": np.zeros((2, 3), np.float32)}
    with pytest.raises(rlplug.UserError, match="target_log_prob"):
        rlplug.make("estimator", "vtrace")(to_tensordict(traj))
    td = to_tensordict(traj)
    td.set("target_log_prob", torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="target_log_prob"):
        rlplug.make("estimator", "vtrace")(td)


@SETTINGS
@given(traj=trajectories(), gamma=discounts, with_value=st.booleans())
def test_mc_without_bootstrap_needs_no_critic(traj, gamma, with_value):
    """REINFORCE: no ("next", "state_value") at all, and no state_value either (advantage = return)."""
    del traj["next_value"]
    if not with_value:
        del traj["value"]
    outputs = run("mc", traj, gamma=gamma, bootstrap=False)
    expected = reference_mc(traj, gamma, bootstrap=False)
    assert_outputs_close(outputs, expected, traj)
    if not with_value:
        np.testing.assert_array_equal(outputs["advantage"], outputs["value_target"])


def test_mc_bootstrap_without_a_critic_says_to_turn_it_off():
    td = TensorDict({"next": {"reward": torch.ones(4, 1), "done": torch.zeros(4, 1, dtype=torch.bool),
                              "terminated": torch.zeros(4, 1, dtype=torch.bool)}}, batch_size=[4])
    with pytest.raises(rlplug.UserError, match="bootstrap = false"):
        rlplug.make("estimator", "mc")(td)


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


DISCOUNT_PARAMS = [("gae", "gamma"), ("gae", "lmbda"), ("td0", "gamma"), ("td-lambda", "gamma"),
                   ("td-lambda", "lmbda"), ("mc", "gamma"), ("vtrace", "gamma")]


@SETTINGS
@given(
    estimator_and_name=st.sampled_from(DISCOUNT_PARAMS),
    bad=st.one_of(st.floats(max_value=0.0, exclude_max=True, allow_nan=False, allow_infinity=False),
                  st.floats(min_value=1.0, exclude_min=True, allow_nan=False, allow_infinity=False)),
)
def test_out_of_range_discounts_are_user_errors(estimator_and_name, bad):
    estimator, name = estimator_and_name
    with pytest.raises(rlplug.UserError, match=name):
        rlplug.make("estimator", estimator, **{name: bad})


@SETTINGS
@given(name=st.sampled_from(["rho_bar", "c_bar"]), bad=st.floats(max_value=0.0, allow_nan=False))
def test_vtrace_clips_must_be_positive(name, bad):
    with pytest.raises(rlplug.UserError, match=name):
        rlplug.make("estimator", "vtrace", **{name: bad})


@each_estimator
@FEW
@given(data=st.data())
def test_in_range_params_are_accepted(case, data):
    estimator = rlplug.make("estimator", case.name, **data.draw(case.params, label="params"))
    assert "advantage" in estimator.out_keys


def test_new_estimators_are_listed_with_a_one_line_summary():
    registry = rlplug.get_registry()
    assert {"td0", "td-lambda", "mc", "vtrace"} <= set(registry.names("estimator"))
    for name in ("td0", "td-lambda", "td_lambda", "mc", "vtrace"):
        summary = registry.lookup("estimator", name).summary
        assert summary and "\n" not in summary, name
