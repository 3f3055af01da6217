"""Tests aimed at one-line mistakes that a mutation run found no other test failing on (issue 42): each pins,
on known inputs and against a plain reference, what such a mistake would change.

- TD3's target action kept in the action bounds after its noise;
- DDPG's bootstrap from the target actor, not the online one (the two differ once the online actor moved);
- CrossQ's bootstrap held out of the critics' gradient (equal values, different gradients);
- recurrent sequences: the burn-in steps carry no loss (the sample's cut and the loss's positions agree);
- ``stop-at-return`` stops at a return equal to its threshold;
- seeds trained together, resumed: each seed goes on with its own random stream and its own envs' starts;
- evaluation on TorchRL's road (a TorchRL transform, a recurrent policy, DQN's epsilon-greedy): deterministic,
  the same returns twice, the actions the distribution's mode.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from conftest import CANONICAL, ROOT, built_algorithm
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

import rlplug

SETTINGS = SimpleNamespace(gamma=0.5, double=False, burn_in=0, target_policy_noise=0.0, target_noise_clip=0.5,
                           initial_entropy_coef=0.5, learn_entropy_coef=True, target_entropy=None)


def pendulum_specs(**env: object) -> dict:
    made = rlplug.make("env", "gym", id="Pendulum-v1", **env)
    return {"observation_spec": made.observation_spec, "action_spec": made.action_spec}


def loss_of(name: str, networks: dict, specs: dict | None = None, **changes):
    return rlplug.make("loss", name, networks=networks, settings=SimpleNamespace(**{**vars(SETTINGS), **changes}),
                       **(specs or pendulum_specs()))


def transitions(rows: int, seed: int = 0) -> TensorDict:
    """Pendulum-shaped transitions: random observations, taken action 0, reward 0, nothing terminated."""
    generator = torch.Generator().manual_seed(seed)
    return TensorDict({"observation": torch.randn(rows, 3, generator=generator), "action": torch.zeros(rows, 1),
                       "next": {"observation": torch.randn(rows, 3, generator=generator),
                                "reward": torch.zeros(rows, 1), "terminated": torch.zeros(rows, 1, dtype=torch.bool)}},
                      [rows])


class ConstantActor(torch.nn.Module):
    """mu(s) = ``value`` everywhere."""

    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def forward(self, observation):
        return torch.full((*observation.shape[:-1], 1), self.value)


class ActionCritic(torch.nn.Module):
    """Q(s, a) = a: the critic reads back the action it is given."""

    def forward(self, observation, action):
        return action


class ConstantCritic(torch.nn.Module):
    """Q(s, a) = ``value`` everywhere (a learnable scalar)."""

    def __init__(self, value: float):
        super().__init__()
        self.value = torch.nn.Parameter(torch.tensor([value]))

    def forward(self, observation, action):
        return self.value.expand(*observation.shape[:-1], 1)


def critic_module(module: torch.nn.Module) -> TensorDictModule:
    return TensorDictModule(module, in_keys=["observation", "action"], out_keys=["state_action_value"])


# -- TD3: the target action in bounds --------------------------------------------------------------------

def test_td3s_noisy_target_action_is_clamped_to_the_action_bounds():
    """The target actor says 2.0, Pendulum's upper bound; noise clipped at 0.5 of the half-range (2) moves it by
    exactly +-1, to 3 (clamped back to 2) or 1. With Q(s, a) = a, reward 0 and the taken action's value 0, each
    TD error is gamma * a': 1.0 or 0.5, never gamma * 3 = 1.5."""
    actor = TensorDictModule(ConstantActor(2.0), in_keys=["observation"], out_keys=["action"])
    critics = [critic_module(ActionCritic()) for _ in range(2)]
    loss = loss_of("td3-loss", {"policy": actor, "critic": critics[0], "critics": critics},
                   target_policy_noise=1e3, target_noise_clip=0.5)
    loss.with_actor = False  # the actor here has no parameters to train
    torch.manual_seed(0)
    data = transitions(256)
    loss(data)
    errors = sorted(set(data.get("td_error").tolist()))
    assert errors == pytest.approx([0.5, 1.0]), "each target action is 2 (clamped from 3) or 1"


# -- DDPG: the target actor ------------------------------------------------------------------------------

def test_ddpg_bootstraps_from_the_target_actor_not_the_online_one():
    """The loss's targets are copies at build: the online actor is moved first, so the two differ. With Q(s, a)
    = a, reward 0 and the taken action's value 0, each TD error is gamma * mu'(s'), the target actor's action:
    the actor as it was built, not as it is now."""
    torch.manual_seed(0)
    actor = rlplug.make("network", "mlp", role="deterministic_policy", hidden=[16], **pendulum_specs())
    as_built = copy.deepcopy(actor)
    critic = critic_module(ActionCritic())
    loss = loss_of("ddpg-loss", {"policy": actor, "critic": critic, "critics": [critic]})
    with torch.no_grad():
        for parameter in actor.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    data = transitions(32)
    loss.with_actor = False
    loss(data)
    with torch.no_grad():
        target_actions = as_built(TensorDict({"observation": data.get(("next", "observation"))}, [32])).get("action")
        online_actions = actor(TensorDict({"observation": data.get(("next", "observation"))}, [32])).get("action")
    expected = (0.5 * target_actions).abs().reshape(-1)
    assert not torch.allclose(target_actions, online_actions, atol=1e-3), "the online actor moved"
    torch.testing.assert_close(data.get("td_error"), expected, rtol=1e-5, atol=1e-6)


# -- CrossQ: the bootstrap out of the gradient -----------------------------------------------------------

def test_crossqs_bootstrap_is_held_out_of_the_critics_gradient():
    """Critics answering q1 = 1 and q2 = 4 everywhere (learnable scalars), alpha ~ 0: the target is r + gamma
    (1 - d) min(q1, q2) = r + gamma (1 - d) q1, held still, so d loss / d q_i = 2 mean(q_i - target). A
    bootstrap left in the graph gives q1 the same value and a gradient shrunk by (1 - gamma (1 - d))."""
    torch.manual_seed(0)
    actor = rlplug.make("network", "mlp", role="policy", hidden=[16], log_std="state", squash="tanh",
                        **pendulum_specs())
    scalars = [ConstantCritic(1.0), ConstantCritic(4.0)]
    critics = [critic_module(s) for s in scalars]
    loss = loss_of("crossq-loss", {"policy": actor, "critic": critics[0], "critics": critics},
                   initial_entropy_coef=1e-9, learn_entropy_coef=False)
    generator = torch.Generator().manual_seed(1)
    data = transitions(64)
    data.set(("next", "reward"), torch.randn(64, 1, generator=generator))
    data.set(("next", "terminated"), torch.rand(64, 1, generator=generator) < 0.3)
    reward, not_done = data.get(("next", "reward")), (~data.get(("next", "terminated"))).float()
    loss.with_actor = False
    out = loss(data)
    target = reward + 0.5 * not_done * 1.0  # alpha * log pi is ~1e-9: below the tolerance
    gradients = torch.autograd.grad(out["loss_qvalue"], [s.value for s in scalars])
    for scalar, gradient in zip(scalars, gradients):
        expected = 2 * (scalar.value.detach() - target).mean()
        torch.testing.assert_close(gradient, expected.reshape(1), rtol=1e-5, atol=1e-6)
    expected_loss = ((1 - target) ** 2).mean() + ((4 - target) ** 2).mean()
    assert float(out["loss_qvalue"].detach()) == pytest.approx(float(expected_loss), rel=1e-5)


# -- recurrent sequences: the burn-in carries no loss ----------------------------------------------------

class FirstObservation(torch.nn.Module):
    """Q(s, a) = w * s_0 (w = 1, learnable): the critic reads back the observation's first entry."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, observation, action):
        return self.w * observation[..., :1]


LENGTH, BURN_IN, SEQUENCES = 6, 2, 3


def stored_sequences() -> TensorDict:
    """What the replay gives for ``SEQUENCES`` sequences of ``LENGTH`` steps: observation ``t`` at step t (its
    first entry; the next observation t + 1), action ``t / 10``, reward ``10 t``, nothing terminated, the zero
    state at the first step."""
    steps = torch.arange(LENGTH, dtype=torch.float32).expand(SEQUENCES, LENGTH).unsqueeze(-1)
    is_init = torch.zeros(SEQUENCES, LENGTH, 1, dtype=torch.bool)
    is_init[:, 0] = True
    return TensorDict({"observation": torch.cat([steps, torch.zeros_like(steps)], -1), "action": steps / 10,
                       "is_init": is_init,
                       "next": {"observation": torch.cat([steps + 1, torch.zeros_like(steps)], -1),
                                "reward": 10 * steps,
                                "terminated": torch.zeros(SEQUENCES, LENGTH, 1, dtype=torch.bool)}},
                      [SEQUENCES, LENGTH])


def test_sequence_samples_keep_the_whole_observations_and_the_rest_from_the_burn_in_on(monkeypatch):
    algorithm, _ = built_algorithm(ROOT / "recipes" / "pendulum-ddpg-lstm.toml", 0, [
        f"algorithm.sequence_length={LENGTH}", f"algorithm.burn_in={BURN_IN}", f"algorithm.batch_size={3 * LENGTH}",
        "algorithm.policy.hidden_size=8", "algorithm.critic.hidden_size=8", "algorithm.gradient_steps=1"], batches=0)
    monkeypatch.setattr(algorithm.replay, "sample_sequences", lambda batch_size, length: stored_sequences())
    [sample] = list(algorithm.sequence_samples())
    assert sample.get("observation")[0, :, 0].tolist() == list(range(LENGTH + 1)), "every step and the last next"
    assert sample.get(("next", "reward"))[0, :, 0].tolist() == [10.0 * t for t in range(BURN_IN, LENGTH)]
    assert sample.get("action").shape[1] == LENGTH - BURN_IN
    assert sample.get("is_init")[0, :, 0].tolist() == [True] + [False] * LENGTH


def test_the_burn_in_steps_carry_no_loss(monkeypatch):
    """A recurrent actor and a critic Q(s, a) = s_0 = t on the sequences above, gamma 0.5: the critic's term is
    the mean over the steps t = burn-in .. L - 1 alone of (t - (10 t + 0.5 (t + 1)))^2, its TD errors aligned
    with the rewards of the same steps; the burn-in steps only warm up the actor's state."""
    from rlplug.plugins.networks import make_lstm

    algorithm, _ = built_algorithm(ROOT / "recipes" / "pendulum-ddpg-lstm.toml", 0, [
        f"algorithm.sequence_length={LENGTH}", f"algorithm.burn_in={BURN_IN}", f"algorithm.batch_size={3 * LENGTH}",
        "algorithm.policy.hidden_size=8", "algorithm.critic.hidden_size=8", "algorithm.gradient_steps=1"], batches=0)
    monkeypatch.setattr(algorithm.replay, "sample_sequences", lambda batch_size, length: stored_sequences())
    [sample] = list(algorithm.sequence_samples())
    specs = pendulum_specs(observation_indices=[0, 1])
    torch.manual_seed(0)
    actor = make_lstm(specs["observation_spec"], specs["action_spec"], "deterministic_policy", hidden_size=8)
    critic = critic_module(FirstObservation())
    loss = loss_of("ddpg-loss", {"policy": actor, "critic": critic, "critics": [critic]}, specs, burn_in=BURN_IN)
    out = loss(sample).detach()
    steps = torch.arange(BURN_IN, LENGTH, dtype=torch.float32)
    expected = ((steps - (10 * steps + 0.5 * (steps + 1))) ** 2).mean()
    assert float(out["loss_value"]) == pytest.approx(float(expected), rel=1e-6)
    assert float(out["target_value"]) == pytest.approx(float((10 * steps + 0.5 * (steps + 1)).mean()), rel=1e-6)
    # the actor's term reads the critic at the counted steps alone: Q(s, mu(s)) = s_0 = t there
    assert float(out["loss_actor"]) == pytest.approx(-float(steps.mean()), rel=1e-6)


# -- stop-at-return: a return equal to the threshold -----------------------------------------------------

class StopRecorder:
    def __init__(self):
        self.reasons: list[str] = []

    def stop(self, reason: str = "") -> None:
        self.reasons.append(reason)


@pytest.mark.parametrize("returns, stops", [([4.0, 6.0], True), ([5.0], True), ([6.0, 5.0], True),
                                            ([4.0, 5.5], False), ([4.999], False)])
def test_stop_at_return_stops_when_the_mean_return_reaches_the_threshold_equal_included(returns, stops):
    """Threshold 5: a mean of exactly 5 (4 and 6, or 5) stops the run, as one above it; one below does not."""
    from rlplug.plugins.callbacks.builtin import StopAtReturn

    run = StopRecorder()
    StopAtReturn(5.0).on_evaluation(run, returns)
    assert bool(run.reasons) == stops, run.reasons


# -- seeds trained together, resumed ---------------------------------------------------------------------

def test_resumed_seeds_trained_together_each_go_on_with_their_own_streams(tmp_path):
    """Seeds 0 and 3 together to a checkpoint at 512 frames, then resumed: each seed's minibatch generator
    starts from its own restart seed (episode_seed(seed, 512)), and its envs' first observations are those of
    that seed's directory resumed alone, not the first seed's."""
    from rlplug.recipe import load
    from rlplug.run.batched import BatchedRun
    from rlplug.run.schedule import episode_seed
    from rlplug.run.trainer import Run

    sets = ["run.total_frames=1024", "run.checkpoint_every_frames=512", "eval.episodes=1", "eval.every_frames=0",
            "loggers=[]"]
    out = tmp_path / "together"
    batched = BatchedRun.build([load(CANONICAL, [f"run.seed={seed}", *sets]) for seed in (0, 3)], out)
    try:
        batched.train(max_frames=512)
    finally:
        batched.close()

    alone_first = {}
    for seed in (0, 3):
        alone = Run.resume(out / f"seed-{seed}", [])
        try:
            assert alone.frames == 512
            alone_first[seed] = alone.collector.collect().get("observation")[:, 0].clone()
        finally:
            alone.close()
    assert not torch.equal(alone_first[0], alone_first[3])

    resumed, _ = BatchedRun.resume(out, [])
    try:
        assert [run.frames for run in resumed.runs] == [512, 512]
        for generator, seed in zip(resumed.together.generators, (0, 3)):
            expected = torch.Generator().manual_seed(episode_seed(seed, 512)).get_state()
            assert torch.equal(generator.get_state(), expected), f"seed {seed}'s own stream"
        first = resumed.collector.collect()
        for k, seed in enumerate((0, 3)):
            assert torch.equal(first[k].get("observation")[:, 0], alone_first[seed]), f"seed {seed}'s own envs"
        resumed.restart()  # a checkpoint of the resumed run: each seed's own streams and envs again
        for generator, run in zip(resumed.together.generators, resumed.runs):
            expected = torch.Generator().manual_seed(episode_seed(run.recipe.run.seed, run.frames)).get_state()
            assert torch.equal(generator.get_state(), expected)
        assert [run.collector.seed for run in resumed.runs] == [episode_seed(seed, 512) for seed in (0, 3)]
        again = resumed.collector.collect()
        assert not torch.equal(again[0].get("observation")[:, 0], again[1].get("observation")[:, 0])
    finally:
        resumed.close()


# -- evaluation on TorchRL's road: deterministic ---------------------------------------------------------

#: a TorchRL transform closes the array road: the evaluation steps TorchRL's (TensorDicts)
TORCHRL_ROAD = ["env.transforms=[{use = \"StepCounter\"}]", "env.num_envs=2"]


def evaluated_twice(recipe: str, overrides: list[str], episodes: int = 2):
    """The recipe's policy (as built for seed 0) evaluated twice with seed 11 on its env taking TorchRL's road,
    torch's global random stream moved on in between; the TensorDicts the policy wrote on the first."""
    from rlplug.core.collect import TensorDictRoad, road_for
    from rlplug.run.evaluation import evaluate

    algorithm, _ = built_algorithm(ROOT / "recipes" / recipe, 0, overrides, batches=0)
    from rlplug.core.envs import build_env
    from rlplug.recipe import load

    env = build_env(load(ROOT / "recipes" / recipe, ["run.seed=0", *overrides]).env)
    policy = algorithm.policy
    assert isinstance(road_for(env, policy, 11, deterministic=True), TensorDictRoad)
    seen: list[TensorDict] = []
    hook = policy.register_forward_hook(lambda module, args, output: seen.append(output.detach().clone()))
    torch.manual_seed(1)
    first = evaluate(env, policy, episodes, seed=11)
    hook.remove()
    torch.manual_seed(2)
    torch.rand(100)
    second = evaluate(env, policy, episodes, seed=11)
    env.close()
    return first, second, seen


def test_evaluating_a_stochastic_policy_on_torchrls_road_takes_the_mode():
    """PPO's Gaussian policy on Pendulum (a short episode each): the same returns twice, and each action the
    policy took is its distribution's mean (loc), not a draw."""
    first, second, seen = evaluated_twice("pendulum-ppo.toml", [*TORCHRL_ROAD, "env.max_episode_steps=20"])
    assert len(first) == 2 and first == second
    steps = torch.stack(seen)
    torch.testing.assert_close(steps.get("action"), steps.get("loc"), rtol=0, atol=0)


def test_evaluating_dqn_on_torchrls_road_is_greedy():
    """DQN's epsilon-greedy policy (epsilon 1 at the start of training): the evaluation's actions are the argmax
    of the Q-values, every one, and the returns the same twice."""
    first, second, seen = evaluated_twice("cartpole-dqn.toml", TORCHRL_ROAD)
    assert first == second
    steps = torch.stack(seen)
    values, action = steps.get("action_value"), steps.get("action")
    greedy = torch.nn.functional.one_hot(values.argmax(-1), values.shape[-1]).to(action.dtype)
    assert torch.equal(action, greedy)


def test_evaluating_a_recurrent_policy_gives_the_same_returns_twice():
    """Recurrent DDPG (its exploration noise off in evaluation): the same returns with the same seed."""
    first, second, _ = evaluated_twice("pendulum-ddpg-lstm.toml", [
        "env.max_episode_steps=20", "algorithm.policy.hidden_size=8", "algorithm.critic.hidden_size=8",
        "env.num_envs=2"])
    assert len(first) == 2 and first == second
