"""``run.compile = true``: the loss compiled in place computes what the eager loss computes (value and
gradients), stays the TorchRL ``LossModule`` it was, trains a run from the command line, and is refused in one line
where it cannot apply (seeds trained together, an algorithm that does not declare ``compile_update``)."""

from __future__ import annotations

import json

import pytest
import torch
from torchrl.objectives import LossModule

import rlplug
from rlplug.core.training import MetricMean
from rlplug.plugins.algorithms.sac.algorithm import SAC
from rlplug.recipe import load
from rlplug.run.batched import BatchedRun
from rlplug.run.trainer import Run
from tests.conftest import CANONICAL, ROOT, run_cli

pytestmark = pytest.mark.slow  # each compiles a loss: seconds of the compiler's time


def loss_and_gradients(compute, parameters):
    """The loss ``compute()`` gives and its gradient for each of ``parameters``."""
    for p in parameters:
        p.grad = None
    loss = compute()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in parameters]


def assert_same(compiled, eager):
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-6)
    for got, expected in zip(compiled[1], eager[1]):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_the_compiled_ppo_loss_computes_the_eager_loss_and_gradients(tmp_path):
    """Also after the clip range, a buffer PPO anneals in place, has changed: a compiled graph that kept
    its first value would be caught."""
    run = Run.build(load(CANONICAL), tmp_path / "run")
    try:
        algorithm = run.algorithm
        prepared = algorithm.prepare(run.collector.collect(), algorithm.minibatch_size)
        minibatch = prepared.minibatch(0)
        with torch.no_grad():  # the policy moved away from the one that collected: ratios away from 1
            for p in algorithm.policy.parameters():
                p.add_(torch.randn_like(p) * 0.1)

        def clipped_at(clip):
            algorithm.loss_module.clip_epsilon = clip
            return loss_and_gradients(lambda: algorithm.loss(minibatch.clone(), True)[0], algorithm.parameters)

        eager = {clip: clipped_at(clip) for clip in (0.2, 0.01)}
        assert not torch.equal(eager[0.2][0], eager[0.01][0])
        algorithm.compile_update()
        assert isinstance(algorithm.loss_module, LossModule)
        for clip in (0.2, 0.2, 0.01):  # the first call compiles, the second runs what was compiled
            assert_same(clipped_at(clip), eager[clip])
    finally:
        run.close()


def test_the_compiled_ddpg_loss_computes_the_eager_loss_and_gradients(tmp_path):
    run = Run.build(load(ROOT / "recipes" / "pendulum-ddpg.toml"), tmp_path / "run")
    try:
        algorithm = run.algorithm
        algorithm.store(run.collector.collect())
        sample = algorithm.replay.sample(64)

        def total():
            out = algorithm.loss_module(sample.clone())
            return sum(value for key, value in out.items() if key.startswith("loss_"))

        eager = loss_and_gradients(total, algorithm.parameters)
        algorithm.compile_update()
        assert isinstance(algorithm.loss_module, LossModule)
        for _ in range(2):
            assert_same(loss_and_gradients(total, algorithm.parameters), eager)
    finally:
        run.close()


def test_a_compiled_run_trains_from_the_command_line_and_resumes_eager(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "run.compile=true",
                     "--set", "run.total_frames=2048", "--set", "eval.episodes=2")
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] == 2048
    # its checkpoint holds the eager module's keys: an eager resume loads it (a wrapped, renamed module fails here)
    result = run_cli("resume", str(out), "--set", "run.compile=false", "--set", "run.total_frames=2560")
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "summary.json").read_text())["frames"] == 2560


def test_compile_is_refused_where_it_cannot_apply(tmp_path, monkeypatch):
    recipes = [load(CANONICAL, [f"run.seed={seed}", "run.compile=true"]) for seed in (0, 1)]
    with pytest.raises(rlplug.UserError, match="torch.vmap") as caught:
        BatchedRun.build(recipes, tmp_path / "batched")
    assert caught.value.path == "run.compile"
    monkeypatch.setattr(SAC, "compile_update", None, raising=False)
    with pytest.raises(rlplug.UserError, match="does not declare compile_update") as caught:
        Run.build(load(ROOT / "recipes" / "pendulum-sac.toml", ["run.compile=true"]), tmp_path / "sac")
    assert caught.value.path == "run.compile"
    assert not (tmp_path / "sac").exists() and not (tmp_path / "batched" / "seed-0").exists()


def test_a_compiled_torchrl_sac_loss_is_compiled_once_not_at_every_step(tmp_path):
    """TorchRL's SACLoss under run.compile on the CPU: each step after the first runs the graph compiled by the
    first. (A loss whose critics were looped changed tensordict's pytree registry at every call, which made
    every step recompile until torch gave up and ran it eagerly, slower than never compiling.)"""
    recipe = load(ROOT / "recipes" / "pendulum-sac.toml", ['algorithm.loss={use="SACLoss"}', "run.compile=true"])
    run = Run.build(recipe, tmp_path / "run")
    try:
        algorithm = run.algorithm  # built compiled (run.compile)
        for _ in range(32):
            algorithm.store(run.collector.collect())
        samples = [algorithm.replay.sample(32) for _ in range(3)]
        algorithm.gradient_step(samples[0], MetricMean())  # compiles
        with torch.compiler.set_stance("fail_on_recompile"):
            for sample in samples[1:]:
                algorithm.gradient_step(sample, MetricMean())
    finally:
        run.close()
