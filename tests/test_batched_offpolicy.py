"""Off-policy seeds trained together (``run --seeds --batched``: SAC, DDPG, TD3, TQC, DQN): each seed's gradient steps
are its own algorithm's (parameters, targets, entropy coefficient, optimiser state), DQN's targets move by each
seed's frames into the stack, acting keeps each seed's exploration (noise, epsilon), a NaN stops one seed alone,
resume goes on, and what cannot be batched is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.distributions.normal as normal_module
from torchrl.envs.utils import ExplorationType, set_exploration_type

import rlplug
from rlplug.core.acting import ArrayActor, TanhNormalSampling
from rlplug.plugins.algorithms.offpolicy import batched as offpolicy_batched
from rlplug.recipe import load
from rlplug.run.batched import BatchedRun
from tests.conftest import ROOT, built_algorithm, one_line_error, poisoned_env_plugin, rlplug_cli, run_cli

RECIPES = ROOT / "recipes"
SAC = RECIPES / "pendulum-sac.toml"
DQN = RECIPES / "cartpole-dqn.toml"
#: small updates: 64 frames stored, 3 gradient steps of 32 samples
SMALL = ["algorithm.steps_per_update=64", "algorithm.gradient_steps=3", "algorithm.batch_size=32",
         "algorithm.learning_starts=0"]


def fixed_noise(shape, dtype, device) -> torch.Tensor:
    """The same reparameterisation noise alone and together (a seed's own draws come from torch's generator
    alone and from vmap's together, which cannot be compared)."""
    count = torch.Size(shape).numel()
    return torch.linspace(-1.5, 1.5, count, dtype=dtype, device=device).reshape(shape)


def own_state(algorithm) -> dict[str, torch.Tensor]:
    """Every trained and target parameter of the loss, by name, and each learner's optimiser moments."""
    state = {name: p.detach().clone() for name, p in algorithm.loss_module.named_parameters()}
    for name, optimiser in algorithm.learners.optimisers.items():
        for key, value in optimiser.state_dict()["state"][0].items():
            state[f"{name}.{key}"] = value.clone()
    return state


@pytest.mark.parametrize("recipe, overrides", [
    (SAC, []),
    (SAC, ["algorithm.max_grad_norm=0.5", "algorithm.lr_schedule='linear'"]),  # clipped per seed
    (SAC, ["algorithm.learn_entropy_coef=false", "algorithm.initial_entropy_coef=0.2"]),  # alpha fixed
    (RECIPES / "pendulum-ddpg.toml", []),
    (RECIPES / "pendulum-td3.toml", ["algorithm.target_policy_noise=0.0"]),  # the actor and targets every 2nd step
    (SAC, ["algorithm.replay_buffer.use='prioritized'"]),  # each seed's priorities from its own TD errors
    (RECIPES / "pendulum-tqc.toml", ["algorithm.quantiles=5", "algorithm.critics=3",
                                      "algorithm.replay_buffer.use='prioritized'"]),  # the atoms sorted per seed
    (DQN, []),  # the targets copied by frames, before each update's steps: the second update's read the copy
    (DQN, ["algorithm.tau=0.3", "algorithm.target_update_interval=40", "algorithm.double=false",
           "algorithm.replay_buffer.use='prioritized'"]),  # polyak steps of 1 or 2 intervals per update
])
def test_a_stacked_gradient_step_is_each_seeds_own(recipe, overrides, monkeypatch):
    """Two updates (six gradient steps) of seeds 0, 5 and 9 together against each seed's algorithm alone on the
    same batches, from the same start: every parameter, target, entropy coefficient, optimiser moment and metric
    equal up to rounding. Catches a gradient leaking between seeds or between learners (the actor's term into
    the critic), clipping over all seeds, optimiser state not per seed, targets moved wrong or not per seed."""
    monkeypatch.setattr(normal_module, "_standard_normal", fixed_noise)
    monkeypatch.setattr(offpolicy_batched, "_standard_normal", fixed_noise)
    monkeypatch.setattr(TanhNormalSampling, "noise", staticmethod(lambda shape, like: fixed_noise(shape, like.dtype,
                                                                                                 like.device)))
    seeds = [0, 5, 9]
    overrides = [*SMALL, *overrides]
    together_built = [built_algorithm(recipe, seed, overrides, batches=2) for seed in seeds]
    alone_built = [built_algorithm(recipe, seed, overrides, batches=2) for seed in seeds]
    algorithms = [a for a, _ in together_built]
    together = algorithms[0].batched_update(algorithms, seeds)
    for update in range(2):
        metrics = together.update([batches[update].clone() for _, batches in together_built])
        for (alone, batches), seed_metrics in zip(alone_built, metrics):
            expected = alone.update(batches[update].clone())
            assert seed_metrics.keys() == expected.keys()
            for name, value in expected.items():
                assert seed_metrics[name] == pytest.approx(value, rel=1e-3, abs=1e-5), name
    together.sync()
    for batched, (alone, _) in zip(algorithms, alone_built):
        assert batched.steps == alone.steps == 6
        mine, theirs = own_state(batched), own_state(alone)
        assert mine.keys() == theirs.keys()
        for name, value in theirs.items():
            torch.testing.assert_close(mine[name], value, rtol=1e-4, atol=1e-5, msg=name)
    moved = own_state(algorithms[1])
    assert any(not torch.equal(moved[name], value) for name, value in own_state(alone_built[0][0]).items()
               if name.startswith("target")), "each seed's targets are its own"


def test_each_seed_draws_its_own_noise():
    """Together, two seeds with the same parameters and the same sample get different reparameterised actions
    (vmap's randomness per seed), so their losses differ."""
    algorithms = [built_algorithm(SAC, 0, SMALL)[0] for _ in range(2)]
    batch = built_algorithm(SAC, 0, SMALL)[1][0]
    together = algorithms[0].batched_update(algorithms, [0, 1])
    metrics = together.update([batch.clone(), batch.clone()])
    assert metrics[0]["loss_actor"] != metrics[1]["loss_actor"]


def test_acting_keeps_each_seeds_exploration():
    """DDPG's stacked actor: each seed's own network (its deterministic action), then its own random-action
    phase and noise; an exploring seed's actions are not another's."""
    algorithms = [built_algorithm(RECIPES / "pendulum-ddpg.toml", seed, SMALL)[0] for seed in (0, 1)]
    together = algorithms[0].batched_update(algorithms, [0, 1])
    actor = together.actor()
    observation = torch.randn(2, 1, 3).numpy()
    for algorithm in algorithms:
        algorithm.random_actions.active = False
        algorithm.noise.initial_sigma = 0.0
    action, _ = actor.act(observation)
    for k, algorithm in enumerate(algorithms):
        expected = algorithm.actor.module(torch.from_numpy(observation[k]))
        torch.testing.assert_close(torch.from_numpy(action[k]), expected.clamp(-2, 2))
    algorithms[1].random_actions.active = True  # seed 1 still in its random phase: uniform in the bounds
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        action, _ = actor.act(observation)
    torch.testing.assert_close(torch.from_numpy(action[0]), algorithms[0].actor.module(
        torch.from_numpy(observation[0])).detach().clamp(-2, 2))
    assert not torch.allclose(torch.from_numpy(action[1]), algorithms[1].actor.module(
        torch.from_numpy(observation[1])).detach().clamp(-2, 2))


def test_sac_seeds_act_together_in_and_after_their_random_phase(monkeypatch):
    """SAC with random first frames (its stochastic actor, then random actions): each seed's own sample and its
    log-probability, as its own array actor gives them alone, until its random phase replaces the sample by a
    uniform action; evaluation takes each seed's mode. Catches a stacked actor using one seed's parameters for
    all, a phase switched for every seed, a log-probability dropped from the batch (the TensorDict road writes
    the sample's)."""
    def envs_noise(shape, like):  # the same noise for each seed's envs, alone ([envs, 1]) or stacked ([seeds, ...])
        return fixed_noise(shape[-2:], like.dtype, like.device).expand(shape)

    monkeypatch.setattr(TanhNormalSampling, "noise", staticmethod(envs_noise))
    algorithms = [built_algorithm(SAC, seed, [*SMALL, "algorithm.random_frames=100"])[0] for seed in (0, 1)]
    together = algorithms[0].batched_update(algorithms, [0, 1])
    actor = together.actor()
    assert actor.log_prob_key == "action_log_prob"
    observation = torch.randn(2, 4, 3).numpy()
    alone = [ArrayActor.for_policy(a.policy, "cpu", 0) for a in algorithms]
    for algorithm in algorithms:
        algorithm.random_actions.active = False
    with set_exploration_type(ExplorationType.RANDOM):
        sampled = [a.act(observation[k]) for k, a in enumerate(alone)]
        action, log_prob = actor.act(observation)
        for k in range(2):
            torch.testing.assert_close(torch.from_numpy(action[k]), torch.from_numpy(sampled[k][0]))
        assert not np.allclose(sampled[0][0], sampled[1][0]), "the seeds' networks differ"
        algorithms[1].random_actions.active = True  # seed 1 still in its random phase: uniform in the bounds
        action, log_prob = actor.act(observation)
    torch.testing.assert_close(torch.from_numpy(action[0]), torch.from_numpy(sampled[0][0]))
    assert not np.allclose(action[1], sampled[1][0]) and np.abs(action[1]).max() <= 2.0
    for k in range(2):  # the sample's log-probability, whatever the random phase made of the action
        torch.testing.assert_close(torch.from_numpy(log_prob[k]), torch.from_numpy(sampled[k][1]))
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        mode, _ = actor.act(observation, deterministic=True)
        for k, own in enumerate(alone):
            torch.testing.assert_close(torch.from_numpy(mode[k]), torch.from_numpy(own.act(observation[k], True)[0]))


def test_dqn_targets_move_by_each_seeds_frames_into_the_stack():
    """DQN moves its targets in ``before_update``, each seed its own algorithm's polyak step on its target
    network, whose parameters are views of the stacked targets the batched loss reads: the step lands in the
    stack, row by row, from each seed's own online row. No gradient step here (learning has not started)."""
    overrides = [*SMALL, "algorithm.learning_starts=100000", "algorithm.tau=0.25",
                 "algorithm.target_update_interval=64"]
    built = [built_algorithm(DQN, seed, overrides, batches=2) for seed in (0, 1)]
    algorithms = [a for a, _ in built]
    together = algorithms[0].batched_update(algorithms, [0, 1])
    online, target = together.stacks["q"].stacked, together.targets["q"].stacked
    with torch.no_grad():
        online.add_(torch.tensor([[0.5], [-1.0]]))  # each seed's online network away from its target
    before, wanted = target.detach().clone(), online.detach().clone()
    together.update([batches[0] for _, batches in built])
    torch.testing.assert_close(target.detach(), before.lerp(wanted, 0.25))
    for row, algorithm in enumerate(algorithms):  # the seed's own modules read the same values
        own = torch.cat([p.detach().reshape(-1) for p in algorithm.loss_module.target_value_network.parameters()])
        assert torch.equal(own, target.detach()[row])
    together.update([batches[1] for _, batches in built])  # frames 64 -> 128: one interval more, one step more
    torch.testing.assert_close(target.detach(), before.lerp(wanted, 1 - 0.75 ** 2))


def test_dqn_seeds_act_greedily_on_their_own_q_values_each_with_its_own_epsilon():
    """DQN's stacked actor: each seed's own Q-network, then its own epsilon-greedy stage (seed 0 greedy, seed 1
    uniformly random while exploring); the env is handed action indices, the batch records them one-hot."""
    algorithms = [built_algorithm(DQN, seed, SMALL)[0] for seed in (0, 1)]
    together = algorithms[0].batched_update(algorithms, [0, 1])
    actor = together.actor()
    assert actor.one_hot and actor.action_key == "action"
    observation = torch.randn(2, 64, 4).numpy()
    greedy = [algorithm.network.module(torch.from_numpy(observation[k])).argmax(-1).numpy()
              for k, algorithm in enumerate(algorithms)]
    assert (greedy[0] != greedy[1]).any(), "the seeds' networks differ"
    for algorithm, epsilon in zip(algorithms, (0.0, 1.0)):
        algorithm.random_actions.active = False
        algorithm.greedy.epsilon = epsilon
    with set_exploration_type(ExplorationType.RANDOM):
        action, log_prob = actor.act(observation)
    assert log_prob is None and action.shape == (2, 64) and set(action.reshape(-1).tolist()) <= {0, 1}
    assert (action[0] == greedy[0]).all()
    assert (action[1] != greedy[1]).any() and (action[1] == greedy[1]).any()
    with set_exploration_type(ExplorationType.DETERMINISTIC):  # evaluation: greedy, whatever epsilon is
        action, _ = actor.act(observation)
    assert (action[0] == greedy[0]).all() and (action[1] == greedy[1]).all()


def test_refusals_name_what_cannot_be_batched(tmp_path):
    cases = [
        (SAC, ["algorithm.loss.use='SACLoss'"], "cannot compute several seeds at once", "algorithm.loss"),
        (SAC, ["algorithm.observation_preprocessor='running-standard-scaler'"], "preprocessor",
         "algorithm.observation_preprocessor"),
    ]
    for index, (recipe, overrides, message, path) in enumerate(cases):
        recipes = [load(recipe, [f"run.seed={seed}", *overrides]) for seed in (0, 1)]
        with pytest.raises(rlplug.UserError, match=message) as caught:
            BatchedRun.build(recipes, tmp_path / str(index))
        assert caught.value.path == path
        assert not (tmp_path / str(index) / "seed-0").exists(), "a refused run leaves no directory"


def test_the_command_line_refuses_in_one_line(tmp_path):
    one_line_error(run_cli("run", str(SAC), "--seeds", "0-1", "--batched", "--set", "algorithm.loss.use='SACLoss'",
                           "--out", str(tmp_path / "b")), "SACLoss", "algorithm.loss", "without --batched")
    assert not (tmp_path / "b" / "seed-0").exists()


SHORT_SAC = ["run.total_frames=600", "run.checkpoint_every_frames=300", "eval.episodes=1", "eval.every_frames=0",
             "algorithm.learning_starts=100", "algorithm.batch_size=64"]
#: DQN by 64 frames: 10 updates of 4 gradient steps, the first learning at frame 128 (36 steps in all)
SHORT_DQN = ["run.total_frames=640", "run.checkpoint_every_frames=320", "eval.episodes=1", "eval.every_frames=0",
             "algorithm.steps_per_update=64", "algorithm.gradient_steps=4", "algorithm.learning_starts=128",
             "algorithm.batch_size=32"]
#: recipe, short run, its frames, the gradient steps taken by then, the checkpoint before the end, and the frames
#: a resume goes on to
SHORT = {"sac": (SAC, SHORT_SAC, 600, 501, 300, 900), "dqn": (DQN, SHORT_DQN, 640, 36, 320, 960),
         # random actions until frame 400: the stacked stochastic actor then each seed's phase, checkpointed inside it
         "sac-random-phase": (SAC, [*SHORT_SAC, "algorithm.random_frames=400"], 600, 501, 300, 900)}


def cli_sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", sorted(SHORT))
def test_batched_off_policy_writes_each_seeds_directory_and_resumes(tmp_path, algorithm):
    recipe, overrides, frames, steps, _, resumed = SHORT[algorithm]
    out = tmp_path / "run"
    result = run_cli("run", str(recipe), "--seeds", "0-1", "--batched", "--out", str(out), *cli_sets(overrides))
    assert result.returncode == 0, result.stderr
    assert set(json.loads((out / "aggregate.json").read_text())["seeds"]) == {"0", "1"}
    for seed in (0, 1):
        directory = out / f"seed-{seed}"
        summary = json.loads((directory / "summary.json").read_text())
        assert (summary["status"], summary["frames"], summary["seed"]) == ("finished", frames, seed)
        assert (directory / "metrics.csv").is_file()
        checkpoint = torch.load(directory / "checkpoint.pt", weights_only=True)
        assert checkpoint["frames"] == frames and checkpoint["algorithm"]["steps"] == steps
    result = run_cli("resume", str(out), "--set", f"run.total_frames={resumed}")
    assert result.returncode == 0, result.stderr
    assert "seeds 0, 1, together" in result.stdout
    assert {json.loads((out / f"seed-{s}" / "summary.json").read_text())["frames"] for s in (0, 1)} == {resumed}
    evaluated = run_cli("eval", str(out / "seed-1"), "--episodes", "1")  # a seed's directory is a run's
    assert evaluated.returncode == 0, evaluated.stderr


#: recipe, its env's table, and the plugin registering the env whose rewards turn NaN after 400 steps in seed 1
POISONED = {
    "sac": (SAC, 'use = "gym"\nid = "Pendulum-v1"\nnum_envs = 1',
            poisoned_env_plugin("Pendulum-v1", "poisoned-env", after_steps=400)),
    "dqn": (DQN, 'use = "gym"\nid = "CartPole-v1"\nnum_envs = 1',
            poisoned_env_plugin("CartPole-v1", "poisoned-env", after_steps=400)),
}


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", sorted(POISONED))
def test_a_diverging_seed_stops_alone_with_its_last_good_checkpoint(tmp_path, install, algorithm):
    recipe_path, env_table, plugin = POISONED[algorithm]
    _, overrides, frames, _, checkpoint, resumed = SHORT[algorithm]
    where = install({"poisoned": plugin})
    recipe = tmp_path / "poisoned.toml"
    text = recipe_path.read_text()
    assert env_table in text
    recipe.write_text(text.replace(env_table, 'use = "poisoned-env"\npoisoned_seed = 1'))
    out = tmp_path / "run"
    result = rlplug_cli("run", str(recipe), "--seeds", "0-2", "--batched", "--out", str(out), *cli_sets(overrides),
                        path=where, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "seed 1: training diverged" in result.stderr and "the other seeds go on" in result.stderr
    diverged = json.loads((out / "seed-1" / "summary.json").read_text())
    # the NaN reward is stored at frame 401; it breaks the loss once a minibatch samples it
    assert diverged["status"] == "diverged" and 401 <= diverged["frames"] < frames
    kept = torch.load(out / "seed-1" / "checkpoint.pt", weights_only=True)
    assert kept["frames"] == checkpoint
    assert all(torch.isfinite(value).all() for value in kept["algorithm"]["loss"].values())
    for seed in (0, 2):
        assert json.loads((out / f"seed-{seed}" / "summary.json").read_text())["status"] == "finished"
    result = rlplug_cli("resume", str(out), "--set", f"run.total_frames={resumed}", path=where, timeout=300)
    assert result.returncode == 0 and "seeds 0, 2, together" in result.stdout, result.stderr
