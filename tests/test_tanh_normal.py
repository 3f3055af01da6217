"""rlplug's TanhNormal sampling (``rlplug.core.acting.TanhNormalSampling``, what SAC's, CrossQ's, REDQ's and TQC's
losses draw their actions with) against TorchRL's ``TanhNormal.rsample_and_log_prob``, the reference: from the
same generator state, the same actions, log-probabilities and gradients, for every way rlplug's heads build it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import TanhNormal

import rlplug
from rlplug.core.acting import ActorView, TanhNormalSampling

BOUNDS = {"unit": {}, "pendulum": {"low": torch.tensor([-2.0]), "high": torch.tensor([2.0])},
          "uneven": {"low": torch.tensor([0.0, -1.0, -3.0]), "high": torch.tensor([3.0, 1.0, 0.5])}}


def theirs_rsampled(loc, scale, kwargs):
    return TanhNormal(loc, scale, **kwargs).rsample_and_log_prob()


def theirs_sampled(loc, scale, kwargs):
    """What a ProbabilisticActor records when it acts: a sample, then its log-probability."""
    dist = TanhNormal(loc, scale, **kwargs)
    action = dist.sample()
    return action, dist.log_prob(action)


ROADS = {"rsample": (theirs_rsampled, TanhNormalSampling.rsample_and_log_prob),
         "sample": (theirs_sampled, TanhNormalSampling.sample_and_log_prob)}


def both(loc: torch.Tensor, scale: torch.Tensor, kwargs: dict, seed: int = 0, road: str = "rsample"):
    """TorchRL's and rlplug's (action, log_prob, gradients on loc and scale), each from ``seed``, along ``road``:
    the loss's reparameterised draw, or acting's sample then score."""
    theirs, ours = ROADS[road]
    results = []
    for sample in (lambda lo, sc: theirs(lo, sc, kwargs),
                   lambda lo, sc: ours(TanhNormalSampling.of(TanhNormal, kwargs), lo, sc)):
        leaf_loc, leaf_scale = loc.clone().requires_grad_(), scale.clone().requires_grad_()
        torch.manual_seed(seed)
        action, log_prob = sample(leaf_loc, leaf_scale)
        # a weighted sum, so that the gradients see the actions and the log-probabilities apart
        (action.sum() * 0.3 * action.requires_grad + log_prob.sum()).backward()
        results.append((action.detach(), log_prob.detach(), leaf_loc.grad, leaf_scale.grad))
    return results


@pytest.mark.parametrize("road", sorted(ROADS))
@pytest.mark.parametrize("bounds", sorted(BOUNDS))
@pytest.mark.parametrize("event", ["vector", "matrix"])
def test_the_same_actions_log_probs_and_gradients_as_torchrls_tanh_normal(bounds, event, road):
    kwargs = dict(BOUNDS[bounds])
    size = len(kwargs.get("low", [2]))
    shape = (64, size) if event == "vector" else (64, 2, size)
    if event == "matrix":  # an action of two rows (rlplug's EventShape): log-probabilities summed over both
        kwargs["event_dims"] = 2
    generator = torch.Generator().manual_seed(1)
    loc = torch.randn(shape, generator=generator) * 2
    scale = torch.rand(shape, generator=generator) + 0.05
    theirs, ours = both(loc, scale, kwargs, road=road)
    assert ours[1].shape == theirs[1].shape == shape[:1]
    assert not torch.equal(theirs[0], both(loc, scale, kwargs, seed=1, road=road)[0][0])  # noise is drawn
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(loc=st.lists(st.floats(-30, 30), min_size=3, max_size=3),
       log_scale=st.lists(st.floats(-6, 2), min_size=3, max_size=3), seed=st.integers(0, 2**31 - 1),
       bounds=st.sampled_from(sorted(BOUNDS)), road=st.sampled_from(sorted(ROADS)))
def test_property_agrees_with_torchrl_far_into_saturation(loc, log_scale, seed, bounds, road):
    """Means far beyond tanh's range and tiny spreads (a saturating policy) included: the safe tanh and the log
    of the Jacobian are TorchRL's own, so the two agree there too."""
    kwargs = dict(BOUNDS[bounds])
    size = len(kwargs.get("low", [3]))
    loc_t = torch.tensor(loc)[:size].reshape(1, size).expand(4, size).contiguous()
    scale_t = torch.tensor(log_scale)[:size].exp().reshape(1, size).expand(4, size).contiguous()
    theirs, ours = both(loc_t, scale_t, kwargs, seed, road)
    for got, want in zip(ours, theirs, strict=True):
        # 1e-3: TorchRL scores the pre-tanh value as -(u - loc)^2 / (2 scale^2), whose gradient on a small scale is
        # two large terms cancelling in float32; rlplug's -noise^2 / 2 has none to cancel
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)


def test_a_state_independent_spread_broadcast_over_the_batch_draws_as_torchrl_does():
    loc = torch.randn(32, 2)
    scale = torch.tensor([0.5, 1.5]).expand(32, 2)  # log_std = "parameter": one spread, expanded
    theirs, ours = both(loc, scale, {})
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_only_tanh_normals_read_as_rlplug_builds_them_take_the_formulas():
    assert TanhNormalSampling.of(TanhNormal, {"low": torch.zeros(1), "high": torch.ones(1)}) is not None
    assert TanhNormalSampling.of(TanhNormal, {"tanh_loc": True}) is None  # location scaling: the distribution's road
    assert TanhNormalSampling.of(TanhNormal, {"safe_tanh": False}) is None

    class Subclass(TanhNormal):
        pass

    assert TanhNormalSampling.of(Subclass, {}) is None  # a subclass may draw otherwise


@pytest.mark.parametrize("log_std", ["state", "parameter"])
def test_a_sac_policy_draws_through_the_formulas_what_its_distribution_draws(log_std):
    env = rlplug.make("env", "gym", id="Pendulum-v1", num_envs=2)
    sac = rlplug.make("algorithm", "sac", observation_spec=env.observation_spec, action_spec=env.action_spec,
                      total_frames=1000, policy={"use": "mlp", "hidden": [16], "log_std": log_std})
    view = ActorView.of(sac.policy)
    assert view.tanh_normal is not None
    observation = torch.randn(10, 3)
    torch.manual_seed(3)
    action, log_prob = view.rsample_and_log_prob(observation)
    torch.manual_seed(3)
    want_action, want_log_prob = view.distribution(observation).rsample_and_log_prob()
    assert action.abs().max() <= 2.0
    torch.testing.assert_close(action, want_action)
    torch.testing.assert_close(log_prob, want_log_prob, rtol=1e-5, atol=1e-5)
    torch.manual_seed(4)  # acting: what the policy module itself writes, sample and log-probability
    acted = view.act(observation)
    torch.manual_seed(4)
    with set_exploration_type(ExplorationType.RANDOM):
        data = sac.policy(TensorDict({"observation": observation}, batch_size=[10]))
    torch.testing.assert_close(acted[0], data["action"])
    torch.testing.assert_close(acted[1], data[view.log_prob_key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bounds", sorted(BOUNDS))
def test_the_log_probability_of_given_actions_is_torchrls_at_the_bounds_too(bounds):
    """What the on-policy losses score the collected actions with: inside the bounds, and on them (an env's
    clipped or a saturated policy's action), where both recover the pre-tanh value by the same safe atanh."""
    kwargs = dict(BOUNDS[bounds])
    low, high = kwargs.get("low", torch.tensor([-1.0, -1.0])), kwargs.get("high", torch.tensor([1.0, 1.0]))
    generator = torch.Generator().manual_seed(2)
    loc = torch.randn(40, len(low), generator=generator)
    scale = torch.rand(40, len(low), generator=generator) + 0.05
    action = low + (high - low) * torch.rand(40, len(low), generator=generator)
    action[:5], action[5:10] = low, high
    results = []
    for score in (lambda lo, sc: TanhNormal(lo, sc, **kwargs).log_prob(action),
                  lambda lo, sc: TanhNormalSampling.of(TanhNormal, kwargs).log_prob(lo, sc, action)):
        leaf_loc, leaf_scale = loc.clone().requires_grad_(), scale.clone().requires_grad_()
        log_prob = score(leaf_loc, leaf_scale)
        log_prob.sum().backward()
        results.append((log_prob.detach(), leaf_loc.grad, leaf_scale.grad))
    assert torch.isfinite(results[1][0]).all()
    for got, want in zip(*reversed(results), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
