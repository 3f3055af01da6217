"""The ``ray`` runner on a real local Ray instance (2 CPUs, started once for the module), and the ``local``
runner it must be interchangeable with: the same batches, weights on the workers after every update, a
killed worker restarted while the run goes on, IMPALA's asynchronous collection, gradient workers, and the
one-line errors a user can cause. Then the command line against a two-node cluster on this machine
(``tests/ray_cluster.py``): workers spread over the nodes, and a node lost mid-run. Ray is a test dependency
(``.[test]``): nothing here is skipped."""

from __future__ import annotations

import csv
import json
import pickle
import re
import subprocess
import sys
import threading
import time

import gymnasium
import pytest
import ray
import torch
from conftest import CANONICAL, ROOT, one_line_error, run_cli, start_cli

import rlplug
from rlplug import recipe as recipes
from rlplug.errors import UserError
from rlplug.plugins.runners.local import LocalCollector
from rlplug.plugins.runners.ray.cluster import unreachable
from rlplug.plugins.runners.ray.collection import RayCollection
from rlplug.run.trainer import Run

IMPALA = ROOT / "recipes" / "cartpole-impala-ray.toml"
#: Small runs: two workers, no periodic evaluation or checkpoint, the csv logger only.
SMALL = {"run": {"total_frames": 2048, "checkpoint_every_frames": 0}, "eval": {"episodes": 2, "every_frames": 0},
         "loggers": [{"use": "csv"}]}
RAY = {"runner": {"use": "ray", "workers": 2}}

#: Whole runs and subprocesses: the full suite's, not the fast tier's.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # the Ray tests run one after another (README)


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance for the module; rlplug's runs find it initialised and use it (never stop it)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def agent(tmp_path, path=CANONICAL, out="run", **overrides) -> rlplug.Agent:
    tables = {**SMALL, **RAY}
    for key in [k for k in overrides if k in tables]:
        tables[key] = {**tables[key], **overrides.pop(key)}
    return rlplug.Agent.from_recipe(path, out=tmp_path / out, **tables, **overrides)


def metrics(run_dir) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return [row for row in csv.DictReader(f) if row.get("fps")]


def released(cpus: float = 2.0, timeout: float = 15.0) -> bool:
    """Whether every CPU of the module's Ray instance is free again (the workers' actors are gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0) >= cpus:
            return True
        time.sleep(0.2)
    return False


def force_action(policy, action: int) -> None:
    """Make the policy choose ``action`` almost surely: zero the last layer, a large logit for ``action``."""
    last = [m for m in policy.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(-20.0)
        last.bias[action] = 20.0


# -- recipes and errors (no Ray instance needed) ------------------------------------------------------------


def test_every_recipe_keeps_the_local_runner_and_the_env_component_pickles():
    recipe = recipes.load(CANONICAL)
    assert recipe.runner.spec.name == "local" and recipe.resolved()["runner"] == {"use": "rlplug:local"}
    # Ray workers build the env from the recipe's env component in their own process
    again = pickle.loads(pickle.dumps(recipe.env))
    assert again.build(device="cpu").batch_size == recipe.env.build(device="cpu").batch_size
    ray_recipe = recipes.load(CANONICAL, ["runner.use=ray", "runner.workers=3", "runner.address=auto"])
    assert ray_recipe.resolved()["runner"] == {"use": "rlplug:ray", "workers": 3, "address": "auto",
                                               "mode": "experience", "max_restarts": 3, "storages": 0,
                                               "learners": 1}
    assert recipes.load(IMPALA).runner.spec.name == "ray"


@pytest.mark.parametrize("override, message", [
    ("runner.workers=0", "runner.workers: must be >= 1, got 0"),
    ("runner.address=nowhere", "runner.address: 'nowhere' is not a Ray address"),
    ("runner.mode=both", "runner.mode"),
    ("runner.resources_per_worker={num_cpus=-1}", "runner.resources_per_worker.num_cpus: must be >= 0"),
])
def test_recipe_mistakes_in_the_runner_table_are_one_line(override, message):
    with pytest.raises(UserError) as error:
        recipes.load(CANONICAL, ["runner.use=ray", override])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_missing_ray_is_one_line_before_training(monkeypatch, tmp_path):
    recipe = recipes.load(CANONICAL, ["runner.use=ray"])
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(UserError, match=r'pip install "rlplug\[ray\]"'):
        recipe.runner.build(device="cpu", seed=0)


def test_an_address_where_no_cluster_answers_is_one_line_exit_2(tmp_path):
    assert unreachable("127.0.0.1:1") and unreachable("ray://127.0.0.1:1")
    out = tmp_path / "bad"
    result = run_cli("run", str(CANONICAL), "--set", "runner.use=ray", "--set", "runner.address=127.0.0.1:1",
                     "--out", str(out), timeout=60)
    assert result.returncode == 2, result.stderr
    assert "runner.address: cannot connect to the Ray cluster at '127.0.0.1:1'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_gradients_averaged_over_workers_equal_the_local_update(tmp_path):
    """Gradient mode's arithmetic without Ray: two workers' gradients on their halves of a batch, averaged and
    applied by the learner, take the same step as the algorithm's own update on the whole batch (A2C: one
    minibatch, no advantage normalisation, so the mean loss over the batch is the mean of the halves')."""
    from rlplug.plugins.runners.ray.gradients import GradientWorker, averaged

    a2c = ROOT / "recipes" / "cartpole-a2c.toml"
    # one recipe and seed: the same initial weights in all three
    local, reference, worker_algorithm = (rlplug.Agent.from_recipe(a2c, out=tmp_path / name, **SMALL)
                                          for name in ("learner", "reference", "worker"))
    learner, reference, worker_algorithm = local.run.algorithm, reference.run.algorithm, worker_algorithm.run.algorithm
    batch = local.run.collector.collect()
    reference.update(batch.clone())

    worker = GradientWorker(worker_algorithm, worker_algorithm.data_parallel(2))
    worker_algorithm.set_weights(learner.get_weights())
    halves = []
    for half in batch.clone().chunk(2, dim=0):  # by env rows: each half's advantages are the whole batch's
        worker.prepare(half.clone(), frames=batch.numel())
        halves.append(worker.step(0).get("grads"))
    learner.frames += batch.numel()
    learner.apply_gradients(averaged(halves))
    for mine, theirs in zip(learner.parameters, reference.parameters):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)


# -- on a Ray instance ------------------------------------------------------------------------------------


def test_ray_batches_have_the_local_layout_and_workers_act_with_synced_weights(ray_instance, tmp_path):
    local = rlplug.Agent.from_recipe(CANONICAL, out=tmp_path / "local", **SMALL)
    remote = agent(tmp_path, out="ray")
    assert isinstance(local.run.collector, LocalCollector) and isinstance(remote.run.collector, RayCollection)
    mine, theirs = local.run.collector.collect(), remote.run.collector.collect()
    assert mine.batch_size == theirs.batch_size == (8, 32)  # the 8 envs split 4 + 4 over the workers
    flat = {k: v for k, v in mine.items(include_nested=True, leaves_only=True)}
    assert set(flat) == set(theirs.keys(include_nested=True, leaves_only=True))
    for key, value in flat.items():
        assert theirs.get(key).shape == value.shape and theirs.get(key).dtype == value.dtype, key

    collector, policy = remote.run.collector, remote.run.algorithm.policy
    for action in (0, 1):  # weights changed on the learner reach every worker before its next rollout
        force_action(policy, action)
        collector.sync_weights()
        actions = collector.collect().get("action")
        assert bool((actions.argmax(-1) == action).all())
    assert collector.metrics()["policy_lag"] == 0.0
    collector.shutdown()
    assert released() and ray.is_initialized()  # the module's instance is left running for the others


def test_a_worker_that_cannot_build_the_env_is_one_line_naming_the_cause(ray_instance, tmp_path):
    """An env id registered in this process only: the training process builds it, the workers (Ray's own
    processes) cannot, and the run says so in one line instead of a traceback."""
    gymnasium.register("RlplugOnlyHere-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        with pytest.raises(UserError, match=r"runner\.workers: a Ray worker could not start: .*RlplugOnlyHere"):
            agent(tmp_path, env={"use": "gym", "id": "RlplugOnlyHere-v0", "num_envs": 2}, runner={"max_restarts": 0})
    finally:
        gymnasium.registry.pop("RlplugOnlyHere-v0", None)
    assert released()


def test_ppo_trains_under_ray_and_logs_lag_and_restarts(ray_instance, tmp_path):
    run = agent(tmp_path, run={"total_frames": 3072}).run
    summary = run.train(max_frames=2048)
    assert summary["status"] == "paused" and summary["frames"] >= 2048 and summary["episodes"] > 0
    rows = metrics(run.run_dir)
    assert len(rows) == summary["iterations"]
    assert all(float(r["policy_lag"]) == 0.0 and float(r["worker_restarts"]) == 0.0 for r in rows)
    assert all(float(r["weight_sync_ms"]) >= 0 for r in rows)
    assert released()  # training ended: the workers are gone
    # the Python API may train on: the workers start again, with the weights trained so far (new workers, not
    # restarted ones)
    assert run.train()["status"] == "finished" and run.frames >= 3072 and released()
    assert float(metrics(run.run_dir)[-1]["worker_restarts"]) == 0.0


def test_a_worker_that_dies_is_restarted_and_the_run_goes_on(ray_instance, tmp_path):
    run = agent(tmp_path, run={"total_frames": 6144}).run
    collector = run.collector
    collector.collect()
    collector.sync_weights()
    first, second = collector.ray_collector.remote_collectors
    ray.kill(first, no_restart=False)  # between rollouts

    def kill_during_training():  # the second once training is under way, wherever it is in its rollout
        while run.iterations < 2:
            time.sleep(0.001)
        ray.kill(second, no_restart=False)

    killer = threading.Thread(target=kill_during_training, daemon=True)
    killer.start()
    summary = run.train()
    killer.join(timeout=10)
    assert summary["status"] == "finished"
    rows = metrics(run.run_dir)
    assert float(rows[-1]["worker_restarts"]) == 2.0
    assert all(float(r["policy_lag"]) == 0.0 for r in rows)  # batches from restarted workers were collected again
    assert released()


def test_impala_collects_asynchronously_and_learns_from_lagging_workers(ray_instance, tmp_path):
    run = agent(tmp_path, path=IMPALA, run={"total_frames": 8192}).run
    assert run.collector.asynchronous and run.algorithm.asynchronous
    summary = run.train()
    assert summary["status"] == "finished" and summary["iterations"] == 32
    rows = metrics(run.run_dir)
    assert all(float(r["policy_lag"]) >= 0 for r in rows) and any(float(r["policy_lag"]) > 0 for r in rows)
    assert all(r["loss_critic"] and float(r["loss_critic"]) >= 0 for r in rows)
    assert released()


def test_gradient_workers_train_ppo(ray_instance, tmp_path):
    run = agent(tmp_path, runner={"mode": "gradients"}, run={"total_frames": 1024}).run
    before = [p.detach().clone() for p in run.algorithm.parameters]
    summary = run.train()
    assert summary["status"] == "finished" and summary["iterations"] == 4
    assert any(not torch.equal(a, b) for a, b in zip(before, run.algorithm.parameters))
    row = metrics(run.run_dir)[-1]
    assert {"loss_objective", "loss_critic", "grad_norm", "explained_variance"} <= {k for k, v in row.items() if v}
    assert released()
    with pytest.raises(UserError, match="ppo-kl's beta"):
        rlplug.Agent.from_recipe(ROOT / "recipes" / "cartpole-ppo-kl.toml", out=tmp_path / "kl", **SMALL,
                                 runner={"use": "ray", "mode": "gradients"})


def test_the_command_line_run_starts_and_stops_its_own_ray(tmp_path):
    """``python -m rlplug run recipes/cartpole-ppo.toml --set runner.use=ray --set runner.workers=2``, shortened:
    a local Ray instance started for the run (beside this module's), stopped at the end."""
    out = tmp_path / "cli"
    result = run_cli("run", str(CANONICAL), "--set", "runner.use=ray", "--set", "runner.workers=2",
                     "--set", "run.total_frames=4096", "--set", "eval.every_frames=0", "--out", str(out), timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    # no line of Ray's logging reaches the console (its note that token authentication is on came at every start)
    assert not re.search(r"^\S+ \S+\s+(WARNING|ERROR) ", result.stdout + result.stderr, re.MULTILINE), result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] >= 4096
    assert "rlplug:ray" in (out / "recipe.toml").read_text()
    # evaluation needs no workers: the run is rebuilt with the local runner, and `rlplug eval` answers
    rebuilt, _ = Run.from_checkpoint(out / "checkpoint.pt", tmp_path / "scratch", changes={"runner": {"use": "local"}})
    assert isinstance(rebuilt.collector, LocalCollector)
    evaluated = run_cli("eval", str(out), "--episodes", "2", timeout=120)
    assert evaluated.returncode == 0 and "return" in evaluated.stdout, evaluated.stderr[-2000:]


def test_switching_a_ray_recipe_to_local_by_its_use_key_says_how(tmp_path):
    out = tmp_path / "local"
    result = run_cli("run", str(IMPALA), "--set", "runner.use=local", "--out", str(out), timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "runner.workers: unknown key 'workers'" in result.stderr
    assert "--set 'runner={use=\"local\"}'" in result.stderr and not out.exists()


# -- the command line on a two-node cluster ---------------------------------------------------------------


class TwoNodes:
    """The cluster ``tests/ray_cluster.py`` keeps: its address, and its second node removed or added back."""

    def __init__(self):
        self.keeper = subprocess.Popen([sys.executable, str(ROOT / "tests" / "ray_cluster.py")], cwd=ROOT,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started = self.keeper.stdout.readline()
        assert started, "the two-node Ray cluster did not start"
        self.address = json.loads(started)["address"]

    def ask(self, command: str) -> None:
        """``remove`` the second node (its processes killed at once), or ``add`` it back where it is gone."""
        self.keeper.stdin.write(command + "\n")
        self.keeper.stdin.flush()
        assert json.loads(self.keeper.stdout.readline()) == {"done": command}

    def run_arguments(self, *overrides: str) -> list[str]:
        """``--set`` arguments running the canonical recipe's workers on this cluster, evaluation at the end."""
        sets = ["runner.use=ray", f"runner.address={self.address}", "eval.every_frames=0", "eval.episodes=2",
                *overrides]
        return [str(CANONICAL), *(part for value in sets for part in ("--set", value))]

    def close(self) -> None:
        self.keeper.stdin.close()
        try:
            self.keeper.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.keeper.kill()


@pytest.fixture(scope="module")
def two_nodes():
    cluster = TwoNodes()
    try:
        yield cluster
    finally:
        cluster.close()


def finished(process: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    """The run's end, ``timeout`` seconds at most: a run that hangs is killed and fails the test."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"the run did not end within {timeout} s: {stderr[-2000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def wait_for_training(run_dir, process: subprocess.Popen, timeout: float = 300) -> None:
    """Until the run has logged its first update (Ray's start-up is slow on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while not ((run_dir / "metrics.csv").exists() and metrics(run_dir)):
        assert process.poll() is None, finished(process).stderr[-2000:]
        assert time.monotonic() < deadline, f"no update logged within {timeout} s"
        time.sleep(0.2)


def test_workers_spread_over_the_nodes_and_one_lost_with_its_node_restarts_on_the_other(two_nodes, tmp_path):
    """``runner.address`` at a cluster: one worker on each node (though the head alone has room for both);
    the second node killed once training is under way, its worker comes back on the head and the run ends
    as if nothing happened."""
    two_nodes.ask("add")
    out = tmp_path / "run"
    process = start_cli("run", *two_nodes.run_arguments("run.total_frames=8192"), "--out", str(out))
    wait_for_training(out, process)
    assert float(metrics(out)[0]["worker_nodes"]) == 2.0
    two_nodes.ask("remove")
    result = finished(process)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    rows = metrics(out)
    assert float(rows[-1]["worker_restarts"]) == 1.0 and float(rows[-1]["worker_nodes"]) == 1.0
    # the lost rollout was collected again, every worker with the current weights
    assert all(float(r["policy_lag"]) == 0.0 for r in rows)


def test_a_node_lost_with_no_restarts_left_stops_with_a_checkpoint_and_one_line(two_nodes, tmp_path):
    two_nodes.ask("add")
    out = tmp_path / "run"
    process = start_cli("run", *two_nodes.run_arguments("runner.max_restarts=0", "run.total_frames=10000000"),
                        "--out", str(out))
    wait_for_training(out, process)
    two_nodes.ask("remove")
    one_line_error(finished(process), "runner.max_restarts: Ray worker", "not restarted",
                   f"with a checkpoint; continue with: python -m rlplug resume {out}")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["frames"] > 0
    # the checkpoint holds the run up to where it stopped (rebuilt here with the local runner)
    rebuilt, _ = Run.from_checkpoint(out / "checkpoint.pt", tmp_path / "rebuilt", changes={"runner": {"use": "local"}})
    assert rebuilt.frames == summary["frames"]
    rebuilt.close(abandon=True)


@pytest.mark.parametrize("name", ["cartpole-dqn", "pendulum-ddpg"])
def test_workers_explore_on_the_learners_schedule(name):
    """What the learner pushes to a worker (its policy's TensorDict, as RayCollection's updater sends it) carries
    the exploration schedule: epsilon, the random first frames, the noise's position. As plain attributes they
    stayed at their first values on the workers: DQN's workers acted at random for the whole run."""
    from conftest import built_algorithm
    from tensordict import TensorDict

    from rlplug.plugins.runners.ray.worker import standalone_copy

    algorithm, _ = built_algorithm(ROOT / "recipes" / f"{name}.toml", 0, ["run.total_frames=10000"])
    worker_policy = standalone_copy(algorithm.policy)  # built when the run starts
    algorithm.follow_frames(8000)  # past the random frames, epsilon's decay and most of a noise schedule
    if algorithm.noise is not None:  # and a sigma changed during the run (rlplug set)
        algorithm.update_algorithm_parameter("exploration_noise.sigma", 0.3)
    # what a worker does with the weights the learner pushes
    TensorDict.from_module(worker_policy).data.update_(TensorDict.from_module(algorithm.policy).data)
    modules = dict(worker_policy.named_modules())
    learner_modules = dict(algorithm.policy.named_modules())
    explored = [(n, m) for n, m in modules.items() if hasattr(m, "epsilon") or hasattr(m, "random_phase")
                or hasattr(m, "scheduled_frames")]
    assert explored
    for path, module in explored:
        mine = learner_modules[path]
        for attribute in ("epsilon", "active", "frames", "sigma", "final_sigma"):
            if hasattr(mine, attribute) and not callable(getattr(mine, attribute)):
                assert getattr(module, attribute) == getattr(mine, attribute), (path, attribute)
    random_phase = [m for m in modules.values() if hasattr(m, "random_phase")]
    assert random_phase and not any(m.active for m in random_phase)
    if name == "cartpole-dqn":
        assert [m.epsilon for m in modules.values() if hasattr(m, "scheduled_epsilon")] == [algorithm.epsilon] != [1.0]
