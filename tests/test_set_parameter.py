"""Parameters changed while a run goes on: ``update_algorithm_parameter`` on the algorithms and on
``rlplug.Agent`` (each family's known effect at the next update), refusals in one line, checkpoints keeping
the changes, and ``python -m rlplug set`` on a run training in another process."""

from __future__ import annotations

import csv
import json
import signal
import time
from pathlib import Path

import pytest
import torch
from conftest import CANONICAL, ROOT, SHORT, one_line_error, run_cli, start_cli, wait_for

import rlplug
from rlplug.errors import UserError
from rlplug.run import checkpoints

pytestmark = pytest.mark.slow  # each test trains, or runs the command line

RECIPES = ROOT / "recipes"
#: the canonical recipe with a constant learning rate and clip range, so their values are the ones set
CONSTANT = {"algorithm.anneal_lr": False, "algorithm.anneal_clip": False, "run.total_frames": 2048}


def agent(tmp_path: Path, recipe: Path = CANONICAL, **overrides) -> rlplug.Agent:
    built = rlplug.Agent.from_recipe(recipe, out=tmp_path / "run", **overrides)
    assert isinstance(built, rlplug.Agent)
    return built


def test_ppo_lr_clip_and_entropy_take_effect_at_the_next_update(tmp_path):
    ppo = agent(tmp_path, **CONSTANT)
    algorithm = ppo.run.algorithm
    ppo.train(max_iters=1)
    ppo.update_algorithm_parameter("lr", 1e-4)
    ppo.update_algorithm_parameter("clip_epsilon", 0.05)
    ppo.update_algorithm_parameter("entropy_coef", 0.01)
    ppo.train(max_iters=1)
    assert algorithm.optimiser.param_groups[0]["lr"] == pytest.approx(1e-4)
    assert float(algorithm.loss_module.clip_epsilon) == pytest.approx(0.05)  # what the loss clips with
    assert algorithm.loss_module.entropy_coef == pytest.approx(0.01)
    assert algorithm.config.lr == 1e-4  # the config replaced, still frozen
    rows = [json.loads(line) for line in (ppo.run.run_dir / "parameters.jsonl").read_text().splitlines()]
    assert [(r["name"], r["old"], r["new"]) for r in rows] == [
        ("algorithm.lr", 1e-3, 1e-4), ("algorithm.clip_epsilon", 0.2, 0.05), ("algorithm.entropy_coef", 0.0, 0.01)]
    metrics = list(csv.DictReader((ppo.run.run_dir / "metrics.csv").open()))
    assert [float(r["algorithm.lr"]) for r in metrics if r.get("algorithm.lr")] == [1e-4]
    ppo.close()


def test_torchrl_ppo_loss_takes_the_entropy_coefficient(tmp_path):
    ppo = agent(tmp_path, **CONSTANT, **{"algorithm.loss": {"use": "ClipPPOLoss"}})
    ppo.update_algorithm_parameter("entropy_coef", 0.02)
    assert float(ppo.run.algorithm.loss_module.entropy_coeff) == pytest.approx(0.02)
    ppo.close()


def test_ddpg_noise_sigma(tmp_path):
    ddpg = agent(tmp_path, RECIPES / "pendulum-ddpg.toml",
                 **{"run.total_frames": 256, "algorithm.learning_starts": 64})
    noise = ddpg.run.algorithm.noise
    assert noise.sigma == pytest.approx(0.1)
    ddpg.update_algorithm_parameter("exploration_noise.sigma", 0.4)
    ddpg.train(max_iters=2)
    assert noise.sigma == pytest.approx(0.4)
    assert ddpg.run.algorithm.config.exploration_noise.params["sigma"] == 0.4
    ddpg.close()


def test_what_the_built_loss_keeps_no_copy_of_is_refused_and_left_as_it_was(tmp_path):
    ddpg = agent(tmp_path, RECIPES / "pendulum-ddpg.toml", **{"algorithm.loss": {"use": "DDPGLoss"}})
    with pytest.raises(UserError, match="algorithm.gamma: the loss DDPGLoss keeps no gamma"):
        ddpg.update_algorithm_parameter("gamma", 0.9)
    assert ddpg.run.algorithm.config.gamma == 0.98 and not (ddpg.run.run_dir / "parameters.jsonl").exists()
    ddpg.close()


def test_dqn_epsilon_and_sac_learning_rates(tmp_path):
    dqn = agent(tmp_path / "dqn", RECIPES / "cartpole-dqn.toml", **{"run.total_frames": 1024})
    dqn.update_algorithm_parameter("epsilon", 0.5)
    assert dqn.run.algorithm.greedy.epsilon == 0.5  # the next collection explores with it
    dqn.train(max_iters=1)
    assert dqn.run.algorithm.greedy.epsilon == 0.5  # and the schedule keeps it
    dqn.close()
    sac = agent(tmp_path / "sac", RECIPES / "pendulum-sac.toml", **{"run.total_frames": 256})
    sac.update_algorithm_parameter("lr", [1e-4, 2e-4])
    sac.update_algorithm_parameter("alpha", 0.5)
    sac.train(max_iters=1)
    optimisers = sac.run.algorithm.learners.optimisers
    assert optimisers["actor"].param_groups[0]["lr"] == pytest.approx(1e-4)
    assert optimisers["critic"].param_groups[0]["lr"] == pytest.approx(2e-4)
    assert float(sac.run.algorithm.loss_module.log_alpha.detach().exp()) == pytest.approx(0.5)
    sac.close()


@pytest.mark.parametrize(("recipe", "name", "value", "reached"), [
    ("cartpole-a2c", "value_coef", 0.25, lambda a: a.loss_module.value_coef),
    ("cartpole-vpg", "max_grad_norm", 1.0, lambda a: a.config.max_grad_norm),
    ("cartpole-ppo-kl", "kl_target", 0.02, lambda a: a.loss_module.kl_target),
    ("pendulum-td3", "tau", 0.01, lambda a: a.tau),
    ("pendulum-crossq", "max_grad_norm", 5.0, lambda a: a.learners.max_grad_norm),
    ("pendulum-redq", "alpha", 0.3, lambda a: float(a.loss_module.log_alpha.detach().exp())),
])
def test_every_family_on_the_algorithm_itself(recipe, name, value, reached):
    from rlplug.core.envs import build_env
    from rlplug.recipe import load

    built = load(RECIPES / f"{recipe}.toml")
    env = build_env(built.env)
    algorithm = built.algorithm.build(observation_spec=env.observation_spec, action_spec=env.action_spec,
                                      total_frames=built.run.total_frames)
    algorithm.update_algorithm_parameter(name, value)
    assert reached(algorithm) == pytest.approx(value)
    assert algorithm.parameter_changes() == {name: value}  # what a checkpoint keeps (the protocol member)
    env.close()


@pytest.mark.parametrize(("name", "value", "fragments"), [
    ("policy", "mlp", ["algorithm.policy", "'policy' is fixed once the algorithm is built", "lr, max_grad_norm"]),
    ("frames_per_batch", 64, ["'frames_per_batch' is fixed", "clip_epsilon"]),
    ("lrr", 1e-4, ["'lrr' is not a parameter of this algorithm (did you mean 'lr'?)", "entropy_coef"]),
    ("lr", -1.0, ["algorithm.lr", "must be > 0"]),
    ("clip_epsilon", "wide", ["algorithm.clip_epsilon", "expected"]),
])
def test_refused_in_one_line_naming_the_key(tmp_path, name, value, fragments):
    ppo = agent(tmp_path, **CONSTANT)
    with pytest.raises(UserError) as refused:
        ppo.update_algorithm_parameter(name, value)
    message = str(refused.value)
    assert "\n" not in message and all(f in message for f in fragments), message
    assert ppo.run.algorithm.config.lr == 1e-3 and not (ppo.run.run_dir / "parameters.jsonl").exists()
    ppo.close()


def test_checkpoint_keeps_the_changes_and_an_old_one_still_loads(tmp_path):
    ppo = agent(tmp_path, **CONSTANT)
    ppo.update_algorithm_parameter("lr", 1e-4)
    saved = ppo.save(tmp_path / "changed.pt")
    ppo.close()
    loaded = rlplug.Agent.load(saved, out=tmp_path / "loaded")
    assert loaded.run.algorithm.config.lr == 1e-4
    loaded.close()
    state = torch.load(saved, weights_only=True)
    assert state["parameters"] == {"lr": 1e-4}
    del state["parameters"]  # as a checkpoint written before parameters could change
    old = tmp_path / "old.pt"
    torch.save(checkpoints.sealed({k: v for k, v in state.items() if k not in ("format", "digest")}), old)
    before = rlplug.Agent.load(old, out=tmp_path / "old")
    assert before.run.algorithm.config.lr == 1e-3
    before.close()


def test_set_refusals_are_one_line(tmp_path):
    out = tmp_path / "run"
    assert run_cli("run", str(CANONICAL), "--out", str(out), *SHORT).returncode == 0
    one_line_error(run_cli("set", str(out), "algorithm.policy=\"cnn\""), "algorithm.policy", "is fixed",
                   "names that can change during a run: lr")
    one_line_error(run_cli("set", str(out), "algorithm.lr=-3"), "recipe.toml: algorithm.lr", "must be > 0")
    one_line_error(run_cli("set", str(out), "run.total_frames=5"), "expected algorithm.NAME=VALUE", "resume --set")
    one_line_error(run_cli("set", str(tmp_path), "algorithm.lr=1e-4"), "not a run directory")
    (tmp_path / "batched.json").write_text("{}")  # as if out were a seed-N of seeds trained together
    one_line_error(run_cli("set", str(out), "algorithm.lr=1e-4"), "seeds trained together")
    assert not (out / "set-requests").exists() or not any((out / "set-requests").iterdir())


def test_a_request_waits_for_resume_which_keeps_it(tmp_path):
    """The run stops at its evaluation at frame 1024, before its 2048 frames (a finished run takes no request)."""
    out = tmp_path / "run"
    flags = [*SHORT, "--set", "algorithm.anneal_lr=false", "--set", "run.total_frames=2048",
             "--set", "eval.every_frames=1024", "--set", "callbacks=[{use='stop-at-return', threshold=-1e9}]"]
    assert run_cli("run", str(CANONICAL), "--out", str(out), *flags).returncode == 0
    asked = run_cli("set", str(out), "algorithm.lr=1e-4")
    assert asked.returncode == 0 and "waits for python -m rlplug resume" in asked.stdout, asked.stdout
    resumed = run_cli("resume", str(out), "--set", "callbacks=[]")
    assert resumed.returncode == 0, resumed.stderr
    assert "frame 1024: algorithm.lr 0.001 -> 0.0001 (rlplug set)" in resumed.stdout
    state = checkpoints.load_checkpoint(out / "checkpoint.pt")
    assert state["parameters"] == {"lr": 1e-4}
    assert state["algorithm"]["optimiser"]["param_groups"][0]["lr"] == pytest.approx(1e-4)
    again = run_cli("resume", str(out), "--set", "run.total_frames=3072")  # the change stays, with no request
    assert again.returncode == 0 and "algorithm.lr" not in again.stdout
    state = checkpoints.load_checkpoint(out / "checkpoint.pt")
    assert state["algorithm"]["optimiser"]["param_groups"][0]["lr"] == pytest.approx(1e-4)


def test_set_on_a_live_run(tmp_path):
    out = tmp_path / "run"
    process = start_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.total_frames=10_000_000",
                        "--set", "algorithm.anneal_lr=false", "--set", "eval.every_frames=0")
    try:
        wait_for(out / "metrics.csv", process, timeout=300)
        asked = run_cli("set", str(out), "algorithm.lr=1e-4", "algorithm.clip_epsilon=0.1")
        assert asked.returncode == 0, asked.stderr
        assert "applies it before its next update" in asked.stdout
        wait_for(out / "parameters.jsonl", process, timeout=300)
        changed_at = json.loads((out / "parameters.jsonl").read_text().splitlines()[0])["frame"]
        deadline = time.monotonic() + 300
        while not any(int(r["frames"]) > changed_at and r.get("clip_epsilon")  # an update after the change
                      for r in csv.DictReader((out / "metrics.csv").open())):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGINT)  # a clean stop: a checkpoint of where it got to
        stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert "algorithm.lr 0.001 -> 0.0001 (rlplug set)" in stdout
    assert "algorithm.clip_epsilon 0.2 -> 0.1 (rlplug set)" in stdout
    rows = [json.loads(line) for line in (out / "parameters.jsonl").read_text().splitlines()]
    assert [(r["name"], r["new"], r["source"]) for r in rows] == [
        ("algorithm.lr", 1e-4, "rlplug set"), ("algorithm.clip_epsilon", 0.1, "rlplug set")]
    assert rows[0]["frame"] > 0
    metrics = list(csv.DictReader((out / "metrics.csv").open()))
    assert [float(r["algorithm.lr"]) for r in metrics if r.get("algorithm.lr")] == [1e-4]
    later = [r for r in metrics if r.get("clip_epsilon") and int(r["frames"]) > rows[0]["frame"]]
    # the canonical recipe anneals the clip range: 0.1 is where its schedule now starts, over 10^7 frames
    assert later and all(float(r["clip_epsilon"]) == pytest.approx(0.1, rel=1e-3) for r in later)
    state = checkpoints.load_checkpoint(out / "checkpoint.pt")
    assert state["algorithm"]["optimiser"]["param_groups"][0]["lr"] == pytest.approx(1e-4)
    assert not list((out / "set-requests").glob("*.json"))  # taken


@pytest.mark.parametrize(("recipe", "name", "value"), [
    ("pendulum-sac.toml", "alpha", "0.5"), ("cartpole-dqn.toml", "epsilon", "0.3")])
def test_set_takes_the_changes_that_are_no_recipe_keys(tmp_path, recipe, name, value):
    """SAC's alpha and DQN's epsilon change during a run though no recipe has such a key (before: `set` refused
    them as unknown keys while the README and its own refusal listed them)."""
    out = tmp_path / "run"
    flags = ["--set", "run.total_frames=600", "--set", "eval.every_frames=300", "--set", "eval.episodes=1",
             "--set", "algorithm.learning_starts=100", "--set", "callbacks=[{use='stop-at-return', threshold=-1e9}]"]
    assert run_cli("run", str(RECIPES / recipe), "--out", str(out), *flags).returncode == 0
    asked = run_cli("set", str(out), f"algorithm.{name}={value}")
    assert asked.returncode == 0, asked.stderr
    resumed = run_cli("resume", str(out), "--set", "callbacks=[]")
    assert resumed.returncode == 0, resumed.stderr
    assert f"algorithm.{name}" in resumed.stdout and f"-> {value}" in resumed.stdout, resumed.stdout
    assert checkpoints.load_checkpoint(out / "checkpoint.pt")["parameters"] == {name: float(value)}


def test_the_readme_lists_what_set_takes():
    """The README's list of what may change is every name some shipped recipe's algorithm takes, and no other."""
    import re

    from rlplug.recipe import load
    from rlplug.registry import protocols

    text = (ROOT / "README.md").read_text()
    listed_text = text[text.index("What may change:"):text.index("Networks, the loss, the buffer")]
    listed = set(re.findall(r"`([a-z_.*/]+)`", listed_text))
    taken: set[str] = set()
    for path in sorted(RECIPES.glob("*.toml")):
        try:
            recipe = load(path)
        except UserError:  # an env of an extra this venv lacks
            continue
        taken.update(protocols.live_parameters(recipe.algorithm.spec.factory).names(recipe.algorithm.params))
    shown = {name for name in taken if not name.startswith("reward_")}
    shown |= {"reward_*"} if any(n.startswith("reward_") for n in taken) else set()
    # written `exploration_noise.sigma`/`final_sigma`
    listed = {"exploration_noise.final_sigma" if name == "final_sigma" else name for name in listed}
    assert listed == shown, (sorted(listed - shown), sorted(shown - listed))
