"""pytorchrl's Algorithm interface on every built-in algorithm: ``compute_gradients(batch, grads_to_cpu)``,
``apply_gradients(gradients=None)``, ``get_weights()``, ``set_weights(weights)``.

Gradients computed in another process (spawned, holding its own copy of the algorithm with perturbed weights,
set from the learner's before each step, as Ray's gradient workers do) and applied by the learner give exactly
the parameters, target copies and step count of the algorithm's own ``update`` on the same data; so do
``compute_gradients`` then ``apply_gradients()`` in one process. Then Ray's ``mode = "gradients"`` trains sac
and dqn with two workers, and refuses in one line what it cannot train."""

from __future__ import annotations

import csv
import multiprocessing

import pytest
import ray
import torch
from conftest import ROOT, built_algorithm, one_line_error, run_cli

import rlplug
from rlplug.plugins.algorithms.offpolicy.base import OffPolicy
from rlplug.plugins.runners.ray.gradients import GradientWorker, GradientWorkerSpec

pytestmark = pytest.mark.slow

#: off-policy: a small sample, learning at once, several gradient steps (TD3's and CrossQ's delayed actor
#: steps, and the targets move, within them)
OFF = ["algorithm.learning_starts=0", "algorithm.batch_size=32", "algorithm.gradient_steps=4"]
PENDULUM_OFF = [*OFF, "algorithm.steps_per_update=64"]
#: on-policy: two epochs of two minibatches
ON = ["algorithm.epochs=2", "algorithm.num_minibatches=2"]
SURROGATE = """
[env]
use = "gym"
id = "CartPole-v1"
num_envs = 4

[algorithm]
use = "surrogate"
frames_per_batch = 128
"""

ALGORITHMS = {
    "ppo": ("cartpole-ppo", ON),
    "ppo-kl": ("cartpole-ppo-kl", ON),
    "a2c": ("cartpole-a2c", ON),
    "vpg": ("cartpole-vpg", ON),
    "surrogate": (None, ON),
    "impala": ("cartpole-impala-ray", [*ON, 'runner={use="local"}']),
    "ddpg": ("pendulum-ddpg", PENDULUM_OFF),
    "td3": ("pendulum-td3", PENDULUM_OFF),
    "sac": ("pendulum-sac", PENDULUM_OFF),
    "redq": ("pendulum-redq", PENDULUM_OFF),
    "crossq": ("pendulum-crossq", PENDULUM_OFF),
    "dqn": ("cartpole-dqn", OFF),
}
#: the global random stream the losses draw from (SAC's actions, minibatch partitions), the same in each copy
DRAWS = 7


def recipe_path(name: str, tmp_path):
    recipe, _ = ALGORITHMS[name]
    if recipe is None:
        path = tmp_path / f"{name}.toml"
        path.write_text(SURROGATE)
        return path
    return ROOT / "recipes" / f"{recipe}.toml"


def gradient_worker(connection) -> None:
    """A spawned process serving one algorithm after another (one process for the module: each spawn imports
    torch anew). For each: its own copy of the algorithm (weights perturbed, so only set_weights makes them
    right), Ray's worker-side class around it; it takes the batch, then answers each step's weights with
    gradients until None. It computes with the learner's thread count (another count sums in another order:
    CrossQ's batch norm carries that rounding from step to step)."""
    while (algorithm_wanted := connection.recv()) is not None:
        path, overrides, threads = algorithm_wanted
        torch.set_num_threads(threads)
        algorithm, _ = built_algorithm(path, 0, overrides)
        with torch.no_grad():
            for p in algorithm.parameters:
                p.add_(0.5)
        batch, frames, weights = connection.recv()
        algorithm.set_weights(weights)  # as Ray's worker sets them before its rollout
        torch.manual_seed(DRAWS)
        worker = GradientWorker(algorithm, algorithm.data_parallel(1))
        tracked = worker.prepare(batch, frames)
        connection.send({key: [float(tracked.get(key).reshape(-1)[0])] for key in tracked.keys() if key != "next"})
        while (message := connection.recv()) is not None:
            step, weights = message
            algorithm.set_weights(weights)
            connection.send(worker.step(step))
        connection.send("done")


class GradientServer:
    """:func:`gradient_worker` in a spawned process, shared by the module's tests; a test that did not end its
    session (it failed half-way) leaves it to be replaced, so that the next test starts on a clean one."""

    def __init__(self) -> None:
        self.process: multiprocessing.process.BaseProcess | None = None
        self.clean = False

    def session(self):
        """The learner's end of the pipe, the worker ready for a new algorithm; :meth:`ended` when done."""
        if self.process is None or not self.clean or not self.process.is_alive():
            self.close()
            context = multiprocessing.get_context("spawn")
            self.connection, theirs = context.Pipe()
            self.process = context.Process(target=gradient_worker, args=(theirs,), daemon=True)
            self.process.start()
        self.clean = False
        return self.connection

    def ended(self) -> None:
        self.clean = True

    def close(self) -> None:
        if self.process is None:
            return
        if self.clean and self.process.is_alive():
            self.connection.send(None)
            self.process.join(60)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


@pytest.fixture(scope="module")
def another_process():
    server = GradientServer()
    yield server
    server.close()


def answer(connection, seconds: float = 120):
    if not connection.poll(seconds):
        raise TimeoutError("the gradient worker did not answer")
    return connection.recv()


def learner_steps(algorithm, batch, gradients_for, taken) -> None:
    """The learner's side of one update, each step's gradients from ``gradients_for(step, weights)``: as the
    Ray runner's gradient mode takes it (rlplug.plugins.runners.ray.gradients), through the algorithm's
    ``data_parallel``; ``taken``: what the worker's copy said of its rollout."""

    def step(index: int):
        return {}, algorithm.apply_gradients(gradients_for(index, algorithm.get_weights()))

    algorithm.data_parallel(1).learn(batch.numel(), step, taken)


def assert_same_state(mine, reference) -> None:
    theirs = reference.get_weights()
    assert set(mine.get_weights().keys()) == set(theirs.keys())
    for key, value in mine.get_weights().items():
        torch.testing.assert_close(value, theirs.get(key), rtol=1e-5, atol=1e-6, msg=key)
    for p, q in zip(mine.parameters, reference.parameters):  # the on-policy weights are the parameters alone
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_gradients_from_another_process_equal_the_local_update(name, tmp_path, another_process):
    path, overrides = recipe_path(name, tmp_path), ALGORITHMS[name][1]
    reference, (batch,) = built_algorithm(path, 0, overrides)
    learner, _ = built_algorithm(path, 0, overrides)
    before = [p.detach().clone() for p in reference.parameters]
    torch.manual_seed(DRAWS)
    reference.update(batch.clone())
    assert any(not torch.equal(a, b) for a, b in zip(before, reference.parameters)), "the update moved nothing"

    worker = another_process.session()
    worker.send((path, overrides, torch.get_num_threads()))
    worker.send((batch.clone(), batch.numel(), learner.get_weights()))
    taken = answer(worker)

    def remote(step, weights):
        worker.send((step, weights))
        return answer(worker).get("grads")

    learner_steps(learner, batch, remote, taken)
    worker.send(None)
    assert answer(worker) == "done"
    another_process.ended()
    assert_same_state(learner, reference)


@pytest.mark.parametrize("name", ["ppo", "td3", "sac", "dqn", "crossq"])
def test_apply_gradients_of_none_takes_the_computed_step(name, tmp_path):
    """``apply_gradients()`` (pytorchrl's None) steps with what ``compute_gradients`` left in place."""
    path, overrides = recipe_path(name, tmp_path), ALGORITHMS[name][1]
    reference, (batch,) = built_algorithm(path, 0, overrides)
    algorithm, _ = built_algorithm(path, 0, overrides)
    torch.manual_seed(DRAWS)
    reference.update(batch.clone())
    torch.manual_seed(DRAWS)
    if isinstance(algorithm, OffPolicy):
        algorithm.start_update(batch.clone())
        for sample in algorithm.samples():
            gradients, reported = algorithm.compute_gradients(sample, grads_to_cpu=False)
            assert all(value.numel() == 1 for value in reported.values())
            algorithm.apply_gradients()
    else:
        lr = algorithm.start_update(batch.numel())
        prepared = algorithm.prepare(batch.clone(), algorithm.minibatch_size)

        def step(index: int, diagnostics: bool):
            algorithm.compute_gradients(prepared.minibatch(index))
            return {}, algorithm.apply_gradients().get("grad_norm")

        algorithm.learn(prepared.steps, step, lr, None)
    assert_same_state(algorithm, reference)
    if isinstance(algorithm, OffPolicy):
        with pytest.raises(RuntimeError, match="compute_gradients first"):
            algorithm.apply_gradients()  # nothing left to apply


def test_the_gradients_cover_every_learner_and_the_delay(tmp_path):
    """SAC's gradients are the actor's, the critics' and the entropy coefficient's; TD3's actor has none on the
    steps its delay skips, and its targets move only with the actor."""
    sac, (batch,) = built_algorithm(recipe_path("sac", tmp_path), 0, ALGORITHMS["sac"][1])
    sac.start_update(batch)
    gradients, _ = sac.compute_gradients(sac.sample(32))
    assert set(gradients.keys()) == {"actor", "critic", "entropy"}
    assert all(t.device.type == "cpu" for t in gradients.values(include_nested=True, leaves_only=True))
    assert all(bool(gradients.get(name).get("0").abs().sum() > 0) for name in gradients.keys())

    td3, (batch,) = built_algorithm(recipe_path("td3", tmp_path), 0, ALGORITHMS["td3"][1])
    td3.start_update(batch)
    targets = {k: v.clone() for k, v in td3.get_weights().items() if "target" in k}
    learned = []
    for _ in range(td3.config.policy_delay):
        gradients, _ = td3.compute_gradients(td3.sample(32))
        learned.append(set(gradients.keys()))
        moved = any(not torch.equal(v, td3.get_weights().get(k)) for k, v in targets.items())
        assert not moved  # computing moves nothing
        td3.apply_gradients(gradients)
    assert learned == [{"critic"}] * (td3.config.policy_delay - 1) + [{"actor", "critic"}]
    assert any(not torch.equal(v, td3.get_weights().get(k)) for k, v in targets.items())


# -- Ray's gradient mode -----------------------------------------------------------------------------------

SMALL = {"run": {"checkpoint_every_frames": 0}, "eval": {"episodes": 2, "every_frames": 0},
         "loggers": [{"use": "csv"}]}
GRADIENTS = {"use": "ray", "workers": 2, "mode": "gradients"}


def test_each_gradient_worker_draws_its_own_replay_samples(tmp_path):
    """Workers' algorithm copies are seeded with their own seeds: with one seed for all, every worker drew the same
    positions from its buffer, so a batch held each moment of the run twice (two streams alike in time)."""
    from rlplug.core.envs import build_env
    from rlplug.recipe import load

    recipe = load(ROOT / "recipes" / "cartpole-dqn.toml", ["algorithm.learning_starts=0"])
    env = build_env(recipe.env)
    spec = GradientWorkerSpec(recipe, workers=2)
    _, batches = built_algorithm(ROOT / "recipes" / "cartpole-dqn.toml", 0, [])

    def drawn(seed: int) -> torch.Tensor:
        worker = spec.build(env, seed)
        worker.algorithm.store(batches[0])
        return worker.algorithm.sample(32).get("observation")

    assert torch.equal(drawn(0), drawn(0))  # a worker's draws follow its seed
    assert not torch.equal(drawn(0), drawn(1))


@pytest.fixture(scope="module")
def ray_instance():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.parametrize("name, algorithm, frames", [
    ("pendulum-sac", {"steps_per_update": 16, "gradient_steps": 4, "learning_starts": 32, "batch_size": 32}, 128),
    ("cartpole-dqn", {"steps_per_update": 64, "gradient_steps": 8, "learning_starts": 64, "batch_size": 32}, 256),
])
@pytest.mark.xdist_group("ray")
def test_ray_gradient_workers_train_offpolicy(ray_instance, tmp_path, name, algorithm, frames):
    agent = rlplug.Agent.from_recipe(ROOT / "recipes" / f"{name}.toml", out=tmp_path / "run", runner=GRADIENTS,
                                     **SMALL, **{"run.total_frames": frames}, algorithm=algorithm)
    run = agent.run
    before = {k: v.clone() for k, v in run.algorithm.get_weights().items()}
    summary = run.train()
    assert summary["status"] == "finished" and summary["frames"] == frames
    after = run.algorithm.get_weights()
    # every update from learning_starts on took its gradient steps (each worker's buffer holds its share of a
    # batch by then), and the targets moved with them
    learning = [f for f in range(0, frames, algorithm["steps_per_update"]) if f + algorithm["steps_per_update"] >=
                algorithm["learning_starts"]]
    assert run.algorithm.steps == len(learning) * algorithm["gradient_steps"]
    targets = [k for k in before if k.startswith("loss.") and "target" in k]
    assert targets and all(not torch.equal(before[k], after.get(k)) for k in targets)

    with (run.run_dir / "metrics.csv").open() as f:
        rows = [row for row in csv.DictReader(f) if row.get("fps")]
    last = rows[-1]
    terms = {"loss_qvalue", "loss_actor", "loss_alpha"} if name == "pendulum-sac" else {"loss", "epsilon"}
    assert terms <= {k for k, v in last.items() if v}
    assert float(last["buffer_size"]) == frames  # the workers' buffers together hold every frame collected


def test_what_gradient_mode_cannot_train_is_refused_in_one_line(tmp_path):
    out = tmp_path / "lstm"
    result = run_cli("run", str(ROOT / "recipes" / "pendulum-ddpg-lstm.toml"), "--set", "runner.use=ray",
                     "--set", "runner.mode=gradients", "--out", str(out), timeout=120)
    one_line_error(result, "runner.use", "recurrent networks", "local runner")  # the ray runner takes none
    assert not out.exists()  # refused before the run directory is made
    # one env and one step an update no longer refused on two workers: rounded up (tests/test_ray_cadence.py)
