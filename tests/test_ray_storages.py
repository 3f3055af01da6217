"""Replay storages (``runner.storages``): the off-policy replay in Ray actors, sampled as one buffer is.

On a real local Ray instance: the distribution of samples over the storages and their items is one buffer's
(uniform and prioritized), importance weights equal one buffer's, priorities reach the storage holding the
item; then the command line (a short ``pendulum-sac`` run with two storages, resumed), its one-line refusals,
and a storage lost with its node on the two-node cluster of ``tests/ray_cluster.py``."""

from __future__ import annotations

import json
import pickle

import pytest
import ray
import test_ray
import torch
from conftest import ROOT, one_line_error, run_cli, start_cli
from tensordict import TensorDict
from test_ray import finished, metrics, wait_for_training

from rlplug import recipe as recipes
from rlplug.errors import UserError
from rlplug.plugins.replay_buffers.prioritized import PrioritizedReplayBuffer
from rlplug.plugins.runners.ray.storages import ShardedReplay, Storage

pytestmark = pytest.mark.xdist_group("ray")  # the Ray tests run one after another (README)

#: test_ray's fixtures: its module's local Ray instance, and the two-node cluster
ray_instance, two_nodes = test_ray.ray_instance, test_ray.two_nodes

SAC = ROOT / "recipes" / "pendulum-sac.toml"
#: pendulum-sac on two workers: each update's frames split over them (one env each)
TWO_WORKERS = ["runner.use=ray", "runner.workers=2", "algorithm.steps_per_update=2", "algorithm.gradient_steps=2"]
#: the command-line tests' short runs in fewer, larger updates (the same frames and gradient steps)
FEWER_ROUNDS = ["algorithm.steps_per_update=16", "algorithm.gradient_steps=16"]


def sets(*values: str) -> list[str]:
    return [part for value in values for part in ("--set", value)]


def component(kind: str):
    """The recipe's ``algorithm.replay_buffer`` of ``kind`` (``uniform`` or ``prioritized``)."""
    return recipes.load(SAC, [f"algorithm.replay_buffer.use={kind}"]).algorithm.params["replay_buffer"]


def items(first: int, count: int) -> TensorDict:
    """Transitions whose observation is their id (``first`` onwards)."""
    return TensorDict({"observation": torch.arange(first, first + count, dtype=torch.float32).unsqueeze(-1)},
                      batch_size=[count])


def sharded(kind: str, sizes: list[int], capacity: int = 50) -> ShardedReplay:
    """Storages holding ``sizes`` items each, ids numbered on from one storage to the next."""
    built = component(kind)
    shards = [ray.remote(Storage).remote(built, capacity, i, {}) for i in range(len(sizes))]
    first = 0
    for shard, size in zip(shards, sizes):
        ray.get(shard.extend.remote(items(first, size)))
        first += size
    schedule = built.with_params(capacity=1).build(device="cpu") if kind == "prioritized" else None
    return ShardedReplay(shards, capacity, seed=0, schedule=schedule)


def counts_of(replay: ShardedReplay, total: int, draws: int = 120, batch: int = 256) -> torch.Tensor:
    """How often each id was drawn in ``draws`` samples of ``batch``."""
    counts = torch.zeros(total)
    for _ in range(draws):
        ids = replay.sample(batch).get("observation").reshape(-1).long()
        counts += torch.bincount(ids, minlength=total)
    return counts


def chi_square(observed: torch.Tensor, probabilities: torch.Tensor) -> float:
    expected = probabilities * observed.sum()
    return float(((observed - expected) ** 2 / expected).sum())


# -- recipes (no Ray instance) ------------------------------------------------------------------------------


def test_storages_is_a_runner_key_defaulting_to_zero():
    assert recipes.load(SAC, ["runner.use=ray"]).resolved()["runner"]["storages"] == 0
    with pytest.raises(UserError, match="runner.storages: must be >= 0"):
        recipes.load(SAC, ["runner.use=ray", "runner.storages=-1"])


# -- sampling over storages (a real Ray instance) ------------------------------------------------------------


@pytest.mark.slow
def test_storages_ask_for_a_cpu_share_and_a_cluster_without_room_for_every_actor_is_one_line(ray_instance):
    """Storages ask Ray for a sliver of a CPU (Ray spreads only actors that ask for something: with none, both
    storages sat on one node and one lost node took them all). So workers that fill every CPU leave no room
    for them, and would wait forever: refused, as too many workers or learners are."""
    from rlplug.plugins.runners.ray.cluster import check_resources
    from rlplug.plugins.runners.ray.runner import RayRunner

    check_resources(RayRunner(workers=1, storages=2))  # 1.02 of the instance's 2 CPUs
    for runner, path in [(RayRunner(workers=2, storages=2), "runner.workers"),
                         (RayRunner(workers=3), "runner.workers"),
                         (RayRunner(workers=1, learners=2), "runner.workers")]:
        with pytest.raises(UserError, match="the Ray cluster has 2") as caught:
            check_resources(runner)
        assert caught.value.path == path


def test_uniform_samples_are_one_buffers_over_the_storages(ray_instance):
    """Storages of 30 and 10 items: each item is drawn with probability 1/40, so the first storage gives 3/4."""
    replay = sharded("uniform", [30, 10])
    assert len(replay) == 40 and replay.metrics()["storage_sizes"] == 40.0
    counts = counts_of(replay, 40)
    assert abs(float(counts[:30].sum() / counts.sum()) - 0.75) < 0.01  # about 5 standard deviations
    # chi-square over the 40 items, 39 degrees of freedom: 80 is beyond its 99.99th percentile
    assert chi_square(counts, torch.full((40,), 1 / 40)) < 80
    # picklable (actor handles): a learner elsewhere samples from the same storages
    sizes = ray.get(ray.remote(lambda again: (len(again), again.sample(16).batch_size[0])).remote(replay))
    assert sizes == (40, 16)
    # the copies the learners sample through, reseeded by rank, draw their storages' shares apart
    copies = [pickle.loads(pickle.dumps(replay)) for _ in range(3)]
    for rank, copy in zip((0, 1, 0), copies):
        copy.reseed(rank)
    shares = [[int((copy.sample(32).get("observation") < 30).sum()) for _ in range(10)] for copy in copies]
    assert shares[0] != shares[1] and shares[0] == shares[2]
    # an update's samples in one round trip: each part a sample of its own, not a run of one storage's items
    parts = list(replay.sample_many(256, 120))
    assert [part.batch_size[0] for part in parts] == [256] * 120
    ids = [part.get("observation").reshape(-1).long() for part in parts]
    assert all(0.6 < float((part < 30).float().mean()) < 0.9 for part in ids)  # 3/4, give or take 5 deviations
    assert chi_square(torch.bincount(torch.cat(ids), minlength=40).float(), torch.full((40,), 1 / 40)) < 80


@pytest.mark.slow
def test_prioritized_samples_and_weights_are_one_buffers(ray_instance):
    """Items 0..11 over storages of 8 and 4, priority id + 1: the draws follow one buffer's P(i), and every
    importance weight is the one a single buffer holding the same items gives (storage 1's smallest priority
    is 9, the buffer's 1: its weights hold only against the global minimum)."""
    replay = sharded("prioritized", [8, 4])
    priorities = torch.arange(12) + 1.0
    index = torch.cat([torch.arange(8), 50 + torch.arange(4)])  # storage 1's items from its index 50 on
    replay.update_priority(index, priorities)
    replay.step(0)

    one = PrioritizedReplayBuffer(12, alpha=0.6, beta=0.4, beta_final=1.0, eps=1e-6, total_frames=None)
    one.extend(items(0, 12))
    one.update_priority(torch.arange(12), priorities)
    counts = counts_of(replay, 12)
    # 11 degrees of freedom: 45 is beyond the 99.99th percentile
    assert chi_square(counts, one.probabilities().float()) < 45

    sample = replay.sample(64)
    single = one.sample(512)
    weight_of = dict(zip(single.get("observation").reshape(-1).long().tolist(), single.get("weight").tolist()))
    for item, weight in zip(sample.get("observation").reshape(-1).long().tolist(), sample.get("weight").tolist()):
        assert weight == pytest.approx(weight_of[item], rel=1e-6)
        least = float(priorities.min() + 1e-6) ** 0.6
        assert weight == pytest.approx(((float(priorities[item]) + 1e-6) ** 0.6 / least) ** -0.4, rel=1e-6)


@pytest.mark.slow
def test_a_priority_update_reaches_the_storage_that_holds_the_item(ray_instance):
    replay = sharded("prioritized", [6, 6])
    sample = replay.sample(200)
    ids, index = sample.get("observation").reshape(-1).long(), sample.get("index")
    assert set(ids.tolist()) == set(range(12))  # every item drawn: the priorities are all 1
    assert torch.equal(index // 50, (ids >= 6).long())  # (storage, index there) of the item drawn
    held = {int(i): int(j) for i, j in zip(ids, index)}
    replay.update_priority(torch.tensor([held[7]]), torch.tensor([9.0]))
    first, second = (ray.get(shard.state_dict.remote())["sampler"]["priorities"] for shard in replay.shards)
    assert float(second[held[7] - 50]) == pytest.approx(9.0 + 1e-6)  # item 7: storage 1, its index 1
    assert bool((second[:6] != 1.0).sum() == 1) and bool((first[:6] == 1.0).all())
    # an update's samples, taken one at a time: each drawn after the last one's priorities went back
    draws = replay.sample_many(200, 2)
    before = next(draws)
    replay.update_priority(before.get("index"), torch.ones(200))
    after = next(draws).get("observation").reshape(-1).long()
    assert int((after == 7).sum()) < 40  # item 7 back at priority 1: about 17 of 200, where 9 gave about 50


# -- the command line ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pendulum_sac_on_two_storages_and_two_learners_logs_them_and_resumes(tmp_path):
    """rllte's layout, shortened: ``python -m rlplug run recipes/pendulum-sac.toml --set runner.use=ray --set
    runner.workers=2 --set runner.storages=2 --set runner.learners=2``: 2 workers write into 2 storages and 2
    learners in one torch.distributed group sample from them, every frame stored once; then ``resume``: the
    storages hold the checkpoint's transitions again; then back to the local runner, said in one line."""
    out = tmp_path / "run"
    result = run_cli("run", str(SAC), *sets(*TWO_WORKERS, "runner.storages=2", "runner.learners=2",
                                            *FEWER_ROUNDS, "run.total_frames=512", "run.checkpoint_every_frames=256",
                                            "eval.every_frames=0", "eval.episodes=1", "run.log_every_frames=128"),
                     "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = metrics(out)
    assert all(float(r["storages"]) == 2.0 and float(r["storage_restarts"]) == 0.0 for r in rows)
    assert all(float(r["learners"]) == 2.0 for r in rows)
    last = rows[-1]
    assert float(last["storage_sizes"]) == 512.0 and float(last["buffer_size"]) == 512.0  # stored once, not per learner
    assert last["loss_actor"] and last["allreduce_ms"]  # the learners learned, together
    state = torch.load(out / "checkpoint.pt", weights_only=True)["algorithm"]["replay_buffer"]
    assert [shard["len"] for shard in state["shards"]] == [256, 256]  # worker i wrote to storage i

    # resumed with the training process as the one learner: it samples the storages itself
    resumed = run_cli("resume", str(out), "--set", "run.total_frames=768", "--set", "runner.learners=1",
                      timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["frames"] == 768
    last = metrics(out)[-1]
    assert float(last["storage_sizes"]) == 768.0 and last["loss_actor"]  # the 512 of the checkpoint, 256 more
    assert float(last.get("learners") or 1.0) == 1.0
    # back to one buffer in this process: the storages' contents are not converted, said in one line
    local = run_cli("resume", str(out), "--set", "run.total_frames=1024", "--set", 'runner={use="local"}',
                    timeout=400)
    assert local.returncode == 0, local.stderr[-2000:]
    assert "the checkpoint's replay buffer was kept in another layout (runner.storages differs)" in local.stderr


@pytest.mark.slow
@pytest.mark.parametrize("recipe, overrides, fragment", [
    ("cartpole-ppo.toml", ["runner.use=ray", "runner.storages=1"], "learns without one"),
    ("pendulum-sac.toml", [*TWO_WORKERS, "runner.storages=3"], "3 storages for 2 workers"),
    ("pendulum-sac.toml", [*TWO_WORKERS, "runner.mode=gradients", "runner.storages=1"], "mode = 'gradients'"),
    ("pendulum-sac.toml", [*TWO_WORKERS, "runner.storages=1", "algorithm.replay_buffer.storage=memmap"],
     "storage = 'memory'"),
])
def test_storages_refused_in_one_line_before_any_run_directory(tmp_path, recipe, overrides, fragment):
    out = tmp_path / "refused"
    result = run_cli("run", str(ROOT / "recipes" / recipe), *sets(*overrides), "--out", str(out), timeout=120)
    one_line_error(result, "runner.storages: ", fragment)
    assert not out.exists()


# -- a storage lost with its node ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_storage_lost_with_its_node_restarts_empty_and_the_run_finishes(two_nodes, tmp_path):
    """Two workers and two storages spread over the two nodes; the second node killed once training is under
    way: its storage comes back empty on the head (counted), its worker fills it again, the run ends."""
    two_nodes.ask("add")
    out = tmp_path / "run"
    arguments = sets(*TWO_WORKERS, *FEWER_ROUNDS, "algorithm.batch_size=64", "runner.storages=2",
                     f"runner.address={two_nodes.address}", "run.total_frames=1536", "run.log_every_frames=64",
                     "eval.every_frames=0", "eval.episodes=1")
    process = start_cli("run", str(SAC), *arguments, "--out", str(out))
    wait_for_training(out, process)
    placed = metrics(out)[-1]
    if float(placed.get("storage_nodes") or 0) < 2:  # SPREAD is Ray's best effort, not a promise
        process.kill()
        process.communicate()
        pytest.skip(f"Ray placed the storages on {placed.get('storage_nodes')} node(s) this time: no storage to lose")
    two_nodes.ask("remove")
    result = finished(process)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    rows = metrics(out)
    assert float(rows[-1]["storage_restarts"]) >= 1.0, rows[-1]
    assert float(rows[-1]["worker_restarts"]) >= 1.0, rows[-1]
    # the lost storage's share was dropped and collected again: fewer stored than collected, yet growing
    stored = [float(row["storage_sizes"]) for row in rows]
    assert stored[-1] < 1536 and stored[-1] > stored[0]
