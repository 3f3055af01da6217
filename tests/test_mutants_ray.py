"""Tests aimed at one-line mistakes in the Ray runner that a mutation run found no other test failing on, or
failing by a hair (issue 42), on a real local Ray instance:

- the replay storages: worker ``i`` writes into storage ``i % M`` and the driver's own writes go round the
  storages in turn, never all into storage 0;
- several learners: the all-reduce of their gradients is the mean, not the sum (Adam's step hides a doubled
  gradient, so the gradients themselves are checked).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import ray
import test_ray
import torch
from conftest import ROOT, built_algorithm
from tensordict import TensorDict
from test_ray_storages import component

from rlplug.plugins.algorithms.offpolicy.base import replay_transitions
from rlplug.plugins.runners.ray.storages import ShardedReplay, Storage, writers

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # the Ray tests run one after another (README)

#: test_ray's fixture: its module's local Ray instance
ray_instance = test_ray.ray_instance


def rollout(steps: int, first: int) -> TensorDict:
    """A worker's rollout of one env and ``steps`` steps (``[envs, time]``), observations numbered from
    ``first``."""
    observation = torch.arange(first, first + steps, dtype=torch.float32).reshape(1, steps, 1)
    return TensorDict({"observation": observation, "action": torch.zeros(1, steps, 1),
                       "next": {"observation": observation + 1, "reward": torch.zeros(1, steps, 1),
                                "terminated": torch.zeros(1, steps, 1, dtype=torch.bool)}}, [1, steps])


def sizes(replay: ShardedReplay) -> list[int]:
    return [int(ray.get(shard.mass.remote())["size"]) for shard in replay.shards]


def test_writes_spread_over_the_storages(ray_instance):
    """Two storages, four workers writing 1, 2, 3 and 4 transitions: storage 0 holds workers 0 and 2's (4),
    storage 1 workers 1 and 3's (6); then the driver's own writes of 5 and 7 go to storage 0, then 1."""
    built = component("uniform")
    shards = [ray.remote(Storage).remote(built, 50, i, {}) for i in range(2)]
    # started first: a write waits STORAGE_TIMEOUT at most, and a new actor's process may take longer on a busy host
    ray.get([shard.mass.remote() for shard in shards], timeout=300)
    replay = ShardedReplay(shards, 50, seed=0)
    config = SimpleNamespace(reward_scale=1.0, reward_offset=0.0, reward_clip=None)
    transitions = functools.partial(replay_transitions, config=config, key="observation")
    algorithm = SimpleNamespace(replay_storage=lambda: SimpleNamespace(writer=lambda: transitions))
    for worker, writer in enumerate(writers(replay, algorithm, 4)):
        assert writer.write(rollout(worker + 1, 10 * worker))
    assert sizes(replay) == [1 + 3, 2 + 4]
    stored = {int(i) for i in replay.sample(400).get("observation").reshape(-1).tolist()}
    assert stored == {0, 10, 11, 20, 21, 22, 30, 31, 32, 33}, "every worker's transitions, each once stored"
    for steps in (5, 7):
        replay.extend(rollout(steps, 100).reshape(-1))
    assert sizes(replay) == [4 + 5, 6 + 7]


@pytest.mark.usefixtures("ray_instance")
def test_the_learners_all_reduce_is_the_mean_of_their_gradients():
    """Two learners in their gloo group, learner ``r`` holding gradients ``r + 1`` (and ``10 (r + 1)`` in a nested
    entry): both end with the mean, 1.5 and 15; an integer count stays each learner's own."""
    from test_ray_learners import group_for

    sac = ROOT / "recipes" / "pendulum-sac.toml"
    overrides = ["algorithm.learning_starts=0", "algorithm.batch_size=32"]
    driver, _ = built_algorithm(sac, 0, overrides)
    group = group_for(sac, overrides, driver)

    def reduced(learner, rank: int) -> TensorDict:
        from rlplug.plugins.runners.ray.learners import mean_over_learners

        gradients = TensorDict({"weight": torch.full((2, 3), float(rank + 1)),
                                "critic": {"bias": torch.tensor([10.0 * (rank + 1)])},
                                "batches": torch.tensor([rank + 5])}, [])
        mean_over_learners(gradients)
        return gradients

    try:
        group.start(driver)
        answers = ray.get([actor.__ray_call__.remote(reduced, rank) for rank, actor in enumerate(group.actors)],
                          timeout=120)
    finally:
        group.stop()
    for rank, gradients in enumerate(answers):
        assert gradients.get("weight").tolist() == [[1.5] * 3] * 2
        assert gradients.get(("critic", "bias")).tolist() == [15.0]
        assert gradients.get("batches").tolist() == [rank + 5]
