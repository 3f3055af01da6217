"""CartPole's copies stepped as one array (gymnasium's vector entry point): ``env.vectorization = "vector"`` gives
the episodes of ``"sync"`` step for step on both stepping roads, and ``--batched`` steps every seed's copies as
one array with each seed's batches those of its envs stepped alone; what the array cannot step is refused in
one line or left to the seed-by-seed road."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlplug
from rlplug.plugins.envs import workers
from rlplug.recipe import load
from rlplug.run.batched import BatchedRun
from tests.conftest import CANONICAL, one_line_error, run_cli

#: a short time limit, so that episodes are also truncated (and both kinds of end restart copies)
SHORT_EPISODES = 40


def gym_env(vectorization: str, num_envs: int = 6, **options):
    return rlplug.make("env", "gym", id="CartPole-v1", num_envs=num_envs, vectorization=vectorization,
                       max_episode_steps=SHORT_EPISODES, **options)


@pytest.mark.parametrize("seed", [0, 7])
def test_the_array_road_gives_syncs_episodes_step_for_step(seed):
    """Observations (the episodes' last and the next ones' first), rewards, terminations, truncations over a few
    hundred steps of random actions, with a reset from another seed halfway."""
    envs = {mode: gym_env(mode) for mode in ("sync", "vector")}
    actions = np.random.default_rng(seed).integers(0, 2, size=(400, 6))
    steps = {}
    for mode, env in envs.items():
        seen = [env.reset_arrays(seed)]
        for t, action in enumerate(actions):
            if t == 200:
                seen.append(env.reset_arrays(seed + 100))
            seen.extend(env.step_arrays(action))
        steps[mode] = seen
        env.close()
    ends = sum(int(t.sum()) for t in steps["sync"][3::5] + steps["sync"][4::5])
    truncations = sum(int(t.sum()) for t in steps["sync"][4::5])
    assert ends > 50 and truncations > 0, "the steps restart copies, after terminations and truncations"
    for ours, theirs in zip(steps["vector"], steps["sync"], strict=True):
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)


def test_the_tensordict_road_gives_syncs_episodes():
    """TorchRL's rollout (its own autoreset, the final observations swapped in) on both, the same random actions."""
    rollouts = []
    for mode in ("sync", "vector"):
        env = gym_env(mode, num_envs=4)
        env.set_seed(3)
        torch.manual_seed(0)
        rollouts.append(env.rollout(300, break_when_any_done=False))
        env.close()
    sync, vector = rollouts
    assert int(sync["next", "done"].sum()) > 20
    for key in sync.keys(True, True):
        assert torch.equal(vector[key], sync[key]), key


def test_the_array_copies_take_the_sync_autoreset():
    """gymnasium's array env restarts ended copies at the next step, from one stream for all; ArrayCopies restarts
    them in the step that ends them, each from its own: same-step, as SyncVectorEnv with SAME_STEP."""
    copies = workers.vector_env(workers.CopyMaker("CartPole-v1", {}, []), 3, "vector")
    assert copies.autoreset_mode == gym.vector.AutoresetMode.SAME_STEP
    copies.reset(seed=1)
    for _ in range(100):  # pushing right only: every pole falls within a few dozen steps
        observation, reward, terminated, truncated, info = copies.step(np.ones(3, dtype=np.int64))
        if terminated.any():
            break
    ended = np.flatnonzero(terminated)
    assert ended.size and info["_final_obs"][ended].all() and reward[ended].tolist() == [1.0] * ended.size
    for index in ended:
        assert abs(info["final_obs"][index][2]) > 0.2  # the pole's angle past the limit: the last observation
        assert np.abs(observation[index]).max() <= 0.05  # and a new episode's first, in the same step
    copies.close()


@pytest.mark.parametrize("options, key", [({"frame_stack": 2}, "env.frame_stack"),
                                          ({"wrappers": [{"name": "TimeAwareObservation"}]}, "env.wrappers")])
def test_per_copy_options_are_refused(options, key):
    with pytest.raises(rlplug.UserError, match=f"no per-copy option; unset {key}") as caught:
        gym_env("vector", **options)
    assert caught.value.path == "env.vectorization"


def test_an_id_without_an_array_env_is_refused_in_one_line(tmp_path):
    out = tmp_path / "run"
    line = one_line_error(run_cli("run", str(CANONICAL), "--out", str(out), "--set", "env.id='Acrobot-v1'",
                                  "--set", "env.vectorization='vector'"),
                          "env.vectorization", "Acrobot-v1 does not have", "CartPole-v1", "use 'sync'")
    assert "Traceback" not in line and not out.exists(), "refused before the run directory exists"


def batched(recipe_overrides: list[str], out):
    recipes = [load(CANONICAL, [f"run.seed={seed}", *recipe_overrides]) for seed in (0, 3, 5)]
    return BatchedRun.build(recipes, out)


def test_batched_seeds_step_as_one_array_with_each_seeds_own_batches(tmp_path):
    """The same seeds collected with every copy in one array and seed by seed (each env stepped alone): equal
    batches, through episode ends, a seed's restart from a checkpoint's seed, and a seed that leaves."""
    together, apart = batched([], tmp_path / "together"), batched([], tmp_path / "apart")
    try:
        assert together.collector.arrays is not None
        apart.collector.arrays = None  # the seed-by-seed road: each seed's env.step_arrays
        ends = 0
        for collection in range(6):
            if collection == 3:
                for run in (together, apart):
                    run.together.keep([0, 2])
                    run.collector.keep([0, 2], run.together.actor())
            if collection == 4:
                for run in (together, apart):
                    run.collector.collectors[1].restart(seed=11)
            batches = []
            for run in (together, apart):
                torch.manual_seed(collection)  # the actor's draws alike on both
                batches.append(run.collector.collect())
            for ours, theirs in zip(*batches, strict=True):
                for key in theirs.keys(True, True):
                    assert torch.equal(ours[key], theirs[key]), (collection, key)
                ends += int(theirs["next", "done"].sum())
        assert ends > 50
    finally:
        together.close()
        apart.close()


@pytest.mark.parametrize("overrides", [["env.normalize_observations='running'"], ["env.vectorization='async'"]])
def test_batched_envs_the_array_cannot_step_go_seed_by_seed(tmp_path, overrides):
    """Running statistics are each seed's own; copies in worker processes are not here to be computed."""
    run = batched(overrides, tmp_path / "run")
    try:
        assert run.collector.arrays is None
        assert all(batch.numel() == 256 for batch in run.collector.collect())
    finally:
        run.close()


@pytest.mark.slow
def test_a_vector_run_trains_as_the_sync_run(tmp_path):
    """The whole run through the CLI: the same seed trains to the very same parameters and returns."""
    results = {}
    for mode in ("sync", "vector"):
        out = tmp_path / mode
        result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.total_frames=1024",
                         "--set", "eval.episodes=2", "--set", f"env.vectorization='{mode}'")
        assert result.returncode == 0, result.stderr
        checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
        results[mode] = (checkpoint["algorithm"]["policy"], json.loads((out / "summary.json").read_text()))
    (sync_policy, sync_summary), (vector_policy, vector_summary) = results["sync"], results["vector"]
    for name, value in sync_policy.items():
        assert torch.equal(vector_policy[name], value), name
    assert vector_summary["eval_return_mean"] == sync_summary["eval_return_mean"]


# -- acting for every seed at once ---------------------------------------------------------------------------


def test_a_plain_mlp_acts_for_every_seed_as_vmap_does():
    """Acting with the seeds' stacked parameters by batched matrix products (no vmap per step): vmap's numbers,
    each seed's row its own network's; anything but a plain MLP is left to vmap."""
    from torch import nn
    from torch.func import functional_call

    from rlplug.core.stacked import stacked_mlp

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))
    names = [name for name, _ in net.named_parameters()]
    position = {id(p): i for i, p in enumerate(net.parameters())}
    leaves = [torch.randn(5, *p.shape) for p in net.parameters()]
    observation = torch.randn(5, 8, 4)
    direct = stacked_mlp(net, position)
    assert direct is not None
    expected = torch.vmap(lambda ls, o: functional_call(net, dict(zip(names, ls)), (o,)))(leaves, observation)
    assert torch.equal(direct(leaves, observation), expected)
    for seed in range(5):
        own = functional_call(net, {name: leaf[seed] for name, leaf in zip(names, leaves)}, (observation[seed],))
        torch.testing.assert_close(direct(leaves, observation)[seed], own)
    normalised = nn.Sequential(nn.Linear(4, 32), nn.LayerNorm(32), nn.Linear(32, 3))
    assert stacked_mlp(normalised, {id(p): i for i, p in enumerate(normalised.parameters())}) is None


def test_an_env_whose_array_step_a_plugin_replaced_goes_seed_by_seed(tmp_path, monkeypatch):
    """A plugin wrapping the gym env's step_arrays on its instance (tests/conftest.py's poisoned env does) has
    its step taken, not the array's."""
    from rlplug.plugins.envs import gym as gym_module

    seen = []
    build = gym_module.make_gym_vector_env

    def watched_env(*args, **kwargs):
        env = build(*args, **kwargs)
        step = env.step_arrays

        def watched(action):
            seen.append(action.shape)
            return step(action)

        env.step_arrays = watched
        return env

    monkeypatch.setattr(gym_module, "make_gym_vector_env", watched_env)
    run = batched([], tmp_path / "run")
    try:
        assert run.collector.arrays is None
        run.collector.collect()
        assert len(seen) == 3 * 32, "each seed's own step, at each of the batch's 32 steps"
    finally:
        run.close()
