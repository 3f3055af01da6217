"""The canonical PPO's fewer-kernels paths each give what the plain path gives.

- collection acts on a categorical head's index directly: the same actions and log-probabilities as the
  policy's actions made one-hot and read back, without the one-hot and the argmax;
- an epoch gathers its shuffled batch once and slices minibatches from it: the same minibatches, and the same
  parameters after an update, as indexing each minibatch with its share of the permutation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CANONICAL, built_algorithm
from tensordict import TensorDict
from torch.profiler import ProfilerActivity, profile

from rlplug.core.acting import ArrayActor, env_action
from rlplug.core.training import Prepared


def aten_ops(work) -> list[str]:
    """The names of the aten operators ``work()`` calls itself (not those they call inside)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work()

    def inside_another(event) -> bool:
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        return parent is not None

    return [event.name for event in prof.events() if event.name.startswith("aten::") and not inside_another(event)]


@pytest.fixture(scope="module")
def canonical():
    return built_algorithm(CANONICAL, 0, ["run.total_frames=1024"])


@pytest.mark.parametrize("deterministic", [False, True])
def test_collection_acts_as_the_policy_without_a_one_hot_round_trip(canonical, deterministic):
    algorithm, _ = canonical
    actor = ArrayActor.for_policy(algorithm.policy, "cpu", seed=0)
    assert actor is not None and actor.one_hot, "the canonical CartPole policy records one-hot actions"
    observations = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    torch.manual_seed(3)
    actions, log_probs = actor.act(observations, deterministic)
    torch.manual_seed(3)
    with torch.inference_mode():
        plain_action, plain_log_prob = algorithm.actor.act(torch.from_numpy(observations), deterministic)
    np.testing.assert_array_equal(actions, env_action(plain_action, True))
    np.testing.assert_array_equal(log_probs, plain_log_prob.numpy())
    ops = aten_ops(lambda: actor.act(observations, deterministic))
    assert "aten::one_hot" not in ops, ops
    assert ops.count("aten::argmax") == (1 if deterministic else 0), ops  # the mode's choice, no read-back


class PerMinibatchGather(Prepared):
    """The plain path: each minibatch indexed with its share of the epoch's permutation."""

    def minibatch(self, index: int):
        if index == 0:
            self.order = torch.randperm(self.length).split(self.minibatch_size)
        rows = self.order[index]
        return TensorDict({key: value[rows] for key, value in self.data.items()}, batch_size=[len(rows)])


def test_an_epoch_gathers_its_shuffled_batch_once_into_the_same_minibatches():
    data = {"observation": torch.randn(100, 4), "advantage": torch.randn(100), "action": torch.randn(100, 2)}
    fast, plain = Prepared(data, 32, None), PerMinibatchGather(data, 32, None)
    assert fast.steps == 4
    for epoch in range(2):
        torch.manual_seed(epoch)
        ours = [fast.minibatch(i) for i in range(fast.steps)]
        torch.manual_seed(epoch)
        theirs = [plain.minibatch(i) for i in range(plain.steps)]
        assert [len(m) for m in ours] == [32, 32, 32, 4]
        for mine, reference in zip(ours, theirs):
            assert (mine == reference).all()
    torch.manual_seed(0)
    ops = aten_ops(lambda: [fast.minibatch(i) for i in range(fast.steps)])
    assert ops.count("aten::index_select") == len(data), ops
    assert "aten::index" not in ops, "a minibatch was gathered on its own"
    assert len(ops) == 1 + 2 * len(data), ops  # the permutation, then one gather and one split per key


def test_a_ppo_update_on_minibatches_sliced_from_one_gather_ends_where_the_plain_path_ends():
    overrides = ["run.total_frames=1024", "algorithm.minibatch_size=64", "algorithm.epochs=3"]
    (fast, [batch]), (plain, [same]) = (built_algorithm(CANONICAL, 0, overrides) for _ in range(2))
    plain_prepare = plain.prepare

    def prepare_plain(*args):
        prepared = plain_prepare(*args)
        return PerMinibatchGather(prepared.data, prepared.minibatch_size, prepared.explained_variance)

    plain.prepare = prepare_plain
    torch.manual_seed(5)
    ours = fast.update(batch)
    torch.manual_seed(5)
    theirs = plain.update(same)
    assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-7)
    moved = False
    for mine, reference, before in zip(fast.parameters, plain.parameters,
                                       built_algorithm(CANONICAL, 0, overrides)[0].parameters):
        torch.testing.assert_close(mine, reference)
        moved = moved or not torch.equal(mine, before)
    assert moved, "the update changed no parameter"
