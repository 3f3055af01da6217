"""Seeds trained together (``run --seeds --batched``, ``Agent.from_recipe(seeds=...)``): each seed's update is its
own algorithm's, its envs and networks start as its own run's, a NaN stops one seed alone, resume goes on, and
what cannot be batched is refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

import rlplug
from rlplug.plugins.algorithms.sac.algorithm import SAC
from rlplug.recipe import load
from rlplug.run.batched import BatchedRun
from rlplug.run.trainer import Run
from tests.conftest import CANONICAL, ROOT, built_algorithm, one_line_error, poisoned_env_plugin, rlplug_cli, run_cli

SHORT = ["run.total_frames=1024", "run.checkpoint_every_frames=512", "eval.episodes=2", "eval.every_frames=0"]


@pytest.mark.parametrize("overrides", [
    ["algorithm.epochs=3"],
    ["algorithm.epochs=2", "algorithm.max_grad_norm=0.05"],  # every seed clipped, each by its own norm
    ["algorithm.epochs=2", "algorithm.num_minibatches=4", "algorithm.optimizer=rmsprop"],
    ["algorithm.epochs=2", "algorithm.shared_body=true", "algorithm.critic.hidden=[64, 64]"],  # one body, two heads
])
def test_a_stacked_update_is_each_seeds_own_update(overrides):
    """The batched update against each seed's algorithm updating alone on the same batch, from the same start:
    parameters, optimiser state and metrics equal up to rounding. Catches clipping over all seeds at once,
    a gradient leaking between seeds, an optimiser state not per seed, minibatches not drawn per seed."""
    seeds = [0, 5, 9]
    together_built = [(a, b[0]) for a, b in (built_algorithm(CANONICAL, seed, overrides) for seed in seeds)]
    alone_built = [(a, b[0]) for a, b in (built_algorithm(CANONICAL, seed, overrides) for seed in seeds)]
    algorithms = [a for a, _ in together_built]
    together = algorithms[0].batched_update(algorithms, seeds)
    together.restart([100 + seed for seed in seeds])  # each seed's minibatch order from its own generator
    streams = {}  # alone, each seed's minibatches are drawn from torch's global generator: kept per seed here
    for seed in seeds:
        torch.manual_seed(100 + seed)
        streams[seed] = torch.get_rng_state()
    for _ in range(2):
        metrics = together.update([batch.clone() for _, batch in together_built])
        for (alone, batch), seed, seed_metrics in zip(alone_built, seeds, metrics):
            torch.set_rng_state(streams[seed])
            expected = alone.update(batch.clone())
            streams[seed] = torch.get_rng_state()
            assert seed_metrics.keys() == expected.keys()
            for name, value in expected.items():
                assert seed_metrics[name] == pytest.approx(value, rel=1e-3, abs=1e-5), name
    together.sync()
    for batched, (alone, _) in zip(algorithms, alone_built):
        torch.testing.assert_close(batched.trained.flat.detach(), alone.trained.flat.detach(), rtol=1e-4, atol=1e-5)
        stacked_state, own_state = batched.optimiser.state_dict()["state"][0], alone.optimiser.state_dict()["state"][0]
        for name, value in own_state.items():
            torch.testing.assert_close(stacked_state[name], value, rtol=1e-3, atol=1e-6)


def test_each_seed_starts_exactly_as_its_own_run(tmp_path):
    """Seed 3 among seeds 0 and 3: the same initial parameters and the same first observations of every env
    as a run of seed 3 alone (its envs seeded as that run seeds them)."""
    recipes = [load(CANONICAL, [f"run.seed={seed}"]) for seed in (0, 3)]
    batched = BatchedRun.build(recipes, tmp_path / "batched")
    alone = Run.build(load(CANONICAL, ["run.seed=3"]), tmp_path / "alone")
    try:
        seed_3 = batched.runs[1]
        torch.testing.assert_close(seed_3.algorithm.trained.flat.detach(), alone.algorithm.trained.flat.detach(),
                                   rtol=0, atol=0)
        first = batched.collector.collect()[1]
        assert torch.equal(first["observation"][:, 0], alone.collector.collect()["observation"][:, 0])
        assert not torch.equal(first["observation"][:, 0], batched.collector.collect()[0]["observation"][:, 0])
    finally:
        batched.close()
        alone.close()


#: a plugin's exploration noise with the Noise protocol's required members only (no ``act_on``): DDPG's acting
#: policy then has no array actor, though Pendulum offers the array road
NOISE_WITHOUT_ACT_ON = """
import torch
from tensordict.nn import TensorDictModuleBase

import rlplug


class PlainNoise(TensorDictModuleBase):
    def __init__(self):
        super().__init__()
        self.in_keys, self.out_keys = ["action"], ["action"]

    def forward(self, data):
        return data.set("action", (data.get("action") + 0.1 * torch.randn_like(data.get("action"))).clamp(-2, 2))

    def step(self, frames):
        pass


@rlplug.hookimpl
def rlplug_register_noises(register):
    register("plain-noise", lambda action_spec=None, device="cpu", total_frames=None: PlainNoise())
"""
NOISE_PLUGIN_RECIPE = (ROOT / "recipes" / "pendulum-ddpg.toml", ['algorithm.exploration_noise={use="plain-noise"}'])


def test_refusals_name_what_cannot_be_batched(tmp_path, monkeypatch):
    cases = [
        (ROOT / "recipes" / "pendulum-ddpg-lstm.toml", [], "recurrent", "algorithm.policy"),
        (ROOT / "recipes" / "pendulum-sac.toml", [], "does not declare batched_update", "algorithm.use"),
        (ROOT / "recipes" / "cartpole-ppo-kl.toml", [], "cannot compute several seeds at once", "algorithm.loss"),
        (ROOT / "recipes" / "mountaincarcontinuous-sac-gsde.toml", [], "gSDE", "algorithm.use_sde"),
        (ROOT / "recipes" / "pendulum-ppo.toml", ["algorithm.use_sde=true"], "gSDE", "algorithm.use_sde"),
        (CANONICAL, ["runner.use=ray"], "runner cannot", "runner.use"),
        (CANONICAL, ["env.transforms=[{use = \"StepCounter\"}]"], "array road", "env"),
    ]
    for index, (recipe, overrides, message, path) in enumerate(cases):
        recipes = [load(recipe, [f"run.seed={seed}", *overrides]) for seed in (0, 1)]
        with monkeypatch.context() as patch, pytest.raises(rlplug.UserError, match=message) as caught:
            if "batched_update" in message:  # every algorithm here declares it: SAC made one without
                patch.setattr(SAC, "batched_update", None, raising=False)
            BatchedRun.build(recipes, tmp_path / str(index))
        assert caught.value.path == path
        assert not (tmp_path / str(index) / "seed-0").exists(), "a refused run leaves no directory"


def test_the_command_line_refuses_in_one_line(tmp_path, install):
    one_line_error(run_cli("run", str(CANONICAL), "--batched", "--out", str(tmp_path / "a")), "--seeds")
    where = install({"plainnoise": NOISE_WITHOUT_ACT_ON})
    recipe, overrides = NOISE_PLUGIN_RECIPE
    one_line_error(rlplug_cli("run", str(recipe), "--seeds", "0-1", "--batched", "--set", *overrides,
                              "--out", str(tmp_path / "b"), path=where), "pendulum-ddpg.toml",
                   "no array actor (PlainNoise after its network has no act_on)", "algorithm", "without --batched")
    assert not (tmp_path / "b").exists(), "a refused run leaves no directory"


def test_agent_trains_seeds_together(tmp_path):
    agents = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "api", seeds=[2, 4], batched=True,
                                      eval={"episodes": 2},
                                      run={"total_frames": 1024, "checkpoint_every_frames": 512})
    summaries = agents.train(max_frames=512)
    assert {seed: s["status"] for seed, s in summaries.items()} == {2: "paused", 4: "paused"}
    summaries = agents.train()
    assert {seed: (s["frames"], s["seed"]) for seed, s in summaries.items()} == {2: (1024, 2), 4: (1024, 4)}
    assert agents[4].select_action(torch.zeros(4).numpy()) in (0, 1)
    loaded = rlplug.Agent.load(tmp_path / "api" / "seed-4" / "checkpoint.pt", out=tmp_path / "loaded")
    assert loaded.frames == 1024
    with pytest.raises(rlplug.UserError, match="distinct non-negative"):
        rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "bad", seeds=[1, 1])


@pytest.mark.slow
def test_batched_run_writes_each_seeds_directory_and_resumes(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--seeds", "0-2", "--batched", "--out", str(out),
                     *[arg for o in SHORT for arg in ("--set", o)])
    assert result.returncode == 0, result.stderr
    aggregate = json.loads((out / "aggregate.json").read_text())
    assert set(aggregate["seeds"]) == {"0", "1", "2"} and (out / "curve.png").is_file()
    for seed in (0, 1, 2):
        directory = out / f"seed-{seed}"
        summary = json.loads((directory / "summary.json").read_text())
        assert (summary["status"], summary["frames"], summary["seed"]) == ("finished", 1024, seed)
        assert f"seed = {seed}" in (directory / "recipe.toml").read_text()
        assert (directory / "metrics.csv").is_file() and (directory / "checkpoints").is_dir()
        assert torch.load(directory / "checkpoint.pt", weights_only=True)["frames"] == 1024
    result = run_cli("resume", str(out), "--set", "run.total_frames=1536")
    assert result.returncode == 0, result.stderr
    assert "seeds 0, 1, 2, together" in result.stdout
    assert {json.loads((out / f"seed-{s}" / "summary.json").read_text())["frames"] for s in (0, 1, 2)} == {1536}
    assert "nothing to do" in run_cli("resume", str(out)).stdout
    evaluated = run_cli("eval", str(out / "seed-1"), "--episodes", "2")  # a seed's directory is a run's
    assert evaluated.returncode == 0, evaluated.stderr


POISONED_ENV = poisoned_env_plugin("CartPole-v1", "poisoned-cartpole", after_steps=700)


@pytest.mark.slow
def test_a_diverging_seed_stops_alone_with_its_last_good_checkpoint(tmp_path, install):
    where = install({"poisoned": POISONED_ENV})
    recipe = tmp_path / "poisoned.toml"
    recipe.write_text(CANONICAL.read_text().replace('use = "gym"\nid = "CartPole-v1"\nnum_envs = 8',
                                                    'use = "poisoned-cartpole"\npoisoned_seed = 1'))
    out = tmp_path / "run"
    result = rlplug_cli("run", str(recipe), "--seeds", "0-2", "--batched", "--out", str(out),
                        "--set", "run.total_frames=2048", "--set", "run.checkpoint_every_frames=512",
                        "--set", "eval.episodes=1", path=where, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "seed 1: training diverged" in result.stderr and "the other seeds go on" in result.stderr
    assert "seed 1 diverged" in result.stderr.splitlines()[-1]
    diverged = json.loads((out / "seed-1" / "summary.json").read_text())
    assert diverged["status"] == "diverged" and diverged["frames"] == 768
    kept = torch.load(out / "seed-1" / "checkpoint.pt", weights_only=True)
    assert kept["frames"] == 512
    assert all(torch.isfinite(value).all() for value in kept["algorithm"]["policy"].values())
    for seed in (0, 2):
        assert json.loads((out / f"seed-{seed}" / "summary.json").read_text())["status"] == "finished"
    assert set(json.loads((out / "aggregate.json").read_text())["seeds"]) == {"0", "2"}
    result = rlplug_cli("resume", str(out), "--set", "run.total_frames=2560", path=where, timeout=300)
    assert result.returncode == 0 and "seeds 0, 2, together" in result.stdout, result.stderr
