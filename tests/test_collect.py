"""Collection: the tensor road and the TensorDict road give the same batches; the actor view's shortcuts
give the distribution's numbers; continuous actions work end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import CANONICAL
from hypothesis import given, settings
from hypothesis import strategies as st

from rlplug import recipe as recipes
from rlplug.core.acting import ActorView, ArrayActor
from rlplug.core.collect import Collector
from rlplug.core.episodes import EpisodeTracker
from rlplug.plugins.algorithms.onpolicy.base import log_prob_and_entropy
from rlplug.run.evaluation import evaluate
from rlplug.run.trainer import Run

KEYS = {"observation", "action", "action_log_prob", ("next", "observation"), ("next", "reward"),
        ("next", "done"), ("next", "terminated"), ("next", "truncated")}


def build(tmp_path, *overrides: str) -> Run:
    recipe = recipes.load(CANONICAL, ["run.total_frames=512", "eval.episodes=2", *overrides])
    return Run.build(recipe, tmp_path / "run")


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cartpole"), "env.num_envs=4", "algorithm.frames_per_batch=400")


@pytest.mark.parametrize("tensor_road", [True, False])
def test_both_roads_give_the_same_layout_and_continuity(cartpole, tensor_road):
    collector = Collector(cartpole.env, cartpole.algorithm.policy, 400, seed=3, array_road=tensor_road)
    assert (collector.array_actor is not None) == tensor_road
    batch = collector.collect()
    assert batch.batch_size == (4, 100)
    assert KEYS <= set(batch.keys(True, True))
    assert batch.get(("next", "reward")).shape == (4, 100, 1)
    assert batch.get("action").shape == (4, 100, 2) and batch.get("action_log_prob").shape == (4, 100)
    done = batch.get(("next", "done")).squeeze(-1)
    assert torch.equal(done, (batch.get(("next", "terminated")) | batch.get(("next", "truncated"))).squeeze(-1))
    assert done.any(), "a random CartPole policy ends episodes within 100 steps"
    # Within an episode the next observation is where the following step starts; after a done it is not.
    following = batch.get("observation")[:, 1:]
    next_obs = batch.get(("next", "observation"))[:, :-1]
    same = (following == next_obs).all(-1)
    assert torch.equal(same, ~done[:, :-1])
    # The stored log-probabilities are those of the stored actions under the current policy.
    view = ActorView.of(cartpole.algorithm.policy)
    with torch.no_grad():
        expected = view.distribution(batch.get("observation")).log_prob(batch.get("action"))
    torch.testing.assert_close(batch.get("action_log_prob"), expected)
    # Episode bookkeeping saw every done.
    assert collector.tracker.episodes == int(done.sum())


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=64), st.floats(min_value=0.1, max_value=10), st.integers(0, 2**31 - 1))
def test_categorical_shortcuts_match_the_distribution(cartpole, rows, scale, seed):
    view = ActorView.of(cartpole.algorithm.policy)
    assert view.categorical
    observation = torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed)) * scale
    with torch.no_grad():
        dist = view.distribution(observation)
        action, log_prob = view.act(observation)
        torch.testing.assert_close(log_prob, dist.log_prob(action))
        evaluated, entropy = log_prob_and_entropy(view, observation, action, with_entropy=True)
        torch.testing.assert_close(evaluated, log_prob)
        torch.testing.assert_close(entropy, dist.entropy())
        mode, _ = view.act(observation, deterministic=True)
        probs = dist.probs
        clear = (probs.max(-1).values - probs.min(-1).values) > 1e-5  # a row within rounding of a tie may go either way
        assert torch.equal(mode.argmax(-1)[clear], probs.argmax(-1)[clear])


def test_evaluation_is_deterministic_and_counts_episodes(cartpole):
    first = evaluate(cartpole.eval_env, cartpole.algorithm.policy, episodes=2, seed=7)
    second = evaluate(cartpole.eval_env, cartpole.algorithm.policy, episodes=2, seed=7)
    assert len(first) == 2 and first == second


@settings(max_examples=100, deadline=None)
@given(envs=st.integers(1, 5), quota=st.integers(1, 12), data=st.data())
def test_an_evaluation_counts_each_envs_first_episodes_only(envs, quota, data):
    """With a quota (an evaluation's episodes), env i counts its first quota // envs episodes (one more for
    the first quota % envs envs), however early its episodes end compared with the other envs'."""
    steps = data.draw(st.integers(1, 30))
    dones = np.array(data.draw(st.lists(st.lists(st.booleans(), min_size=steps, max_size=steps),
                                        min_size=envs, max_size=envs)))
    rewards = np.array(data.draw(st.lists(st.lists(st.integers(-3, 3), min_size=steps, max_size=steps),
                                          min_size=envs, max_size=envs)), dtype=float)
    tracker = EpisodeTracker(envs, keep=None, quota=quota)
    split = data.draw(st.integers(0, steps))  # fed in two pieces, as a loop step by step does
    tracker.add(rewards[:, :split], dones[:, :split])
    tracker.add(rewards[:, split:], dones[:, split:])
    expected = []
    for env in range(envs):
        ends = np.flatnonzero(dones[env])
        returns = [rewards[env, start:end + 1].sum() for start, end in zip([0, *(ends[:-1] + 1)], ends)]
        expected += returns[: quota // envs + (env < quota % envs)]
    assert sorted(tracker.recent) == sorted(expected) and tracker.episodes == len(expected)


def test_continuous_actions_train_end_to_end(tmp_path):
    overrides = ["env.id=Pendulum-v1", "env.num_envs=2", "algorithm.frames_per_batch=128",
                 "algorithm.minibatch_size=64", "algorithm.epochs=2", "algorithm.entropy_coef=0.01"]
    run = build(tmp_path, *overrides)
    view = ActorView.of(run.algorithm.policy)
    assert not view.categorical and run.collector.array_actor is not None
    summary = run.train()
    assert summary["status"] == "finished" and summary["frames"] == 512
    batch = run.collector.collect()
    action = batch.get("action")
    assert action.shape == (2, 64, 1) and action.abs().max() <= 2.0, "tanh-squashed into Pendulum's bounds"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["eval_return_mean"] < 0


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=64), st.floats(min_value=0.1, max_value=10), st.integers(0, 2**31 - 1))
def test_the_array_actor_gives_the_policys_numbers(cartpole, rows, scale, seed):
    """What collection records on the array road is the TorchRL policy's distribution: its log-probabilities
    of the sampled actions, and its mode when deterministic."""
    actor = ArrayActor.for_policy(cartpole.algorithm.policy, "cpu", seed)
    view = ActorView.of(cartpole.algorithm.policy)
    observation = (torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed)) * scale).numpy()
    index, log_prob = actor.act(observation)
    with torch.no_grad():
        dist = view.distribution(torch.from_numpy(observation))
        one_hot = torch.nn.functional.one_hot(torch.from_numpy(index), 2)
        torch.testing.assert_close(torch.from_numpy(log_prob), dist.log_prob(one_hot), atol=1e-5, rtol=1e-5)
        mode, _ = actor.act(observation, deterministic=True)
        # each row's mode is the likelier action, unless the two are within rounding of a tie
        tied = (dist.probs[:, 0] - dist.probs[:, 1]).abs() < 1e-5
        assert bool(((torch.from_numpy(mode) == dist.probs.argmax(-1)) | tied).all())


def test_the_array_actor_samples_with_the_policys_frequencies(cartpole):
    torch.manual_seed(0)
    actor = ArrayActor.for_policy(cartpole.algorithm.policy, "cpu", seed=0)
    view = ActorView.of(cartpole.algorithm.policy)
    observation = np.repeat(np.array([[0.5, -1.0, 0.2, 1.5]], dtype=np.float32), 20_000, axis=0)
    index, _ = actor.act(observation)
    with torch.no_grad():
        probability = view.distribution(torch.from_numpy(observation[:1])).probs[0, 1].item()
    assert abs(index.mean() - probability) < 0.02


@pytest.mark.parametrize("noise", ["gaussian", "ornstein-uhlenbeck"])
def test_an_off_policy_actor_with_exploration_takes_the_array_road_with_the_same_actions(tmp_path, noise):
    """DDPG's acting policy (actor, noise, random actions first) acts on the array road as its TensorDict
    modules do: the same arithmetic and random draws, without a TensorDict per step."""
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from rlplug.core.acting import ChainArrayActor

    recipe = recipes.load(CANONICAL.parent / "pendulum-ddpg.toml",
                          ["env.num_envs=2", "algorithm.random_frames=40", f"algorithm.exploration_noise.use={noise}"])
    run = Run.build(recipe, tmp_path / "run")
    algorithm, actor = run.algorithm, run.collector.array_actor
    assert isinstance(actor, ChainArrayActor)
    observation = np.random.default_rng(0).uniform(-1, 1, (2, 3)).astype(np.float32)
    for random_phase in (True, False):
        algorithm.random_actions.active = random_phase
        for kind in (ExplorationType.RANDOM, ExplorationType.DETERMINISTIC):
            with set_exploration_type(kind), torch.no_grad():
                algorithm.noise.reset()  # Ornstein-Uhlenbeck's process starts again (Gaussian noise has none)
                torch.manual_seed(1)
                on_arrays, log_prob = actor.act(observation)
                algorithm.noise.reset()
                torch.manual_seed(1)
                data = TensorDict({"observation": torch.from_numpy(observation)}, batch_size=[2])
                expected = algorithm.policy(data).get("action").numpy()
            assert log_prob is None and on_arrays.shape == (2, 1)
            np.testing.assert_array_equal(on_arrays, expected)
            assert np.all(np.abs(on_arrays) <= 2.0)  # Pendulum's torque bounds
    batch = run.collector.collect()
    assert set(batch.keys(True, True)) == KEYS - {"action_log_prob"}
    assert batch.get("action").shape == (2, 1, 1)


@pytest.mark.parametrize("recipe, observations", [("pendulum-sac.toml", 3), ("cartpole-discrete-sac.toml", 4)])
def test_sac_with_random_first_frames_takes_the_array_road_with_the_same_actions(tmp_path, recipe, observations):
    """SAC's acting policy with random first frames (its actor, TanhNormal or categorical, then random actions)
    acts on the array road as its TensorDict modules do: the same sample (or random action, in the random phase)
    from the same random draws, the log-probability the actor wrote for its sample, the mode when deterministic;
    a categorical's one-hot actions handed to the env as indices. Before, such a policy had no array actor: the
    whole run took the TensorDict road and its seeds could not be trained together."""
    from tensordict import TensorDict
    from tensordict.nn import TensorDictSequential
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from rlplug.core.acting import ChainArrayActor

    run = Run.build(recipes.load(CANONICAL.parent / recipe, ["env.num_envs=2", "algorithm.random_frames=40"]),
                    tmp_path / "run")
    algorithm, actor = run.algorithm, run.collector.array_actor
    assert isinstance(actor, ChainArrayActor) and actor.log_prob_key == "action_log_prob"
    discrete = recipe.startswith("cartpole")
    assert actor.one_hot == discrete
    observation = np.random.default_rng(0).uniform(-1, 1, (16, observations)).astype(np.float32)
    for random_phase in (True, False):
        algorithm.random_actions.active = random_phase
        for kind in (ExplorationType.RANDOM, ExplorationType.DETERMINISTIC):
            with set_exploration_type(kind), torch.no_grad():
                torch.manual_seed(1)
                on_arrays, log_prob = actor.act(observation, deterministic=kind == ExplorationType.DETERMINISTIC)
                torch.manual_seed(1)
                expected = algorithm.policy(TensorDict({"observation": torch.from_numpy(observation)}, batch_size=[16]))
            action = expected.get("action")
            torch.testing.assert_close(torch.from_numpy(on_arrays), action.argmax(-1) if discrete else action)
            torch.testing.assert_close(torch.from_numpy(log_prob), expected.get("action_log_prob"))
            assert discrete or np.all(np.abs(on_arrays) <= 2.0)  # Pendulum's torque bounds
    # the actor alone in a sequence: the env is handed the categorical's indices too
    assert ChainArrayActor(TensorDictSequential(algorithm.policy.module[0]), "cpu").one_hot == discrete
    batch = run.collector.collect()
    assert set(batch.keys(True, True)) == KEYS
    run.close()


def test_dqn_acts_on_the_array_road_with_its_tensordict_policys_actions(tmp_path):
    """DQN's acting policy (Q-network, epsilon-greedy, random actions first) on the array road: the same choices
    and random draws as its TensorDict modules, the env handed indices and the batch recording them one-hot, as
    CartPole's action spec has them and the loss reads them."""
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from rlplug.core.acting import ChainArrayActor

    recipe = recipes.load(CANONICAL.parent / "cartpole-dqn.toml", ["env.num_envs=2", "algorithm.random_frames=40",
                                                                   "algorithm.steps_per_update=8"])
    run = Run.build(recipe, tmp_path / "run")
    algorithm, actor = run.algorithm, run.collector.array_actor
    assert isinstance(actor, ChainArrayActor) and actor.one_hot and actor.action_key == "action"
    observation = np.random.default_rng(0).normal(0, 1, (64, 4)).astype(np.float32)
    for random_phase, epsilon in ((True, 0.0), (False, 0.5), (False, 0.0)):
        algorithm.random_actions.active, algorithm.greedy.epsilon = random_phase, epsilon
        for kind in (ExplorationType.RANDOM, ExplorationType.DETERMINISTIC):
            with set_exploration_type(kind), torch.no_grad():
                torch.manual_seed(1)
                on_arrays, log_prob = actor.act(observation)
                torch.manual_seed(1)
                data = TensorDict({"observation": torch.from_numpy(observation)}, batch_size=[64])
                expected = algorithm.policy(data).get("action")
            assert log_prob is None and on_arrays.shape == (64,)
            assert expected.shape == (64, 2)  # one-hot, as the env's spec
            np.testing.assert_array_equal(on_arrays, expected.argmax(-1).numpy())
            greedy = (on_arrays == algorithm.network.module(torch.from_numpy(observation)).argmax(-1).numpy()).all()
            assert greedy == (kind == ExplorationType.DETERMINISTIC or (not random_phase and epsilon == 0.0))
    batch = run.collector.collect()
    assert set(batch.keys(True, True)) == KEYS - {"action_log_prob"}
    action = batch.get("action")
    assert action.shape == (2, 8, 2) and torch.equal(action.sum(-1), torch.ones(2, 8, dtype=action.dtype))
    run.close()


def test_a_run_holding_no_claim_closes(tmp_path):
    """``Run.claim`` may be None (its default, for a Run made by hand): closing such a run closes its envs and
    does not fail on the missing claim."""
    run = build(tmp_path)
    assert run.claim is not None
    run.claim.release()
    run.claim = None
    run.close()
