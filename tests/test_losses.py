"""Losses: rlplug's own against TorchRL's on random minibatches (values and gradients, wherever both define
the same quantity), and known inputs pinning each formula: PPO's clip, value clipping, the entropy term's sign,
the KL penalty's adaptation. Where rlplug's and TorchRL's losses differ by design:

- advantage normalisation: rlplug's uses the unbiased standard deviation plus 1e-8, TorchRL's the population
  standard deviation clamped at 1e-4 (the comparisons turn normalisation off);
- the entropy of a tanh-squashed Gaussian has no closed form: both estimate it by sampling, with their own
  samples (compared on categorical policies, whose entropy is exact);
- PPO-KL's penalty: rlplug estimates KL(old || new) per sample as ``(r - 1) - log r`` (non-negative, unbiased),
  TorchRL from log-probability differences; compared with the penalty at zero, where both are the surrogate.
"""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

import rlplug
from rlplug.plugins.algorithms.onpolicy.losses import ScoreFunctionLoss
from rlplug.plugins.algorithms.ppo.algorithm import PPOLoss
from rlplug.plugins.algorithms.ppo_kl.algorithm import PPOKLLoss

ENVS = {"discrete": "CartPole-v1", "continuous": "Pendulum-v1"}


@functools.cache
def env_of(kind: str):
    return rlplug.make("env", "gym", id=ENVS[kind])


def networks(kind: str, seed: int):
    torch.manual_seed(seed)
    env = env_of(kind)
    specs = {"observation_spec": env.observation_spec, "action_spec": env.action_spec}
    policy = rlplug.make("network", "mlp", role="policy", hidden=[16], **specs)
    critic = rlplug.make("network", "mlp", role="value", hidden=[16], **specs)
    return policy, critic, env


def minibatch(policy, env, rows: int, seed: int) -> TensorDict:
    """Observations, actions the policy takes, old log-probabilities a little off the current ones, and random
    advantages, value targets and collection-time values: TorchRL's keys and shapes."""
    generator = torch.Generator().manual_seed(seed)
    size = env.observation_spec["observation"].shape[-1]
    data = TensorDict({"observation": torch.randn(rows, size, generator=generator)}, [rows])
    with torch.no_grad():
        policy(data)
    data.set("action_log_prob", data.get("action_log_prob") + 0.3 * torch.randn(rows, generator=generator))
    data.set("advantage", torch.randn(rows, 1, generator=generator))
    data.set("value_target", torch.randn(rows, 1, generator=generator))
    data.set("state_value", torch.randn(rows, 1, generator=generator))
    return data.select("observation", "action", "action_log_prob", "advantage", "value_target", "state_value")


def gradients(loss, data) -> list[torch.Tensor]:
    out = loss(data.clone())
    total = sum(value for key, value in out.items() if key.startswith("loss_"))
    parameters = [p for p in loss.parameters() if p.requires_grad]
    return [g if g is not None else torch.zeros_like(p)
            for p, g in zip(parameters, torch.autograd.grad(total, parameters, allow_unused=True))], out


def assert_same(ours, theirs, data, terms):
    our_grads, our_out = gradients(ours, data)
    their_grads, their_out = gradients(theirs, data)
    for ours_key, theirs_key in terms:
        torch.testing.assert_close(our_out.get(ours_key), their_out.get(theirs_key).reshape(()), rtol=1e-5, atol=1e-6,
                                   msg=ours_key)
    assert len(our_grads) == len(their_grads)
    for mine, theirs_ in zip(our_grads, their_grads):
        torch.testing.assert_close(mine, theirs_, rtol=1e-4, atol=1e-6)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(2, 64), clip=st.floats(0.05, 0.5),
       entropy=st.floats(0.0, 0.1), value=st.floats(0.1, 2.0), kind=st.sampled_from(["discrete", "continuous"]))
def test_our_ppo_loss_is_torchrls_clip_ppo_loss(seed, rows, clip, entropy, value, kind):
    from torchrl.objectives import ClipPPOLoss

    policy, critic, env = networks(kind, seed)
    entropy = entropy if kind == "discrete" else 0.0  # sampled entropies differ: compared where it is exact
    ours = PPOLoss(policy, critic, clip_epsilon=clip, entropy_coef=entropy, value_coef=value,
                   normalize_advantage=False)
    theirs = ClipPPOLoss(policy, critic, clip_epsilon=clip, entropy_bonus=entropy > 0, entropy_coeff=entropy,
                         critic_coeff=value, loss_critic_type="l2", normalize_advantage=False)
    terms = [("loss_objective", "loss_objective"), ("loss_critic", "loss_critic")]
    assert_same(ours, theirs, minibatch(policy, env, rows, seed), terms + ([("loss_entropy", "loss_entropy")]
                                                                           if entropy > 0 else []))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(2, 64), entropy=st.floats(0.0, 0.1), value=st.floats(0.1, 2.0))
def test_our_score_function_loss_is_torchrls_a2c_loss(seed, rows, entropy, value):
    from torchrl.objectives import A2CLoss

    policy, critic, env = networks("discrete", seed)
    ours = ScoreFunctionLoss(policy, critic, entropy_coef=entropy, value_coef=value, normalize_advantage=False)
    theirs = A2CLoss(policy, critic, entropy_bonus=entropy > 0, entropy_coeff=entropy, critic_coeff=value,
                     loss_critic_type="l2")
    terms = [("loss_objective", "loss_objective"), ("loss_critic", "loss_critic")]
    assert_same(ours, theirs, minibatch(policy, env, rows, seed), terms + ([("loss_entropy", "loss_entropy")]
                                                                           if entropy > 0 else []))


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(2, 64))
def test_our_kl_loss_without_its_penalty_is_the_surrogate_of_torchrls_klpen_loss(seed, rows):
    from torchrl.objectives import KLPENPPOLoss

    policy, critic, env = networks("discrete", seed)
    ours = PPOKLLoss(policy, critic, kl_penalty=0.0, normalize_advantage=False,
                     value_coef=1.0).eval()  # eval: no adaptation, to compare one call
    theirs = KLPENPPOLoss(policy, critic, beta=0.0, entropy_bonus=False, critic_coeff=1.0, loss_critic_type="l2",
                          normalize_advantage=False, delay_actor=True).eval()
    assert_same(ours, theirs, minibatch(policy, env, rows, seed),
                [("loss_objective", "loss_objective"), ("loss_critic", "loss_critic")])


# -- known inputs ------------------------------------------------------------------------------------------


LOSSES = {"clip": PPOLoss, "kl": PPOKLLoss, "score": ScoreFunctionLoss}


def one_step(objective: str, **options):
    policy, critic, env = networks("discrete", 0)
    return LOSSES[objective](policy, critic, normalize_advantage=False, **options), policy, env


@pytest.mark.parametrize("advantage, log_ratio, clipped", [
    (1.0, 0.5, True),     # A > 0, ratio above 1 + eps: the clip holds the objective flat
    (-1.0, -0.5, True),   # A < 0, ratio below 1 - eps: flat
    (1.0, -0.5, False),   # A > 0, ratio below 1 - eps: the clip does not apply, the gradient flows
    (-1.0, 0.5, False),   # A < 0, ratio above 1 + eps: flows
    (1.0, 0.05, False),   # inside the range: flows
])
def test_ppo_clip_stops_the_policy_gradient_only_where_it_applies(advantage, log_ratio, clipped):
    loss, policy, env = one_step("clip", clip_epsilon=0.2)
    data = minibatch(policy, env, 1, 0)
    with torch.no_grad():
        current = policy(data.clone()).get("action_log_prob")
    data.set("action_log_prob", current - log_ratio)  # r = exp(log_ratio)
    data.set("advantage", torch.full((1, 1), advantage))
    out = loss(data)
    parameters = list(policy.parameters())
    grads = torch.autograd.grad(out.get("loss_objective"), parameters, allow_unused=True)
    norm = sum(float(g.abs().sum()) for g in grads if g is not None)
    assert (norm == 0.0) == clipped, norm
    expected = -min(advantage * torch.tensor(log_ratio).exp().item(),
                    advantage * min(max(torch.tensor(log_ratio).exp().item(), 0.8), 1.2))
    assert out.get("loss_objective").item() == pytest.approx(expected, rel=1e-5)


def test_value_clipping_takes_the_larger_of_the_clipped_and_unclipped_errors():
    loss, policy, env = one_step("clip", value_clip=0.5, value_coef=1.0)
    data = minibatch(policy, env, 2, 0)
    with torch.no_grad():
        value = loss.value(data.get("observation"))
    # row 0: moved 2.0 up from its old value, overshooting the target by 0.5: unclipped error 0.5, but the
    # clipped prediction (old + 0.5) is 1.0 short of the target, and the larger error counts; row 1: in range
    data.set("state_value", value + torch.tensor([[-2.0], [0.1]]))
    data.set("value_target", value + torch.tensor([[-0.5], [0.3]]))
    expected = (max(0.5 ** 2, 1.0 ** 2) + 0.3 ** 2) / 2
    assert loss(data).get("loss_critic").item() == pytest.approx(expected, rel=1e-4)
    unclipped, _, _ = one_step("clip", value_coef=1.0)
    with torch.no_grad():
        plain = (unclipped.value(data.get("observation")) - data.get("value_target")).pow(2).mean().item()
    assert unclipped(data).get("loss_critic").item() == pytest.approx(plain, rel=1e-4)


def test_the_entropy_term_rewards_entropy():
    loss, policy, env = one_step("clip", entropy_coef=0.1)
    out = loss(minibatch(policy, env, 8, 0))
    assert out.get("loss_entropy").item() == pytest.approx(-0.1 * out.get("entropy").item(), rel=1e-5)
    assert out.get("loss_entropy").item() < 0  # more entropy, a lower loss


def test_the_kl_penalty_adapts_its_beta_around_the_target():
    loss, policy, env = one_step("kl", kl_target=0.01, kl_penalty=1.0)
    for kl, beta in ((0.02, 2.0), (0.01, 2.0), (0.001, 1.0)):  # above 1.5x: doubles; within: stays; below: halves
        loss.adapt_beta(torch.tensor(kl))
        assert loss.beta.item() == beta


def test_the_score_function_objective_is_minus_log_probability_times_advantage():
    loss, policy, env = one_step("score")
    data = minibatch(policy, env, 4, 1)
    with torch.no_grad():
        log_prob = policy(data.clone()).get("action_log_prob")
    expected = -(log_prob * data.get("advantage").reshape(-1)).mean()
    torch.testing.assert_close(loss(data).get("loss_objective"), expected)


# -- through a recipe ------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["ClipPPOLoss", "KLPENPPOLoss", "A2CLoss", "ReinforceLoss", "ppo-loss",
                                  "surrogate-loss", "policy-gradient-loss"])
def test_every_onpolicy_loss_trains_under_ppo(tmp_path, loss):
    options = {} if loss not in ("A2CLoss", "ReinforceLoss") else {"normalize_advantages": False}
    agent = rlplug.Agent.from_recipe("recipes/cartpole-ppo.toml", out=tmp_path / "run", run={"total_frames": 512},
                                     eval={"episodes": 1}, algorithm={"loss": {"use": loss}, **options},
                                     loggers=[{"use": "csv"}])
    before = [p.detach().clone() for p in agent.run.algorithm.parameters]
    summary = agent.train()
    assert summary["status"] == "finished"
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.run.algorithm.parameters))


def test_a_loss_of_another_algorithm_is_one_line_before_anything_is_built(tmp_path):
    from conftest import CANONICAL, run_cli

    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", 'algorithm.loss={use="ppo-kl-loss"}',
                     "--set", "algorithm.loss.use=ddpg-loss", timeout=60)
    assert result.returncode == 2 and not out.exists(), result.stderr
    assert "algorithm.loss" in result.stderr and "not ppo" in result.stderr


@pytest.mark.parametrize("loss", ["ppo-loss", "ClipPPOLoss"])
def test_a_loss_is_moved_to_the_algorithms_device_when_built(loss):
    """A buffer made on the CPU (PPO's clip range) failed every CUDA run's first update; "meta" stands in for
    a device this CPU-only suite does not have."""
    from types import SimpleNamespace

    policy, critic, _ = networks("discrete", 0)
    settings = SimpleNamespace(clip_epsilon=0.2, entropy_coef=0.0, value_coef=0.5, value_clip=None,
                               normalize_advantages=True, kl_target=0.01, kl_penalty=1.0)
    built = rlplug.make("loss", loss, networks={"policy": policy, "critic": critic}, settings=settings,
                        device="meta")
    tensors = [*built.buffers(), *built.parameters()]
    assert tensors and all(t.device.type == "meta" for t in tensors)


@pytest.mark.slow
@pytest.mark.parametrize("anneal", [False, True])
def test_the_clip_range_set_on_clip_ppo_loss_is_the_one_ppo_clips_with(tmp_path, anneal):
    """``[algorithm.loss] use = "ClipPPOLoss", clip_epsilon = 0.1`` under ``ppo`` (whose own clip_epsilon is
    0.2): the loss clips at 0.1, annealed from there where the algorithm anneals, never reset to the algorithm's."""
    import csv

    from conftest import ROOT

    out = tmp_path / f"anneal-{anneal}"
    agent = rlplug.Agent.from_recipe(ROOT / "recipes" / "cartpole-ppo.toml", out=out, loggers=[{"use": "csv"}],
                                     run={"total_frames": 4096, "checkpoint_every_frames": 0},
                                     eval={"every_frames": 0, "episodes": 1},
                                     algorithm={"clip_epsilon": 0.2, "anneal_clip": anneal,
                                                "loss": {"use": "ClipPPOLoss", "clip_epsilon": 0.1}})
    agent.train()
    agent.close()
    with (out / "metrics.csv").open() as f:
        clips = [float(row["clip_epsilon"]) for row in csv.DictReader(f) if row.get("clip_epsilon")]
    assert clips and max(clips) <= 0.1 + 1e-6
    assert (clips[-1] < clips[0]) if anneal else clips == [pytest.approx(0.1)] * len(clips)
