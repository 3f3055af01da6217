"""The gym env's options on real gymnasium envs: what each one changes, the statistics it keeps (saved,
restored, frozen), that TorchRL's road and the tensor road see the same numbers, and the one-line errors."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import CANONICAL, run_cli

import rlplug
from rlplug import recipe as recipes
from rlplug.core.collect import Collector
from rlplug.run.evaluation import evaluate
from rlplug.run.trainer import Run

EPS = 1e-8


def make(**params):
    return rlplug.make("env", "gym", **params)


def random_actions(env, steps: int, seed: int) -> list[torch.Tensor]:
    """The same actions for any env with this action spec: one-hot choices or uniform within the bounds."""
    generator, spec, envs = torch.Generator().manual_seed(seed), env.action_spec, env.batch_size[0]
    actions = []
    for _ in range(steps):
        if spec.domain == "discrete":
            choice = torch.randint(0, spec.space.n, (envs,), generator=generator)
            actions.append(torch.nn.functional.one_hot(choice, spec.space.n))
        else:
            low, high = spec.space.low, spec.space.high
            actions.append(low + (high - low) * torch.rand(low.shape, generator=generator))
    return actions


def rollout(env, steps: int, seed: int = 0, action_seed: int = 1):
    """Reset observation and the tensor-road transitions of ``steps`` random steps."""
    first = env.reset_tensors(seed=seed)
    return first, [env.step_tensors(action) for action in random_actions(env, steps, action_seed)]


def stats(env) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in env.statistics().items()}


def normalised_by(state: dict[str, torch.Tensor], observation: torch.Tensor) -> torch.Tensor:
    """``observation`` as running normalisation with the statistics ``state`` gives it."""
    return ((observation.double() - state["observation_mean"]) / (state["observation_var"] + EPS).sqrt()).float()


# -- the built object and the defaults ---------------------------------------------------------------------


def test_defaults_keep_no_statistics_and_the_trainer_api_is_reachable():
    env = make(id="CartPole-v1", num_envs=2)
    assert env.supports_tensor_steps
    assert env.observation_spec["observation"].shape == (2, 4)
    assert env.statistics() == {}
    env.load_statistics({})
    env.load_statistics({})
    env.set_training(False)
    assert not env.updates_statistics and not env.base_env.updates_statistics
    env.set_training(True)
    assert env.updates_statistics
    _, steps = rollout(env, 30)
    assert all(torch.equal(t.reward, torch.ones(2)) for t in steps), "no option: CartPole's own rewards"


# -- both roads --------------------------------------------------------------------------------------------


ROAD_CASES = {
    # one env: every episode end is an "all envs done" step, where TorchRL's road would reset a second time
    "cartpole-1-running-rewards-stack": dict(id="CartPole-v1", num_envs=1, normalize_observations="running",
                                             normalize_rewards=True, frame_stack=2),
    # all three truncate together every 20 steps
    "pendulum-3-running-clip-rewards": dict(id="Pendulum-v1", num_envs=3, max_episode_steps=20,
                                            normalize_observations="running", clip_observations=2.0,
                                            normalize_rewards=True, reward_gamma=0.9),
    "mountaincar-fixed-wrapper": dict(id="MountainCarContinuous-v0", num_envs=2, max_episode_steps=15,
                                      normalize_observations="fixed",
                                      wrappers=[{"name": "RescaleAction", "kwargs": {"min_action": -0.5,
                                                                                     "max_action": 0.5}}]),
    "blackjack-tuple-flattened": dict(id="Blackjack-v1", num_envs=4, flatten_observations=True,
                                      normalize_observations="running"),
}


@pytest.mark.parametrize("params", ROAD_CASES.values(), ids=ROAD_CASES.keys())
def test_both_roads_agree_step_by_step(params):
    torchrl_road, tensor_road = make(**params), make(**params)
    state = torchrl_road.reset(seed=5)
    observation = tensor_road.reset_tensors(seed=5)
    assert torch.equal(state["observation"], observation)
    episodes = 0
    for action in random_actions(torchrl_road, 120, seed=2):
        state["action"] = action
        step, state = torchrl_road.step_and_maybe_reset(state)
        transition = tensor_road.step_tensors(action)
        assert torch.equal(step["next", "observation"], transition.next_observation)
        assert torch.equal(step["next", "reward"].squeeze(-1), transition.reward)
        assert torch.equal(step["next", "terminated"].squeeze(-1), transition.terminated)
        assert torch.equal(step["next", "truncated"].squeeze(-1), transition.truncated)
        assert torch.equal(state["observation"], transition.observation)
        episodes += int((transition.terminated | transition.truncated).sum())
    assert episodes >= 3, "the comparison must cross episode ends"
    a, b = stats(torchrl_road), stats(tensor_road)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- normalisation -----------------------------------------------------------------------------------------


def test_running_normalisation_is_the_running_statistics_applied_to_every_observation():
    raw = make(id="CartPole-v1", num_envs=3)
    normalised = make(id="CartPole-v1", num_envs=3, normalize_observations="running")
    assert normalised.observation_spec["observation"].dtype == torch.float32
    raw_first, raw_steps = rollout(raw, 60)
    first = normalised.reset_tensors(seed=0)
    s = stats(normalised)
    assert s["observation_count"] == pytest.approx(3 + 1e-4)
    torch.testing.assert_close(first, normalised_by(s, raw_first))
    ended_seen = 0
    for action, raw_step in zip(random_actions(raw, 60, 1), raw_steps):
        step = normalised.step_tensors(action)
        s = stats(normalised)
        torch.testing.assert_close(step.observation, normalised_by(s, raw_step.observation))
        # the final observation of an ended episode is normalised the same way (and counted)
        torch.testing.assert_close(step.next_observation, normalised_by(s, raw_step.next_observation))
        ended_seen += int((step.terminated | step.truncated).sum())
    assert ended_seen > 0
    assert s["observation_count"] == pytest.approx(3 * 61 + ended_seen + 1e-4)


def test_running_normalisation_gives_zero_mean_unit_std():
    options = dict(id="Pendulum-v1", num_envs=16, max_episode_steps=25)
    env = make(normalize_observations="running", **options)
    _, steps = rollout(env, 300)  # 4800 random frames; measured over the last 2400
    # the observations the statistics count: every one arrived at, and the first ones of new episodes
    observations = torch.cat([t.next_observation for t in steps[150:]]
                             + [t.observation[t.terminated | t.truncated] for t in steps[150:]])
    assert observations.mean(0).abs().max() < 0.15, observations.mean(0)
    assert ((observations.std(0) - 1).abs() < 0.15).all(), observations.std(0)
    _, raw_steps = rollout(make(**options), 100)
    assert torch.cat([t.observation for t in raw_steps]).std(0)[2] > 1.5, "Pendulum's own speeds are not unit"


@pytest.mark.parametrize("env_id, bounds", [("Pendulum-v1", ([-1, -1, -8], [1, 1, 8])),
                                            ("MountainCarContinuous-v0", ([-1.2, -0.07], [0.6, 0.07]))])
def test_fixed_normalisation_rescales_the_bounds_to_unit(env_id, bounds):
    low, high = (torch.tensor(b, dtype=torch.float64) for b in bounds)
    raw, fixed = make(id=env_id, num_envs=2), make(id=env_id, num_envs=2, normalize_observations="fixed")
    assert fixed.statistics() == {}, "fixed normalisation keeps no statistics"
    spec = fixed.observation_spec["observation"]
    assert torch.equal(spec.space.low, -torch.ones_like(spec.space.low))
    (raw_first, raw_steps), (first, steps) = rollout(raw, 200), rollout(fixed, 200)
    everything = torch.cat([first] + [t.observation for t in steps] + [t.next_observation for t in steps])
    assert everything.abs().max() <= 1.0
    expected = lambda x: ((x.double() - low) / (high - low) * 2 - 1).float()  # noqa: E731
    torch.testing.assert_close(first, expected(raw_first))
    for step, raw_step in zip(steps, raw_steps):
        torch.testing.assert_close(step.next_observation, expected(raw_step.next_observation))
    assert everything.std(0).min() > 0.01, "the values move"


def test_fixed_normalisation_rejects_infinite_bounds():
    with pytest.raises(rlplug.UserError) as caught:
        make(id="CartPole-v1", normalize_observations="fixed")
    message = str(caught.value)
    assert "env.normalize_observations" in message and "infinite" in message and "1, 3" in message
    assert "'running'" in message and "\n" not in message


def test_clip_observations_bounds_values_and_spec():
    env = make(id="CartPole-v1", num_envs=4, normalize_observations="running", clip_observations=0.5)
    assert env.observation_spec["observation"].space.high.max() == 0.5
    _, steps = rollout(env, 100)
    values = torch.cat([t.observation for t in steps] + [t.next_observation for t in steps])
    assert values.abs().max() <= 0.5 and (values.abs() == 0.5).any()
    raw_clipped = make(id="Pendulum-v1", num_envs=2, clip_observations=0.25)
    _, steps = rollout(raw_clipped, 50)
    assert torch.cat([t.observation for t in steps]).abs().max() <= 0.25


@pytest.mark.parametrize("env_id, params", [("CartPole-v1", {}), ("Pendulum-v1", {"max_episode_steps": 40})])
def test_reward_scaling_is_gymnasiums_normalize_reward(env_id, params):
    ours = make(id=env_id, num_envs=4, normalize_rewards=True, reward_gamma=0.9, **params)
    theirs = gym.wrappers.vector.NormalizeReward(
        gym.make_vec(env_id, num_envs=4, vectorization_mode="sync",
                     vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}, **params), gamma=0.9)
    ours.reset_tensors(seed=3)
    theirs.reset(seed=3)
    for action in random_actions(ours, 150, seed=4):
        step = ours.step_tensors(action)
        _, reward, *_ = theirs.step(action.argmax(-1).numpy() if env_id == "CartPole-v1" else action.numpy())
        np.testing.assert_allclose(step.reward.numpy(), reward, rtol=1e-4)
    assert stats(ours)["return_var"] == pytest.approx(theirs.return_rms.var, rel=1e-4)
    assert abs(theirs.return_rms.var - 1) > 0.5, "the statistics moved: rewards are really rescaled"


# -- statistics: saved, restored, frozen ------------------------------------------------------------------


def test_statistics_round_trip_through_torch_save_and_freeze_for_evaluation(tmp_path):
    options = dict(id="CartPole-v1", normalize_observations="running", normalize_rewards=True)
    train = make(num_envs=4, **options)
    rollout(train, 100)
    state = train.statistics()
    assert set(state) == {f"{p}_{s}" for p in ("observation", "return") for s in ("mean", "var", "count")}
    assert all(isinstance(v, (torch.Tensor, float)) for v in state.values())
    torch.save({"env": state}, tmp_path / "checkpoint.pt")
    loaded = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["env"]

    evaluation = make(num_envs=2, **options)  # another number of copies, as the trainer's eval env has
    evaluation.load_statistics(loaded)
    evaluation.set_training(False)
    before = stats(evaluation)
    assert all(torch.equal(before[k], torch.as_tensor(state[k])) for k in state)
    raw = make(id="CartPole-v1", num_envs=2)
    (raw_first, raw_steps), (first, steps) = rollout(raw, 80, seed=9), rollout(evaluation, 80, seed=9)
    torch.testing.assert_close(first, normalised_by(before, raw_first))
    for step, raw_step in zip(steps, raw_steps):
        torch.testing.assert_close(step.next_observation, normalised_by(before, raw_step.next_observation))
        assert torch.equal(step.reward, torch.ones(2)), "out of training, rewards are the env's own"
    after = stats(evaluation)
    assert all(torch.equal(before[k], after[k]) for k in before), "frozen"

    evaluation.set_training(True)
    _, steps = rollout(evaluation, 10)
    assert stats(evaluation)["observation_count"] > before["observation_count"]
    assert not torch.equal(steps[-1].reward, torch.ones(2)), "in training, rewards are scaled again"


def test_statistics_that_do_not_fit_are_refused():
    running = make(id="CartPole-v1", normalize_observations="running")
    rollout(running, 5)
    with pytest.raises(rlplug.UserError, match="missing observation_mean"):
        make(id="CartPole-v1", normalize_observations="running", normalize_rewards=True).load_statistics(
            {k: v for k, v in running.statistics().items() if k != "observation_mean"})
    with pytest.raises(rlplug.UserError, match="unexpected observation_count"):
        make(id="CartPole-v1").load_statistics(running.statistics())
    with pytest.raises(rlplug.UserError, match="shape"):
        make(id="CartPole-v1", normalize_observations="running", frame_stack=2).load_statistics(running.statistics())


# -- observation shape: frame stacking, flattening, wrappers ----------------------------------------------


def test_frame_stack_concatenates_the_last_k_observations():
    raw, stacked = make(id="CartPole-v1", num_envs=2), make(id="CartPole-v1", num_envs=2, frame_stack=3)
    assert stacked.observation_spec["observation"].shape == (2, 12)
    assert make(id="Pendulum-v1", frame_stack=4).observation_spec["observation"].shape == (1, 12)
    (raw_first, raw_steps), (first, steps) = rollout(raw, 60), rollout(stacked, 60)
    assert torch.equal(first, raw_first.repeat(1, 3)), "the first frame fills the stack"
    previous = first
    for step, raw_step in zip(steps, raw_steps):
        assert torch.equal(step.next_observation[:, 8:], raw_step.next_observation)
        assert torch.equal(step.next_observation[:, :8], previous[:, 4:]), "oldest first, shifted by one"
        ended = step.terminated | step.truncated
        assert torch.equal(step.observation[ended], raw_step.observation[ended].repeat(1, 3)), "a new episode"
        previous = step.observation
    assert any((t.terminated | t.truncated).any() for t in steps)


def test_wrappers_apply_to_each_env_in_order():
    timed = make(id="CartPole-v1", num_envs=2, wrappers=[{"name": "TimeAwareObservation"}])
    assert timed.observation_spec["observation"].shape == (2, 5)
    first, steps = rollout(timed, 5)
    assert first[:, -1].tolist() == [0, 0] and steps[2].observation[:, -1].tolist() == [3, 3]
    rescaled = make(id="Pendulum-v1", wrappers=[{"name": "RescaleAction", "kwargs": {"min_action": -1,
                                                                                     "max_action": 1}},
                                                {"name": "ClipAction"}])
    assert rescaled.action_spec.space.high.item() > 1e30, "ClipAction's unbounded space, as gymnasium gives it"
    assert rescaled.supports_tensor_steps
    rollout(rescaled, 5)
    discretised = make(id="Pendulum-v1", wrappers=[{"name": "DiscretizeAction", "kwargs": {"bins": 5}}])
    assert discretised.action_spec.space.n == 5 and discretised.supports_tensor_steps


def test_non_box_observations_are_one_hot_or_flattened():
    lake = make(id="FrozenLake-v1", num_envs=2)
    assert lake.observation_spec["observation"].shape == (2, 16)
    first, steps = rollout(lake, 20)
    assert first.dtype == torch.float32 and torch.equal(first.sum(-1), torch.ones(2))
    blackjack = make(id="Blackjack-v1", flatten_observations=True)
    assert blackjack.observation_spec["observation"].shape == (1, 32 + 11 + 2)
    timed = make(id="CartPole-v1", flatten_observations=True,
                 wrappers=[{"name": "TimeAwareObservation", "kwargs": {"flatten": False}}])
    assert timed.observation_spec["observation"].shape == (1, 5)


# -- errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("params, fragments", [
    ({"wrappers": [{"name": "ClipAktion"}]},
     ["wrappers[0].name", "no gymnasium wrapper 'ClipAktion'", "did you mean 'ClipAction'"]),
    ({"wrappers": [{"name": "os.system"}]}, ["no gymnasium wrapper 'os.system'", "gymnasium.wrappers only"]),
    ({"wrappers": [{"name": "ClipAction"}, {"name": "TimeAwareObservation", "kwargs": {"flaten": True}}]},
     ["wrappers[1]", "takes no argument 'flaten'", "did you mean 'flatten'"]),
    ({"wrappers": [{"nme": "ClipAction"}]}, ["wrappers[0].nme", "did you mean 'name'"]),
    ({"wrappers": [{"name": "TransformObservation"}]}, ["wrappers[0]", "takes a function as 'func'"]),
    # a string where a function belongs would be called in the middle of a run
    ({"wrappers": [{"name": "TransformReward", "kwargs": {"func": "abs"}}]},
     ["wrappers[0]", "takes a function as 'func'", "cannot give"]),
    ({"wrappers": [{"name": "RecordVideo", "kwargs": {"video_folder": "v", "episode_trigger": "all"}}]},
     ["wrappers[0]", "takes a function as 'episode_trigger'"]),
    ({"wrappers": [{"name": "TimeLimit", "kwargs": {"max_episode_steps": 5}}, {"name": "DelayObservation"}]},
     ["wrappers[1]", "needs 'delay'"]),
    ({"id": "this:CartPole-v1"}, ["id: ", "names a module to import", "a recipe may not"]),
    ({"wrappers": [{"name": "FrameStackObservation", "kwargs": {"stack_size": 0}}]},
     ["env.wrappers[0]", "FrameStackObservation failed", "greater than zero"]),
    ({"frame_stack": 0}, ["frame_stack", "must be >= 1"]),
    ({"normalize_observations": "runing"}, ["normalize_observations", "did you mean 'running'"]),
    ({"clip_observations": 0}, ["clip_observations", "must be > 0"]),
    ({"reward_gamma": 1.5}, ["reward_gamma", "must be <= 1"]),
    ({"wrappers": [{"name": "TimeAwareObservation", "kwargs": {"flatten": False}}], "normalize_observations": "fixed"},
     ["env.normalize_observations", "CartPole-v1's is a Dict (keys obs, time)", "flatten_observations = true"]),
    ({"wrappers": [{"name": "TimeAwareObservation", "kwargs": {"flatten": False}}], "observation_indices": [0]},
     ["env.observation_indices", "Dict (keys obs, time)", "flatten_observations = true"]),
    ({"id": "Blackjack-v1"}, ["Blackjack-v1 has a Tuple", "flatten_observations = true"]),
])
def test_mistakes_are_one_line_user_errors(params, fragments):
    with pytest.raises(rlplug.UserError) as caught:
        make(**{"id": "CartPole-v1", **params})
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def assert_cli_user_error(result, *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize("overrides, fragments", [
    (['env.wrappers=[{name = "ClipAktion"}]'], ["env.wrappers[0].name", "did you mean 'ClipAction'"]),
    # a Dict observation keeps its entries, which mlp does not read
    (['env.wrappers=[{name = "TimeAwareObservation", kwargs = {flatten = false}}]'],
     ["cartpole-ppo.toml", "algorithm.policy:", "Dict of entries (obs [4], time [1])", "flatten_observations = true"]),
])
@pytest.mark.slow
def test_cli_reports_env_mistakes_in_one_line(tmp_path, overrides, fragments):
    out = tmp_path / "run"
    arguments = [item for override in overrides for item in ("--set", override)]
    assert_cli_user_error(run_cli("run", str(CANONICAL), "--out", str(out), *arguments), *fragments)
    assert not out.exists()


# -- through the trainer's road ----------------------------------------------------------------------------


def test_a_recipe_with_every_option_collects_on_both_roads_and_evaluates(tmp_path):
    recipe = recipes.load(CANONICAL, [
        "run.total_frames=512", "eval.episodes=2", "env.num_envs=4", "algorithm.frames_per_batch=128",
        "env.normalize_observations=running", "env.normalize_rewards=true", "env.clip_observations=5.0",
        "env.frame_stack=2", 'env.wrappers=[{name = "TimeAwareObservation", kwargs = {normalize_time = true}}]',
    ])
    assert recipe.resolved()["env"]["wrappers"] == [{"name": "TimeAwareObservation",
                                                     "kwargs": {"normalize_time": True}}]
    run = Run.build(recipe, tmp_path / "run")
    for tensor_road in (True, False):
        batch = Collector(run.env, run.algorithm.policy, 128, seed=1, array_road=tensor_road).collect()
        assert batch.get("observation").shape == (4, 32, 10)
        assert batch.get(("next", "observation")).abs().max() <= 5.0
    assert run.env.statistics().keys() == {
        f"{p}_{s}" for p in ("observation", "return") for s in ("mean", "var", "count")}
    run.eval_env.load_statistics(run.env.statistics())
    run.eval_env.set_training(False)
    frozen = stats(run.eval_env)
    returns = evaluate(run.eval_env, run.algorithm.policy, episodes=2, seed=7)
    assert len(returns) == 2 and all(r >= 8 for r in returns), "unscaled CartPole returns: one per step"
    assert all(torch.equal(frozen[k], v) for k, v in stats(run.eval_env).items())


def test_float64_observations_reach_the_networks_as_float32(tmp_path):
    """MuJoCo envs observe in float64; rlplug's networks compute in float32 (an off-policy agent on the
    TensorDict road failed on HalfCheetah before the cast)."""
    double = {"wrappers": [{"name": "DtypeObservation", "kwargs": {"dtype": "float64"}}]}
    env = make(id="Pendulum-v1", **double)
    assert env.observation_spec["observation"].dtype == torch.float32
    first, _ = rollout(env, 5)
    assert first.dtype == torch.float32
    run = rlplug.Agent.from_recipe(CANONICAL.parent / "pendulum-sac.toml", out=tmp_path / "sac",
                                   **{"env.wrappers": double["wrappers"], "run.total_frames": 64,
                                      "algorithm.learning_starts": 32, "algorithm.batch_size": 16,
                                      "eval.episodes": 1, "loggers": [{"use": "csv"}]})
    assert run.train()["status"] == "finished"


def test_float_bounds_and_float64_observations_build_without_gymnasiums_precision_warnings():
    """A recipe's TOML floats for RescaleAction's bounds, and MuJoCo's float64 observations cast to float32 by
    rlplug, are nobody's mistake: gymnasium's "precision lowered" warnings are not shown for them (every MuJoCo
    run began with two such lines)."""
    pytest.importorskip("mujoco")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(id="Pendulum-v1", num_envs=2, wrappers=[{"name": "RescaleAction",
                                                      "kwargs": {"min_action": -1.0, "max_action": 1.0}}])
        hopper = make(id="Hopper-v5", num_envs=2)
    assert hopper.observation_spec["observation"].dtype == torch.float32
    assert not [w for w in caught if "precision lowered" in str(w.message)], [str(w.message) for w in caught]
