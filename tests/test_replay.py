"""The replay buffers ``uniform`` and ``prioritized`` (``rlplug/replay.py``).

Why: a replay buffer's bugs do not crash, they bias learning: a ring that overwrites the wrong slot, a
sampler that never reaches some items, priorities that do not shape sampling as ``p^alpha``, importance
weights off by a normalisation, new transitions that are never sampled, or a resumed run that samples
differently from the run left alone. So: ring contents for arbitrary splits of the data into batches
(hypothesis), empirical sampling frequencies against ``p^alpha`` with a fixed seed and many draws, the
importance weights against a numpy reference, and state round trips through ``torch.save`` /
``torch.load(weights_only=True)`` that must sample exactly what the original does.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

import rlplug
from rlplug.plugins.replay_buffers.buffers import ReplayBuffer
from rlplug.plugins.replay_buffers.prioritized import PrioritizedReplayBuffer

SETTINGS = settings(max_examples=40, deadline=None)


def transitions(values, batch_shape=None) -> TensorDict:
    """Transitions whose ``observation`` is ``values`` (to identify them), with the usual ``next`` keys."""
    values = torch.as_tensor(values, dtype=torch.float32)
    n = values.numel()
    td = TensorDict({"observation": values.reshape(n, 1), "action": values.reshape(n, 1) * 2,
                     "next": {"observation": values.reshape(n, 1) + 1, "reward": torch.ones(n, 1),
                              "done": torch.zeros(n, 1, dtype=torch.bool)}}, [n])
    return td.reshape(batch_shape) if batch_shape else td


def make(name, tmp_path, **params):
    return rlplug.make("replay_buffer", name, run_dir=tmp_path, seed=0, device="cpu", **params)


def stored(buffer) -> list[float]:
    """The observations in storage order."""
    state = buffer.state_dict()
    if not state["len"]:
        return []
    return state["data"]["observation"].reshape(-1).tolist()


def roundtrip(state):
    data = io.BytesIO()
    torch.save(state, data)
    data.seek(0)
    return torch.load(data, weights_only=True)


def test_built_from_the_registry(tmp_path):
    assert isinstance(make("uniform", tmp_path, capacity=4), ReplayBuffer)
    buffer = make("prioritized", tmp_path, capacity=4)
    assert isinstance(buffer, PrioritizedReplayBuffer)
    assert (buffer.alpha, buffer.beta, buffer.eps) == (0.6, 0.4, 1e-6)
    with pytest.raises(rlplug.UserError):
        make("uniform", tmp_path, capacity=0)
    with pytest.raises(rlplug.UserError):
        make("prioritized", tmp_path, alpha=1.5)


# -- uniform ----------------------------------------------------------------------------------------------


@SETTINGS
@given(capacity=st.integers(1, 12), sizes=st.lists(st.integers(0, 15), min_size=1, max_size=8))
def test_ring_keeps_the_newest_capacity_items(tmp_path_factory, capacity, sizes):
    buffer = make("uniform", tmp_path_factory.mktemp("rb"), capacity=capacity)
    total = 0
    for size in sizes:
        buffer.extend(transitions(torch.arange(total, total + size)))
        total += size
    assert len(buffer) == min(total, capacity)
    assert buffer.write_count == total
    assert sorted(stored(buffer)) == list(range(max(total - capacity, 0), total))
    if all(size <= capacity for size in sizes):  # the plain ring: item k sits at k mod capacity
        assert stored(buffer) == [float(k) for k in sorted(range(max(total - capacity, 0), total),
                                                           key=lambda k: k % capacity)]
        assert buffer.cursor == total % capacity


@SETTINGS
@given(capacity=st.integers(1, 12), sizes=st.lists(st.integers(1, 15), min_size=1, max_size=8),
       storage=st.sampled_from(["memory", "memmap"]), seed=st.integers(0, 3))
def test_writes_and_samples_as_torchrls_own_buffer_does(tmp_path_factory, capacity, sizes, storage, seed):
    """The buffer writes and reads the storage's tensors itself (TorchRL's layers cost ~10x more per call):
    the ring, its bookkeeping and every sample must stay what TorchRL's buffer over the same storage gives."""
    from torchrl.data import LazyMemmapStorage, LazyTensorStorage, RandomSampler
    from torchrl.data import ReplayBuffer as TorchRLReplayBuffer

    directory = tmp_path_factory.mktemp("rb")
    ours = rlplug.make("replay_buffer", "uniform", capacity=capacity, storage=storage, run_dir=directory / "ours",
                       seed=seed, device="cpu")
    reference_storage = (LazyTensorStorage(capacity) if storage == "memory"
                         else LazyMemmapStorage(capacity, scratch_dir=str(directory / "theirs")))
    generator = torch.Generator().manual_seed(seed)
    theirs = TorchRLReplayBuffer(storage=reference_storage, sampler=RandomSampler(), generator=generator)
    total = 0
    for size in sizes:
        batch = transitions(torch.arange(total, total + size))
        index = ours.extend(batch)
        if size <= capacity:
            assert torch.equal(index, theirs.extend(batch))
        else:
            theirs.extend(batch[size - capacity:])
        total += size
        assert len(ours) == len(theirs)
        sample = ours.sample(5)
        expected = theirs.sample(5)
        for key in expected.keys(include_nested=True, leaves_only=True):
            assert torch.equal(sample.get(key), expected.get(key)), key
    assert ours.write_count == total


def test_any_batch_shape_is_flattened(tmp_path):
    buffer = make("uniform", tmp_path, capacity=100)
    buffer.extend(transitions(torch.arange(24), batch_shape=(4, 6)))
    assert len(buffer) == 24
    assert stored(buffer) == [float(v) for v in range(24)]
    sample = buffer.sample(7)
    assert sample.batch_size == torch.Size([7])
    assert torch.equal(sample["action"], sample["observation"] * 2)  # rows stay whole
    assert torch.equal(sample["next", "observation"], sample["observation"] + 1)


def test_uniform_sampling_covers_every_item_evenly(tmp_path):
    buffer = make("uniform", tmp_path, capacity=10)
    buffer.extend(transitions(torch.arange(25)))  # keeps 15..24
    draws = torch.cat([buffer.sample(1000)["observation"].reshape(-1) for _ in range(20)])
    counts = torch.bincount(draws.long() - 15, minlength=10)
    assert counts.sum() == 20_000 and counts.numel() == 10
    assert ((counts - 2000).abs() < 5 * (2000 * 0.9) ** 0.5).all(), counts  # binomial, 5 standard deviations


def test_same_seed_same_samples_other_seed_others(tmp_path):
    def draws(seed):
        buffer = rlplug.make("replay_buffer", "uniform", capacity=50, seed=seed, run_dir=tmp_path, device="cpu")
        buffer.extend(transitions(torch.arange(50)))
        return buffer.sample(32)["observation"]

    assert torch.equal(draws(0), draws(0))
    assert not torch.equal(draws(0), draws(1))


def test_empty_buffer_cannot_sample(tmp_path):
    with pytest.raises(RuntimeError, match="empty"):
        make("uniform", tmp_path, capacity=3).sample(1)


# -- state --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["uniform", "prioritized"])
def test_state_round_trips_and_samples_identically(tmp_path, name):
    buffer = make(name, tmp_path, capacity=16)
    buffer.extend(transitions(torch.arange(21)))
    if name == "prioritized":
        sample = buffer.sample(8)
        buffer.update_priority(sample["index"], torch.linspace(0, 3, 8))
    buffer.sample(5)  # move the generator on
    state = roundtrip(buffer.state_dict())

    other = rlplug.make("replay_buffer", name, capacity=16, seed=123, run_dir=tmp_path, device="cpu")
    other.load_state_dict(state)
    assert len(other) == len(buffer) and other.cursor == buffer.cursor and other.write_count == buffer.write_count
    for _ in range(3):
        mine, theirs = buffer.sample(10), other.sample(10)
        assert torch.equal(mine["observation"], theirs["observation"])
        if name == "prioritized":
            assert torch.equal(mine["index"], theirs["index"]) and torch.equal(mine["weight"], theirs["weight"])
    buffer.extend(transitions([100.0, 101.0]))
    other.extend(transitions([100.0, 101.0]))
    assert stored(buffer) == stored(other)
    assert torch.equal(buffer.sample(10)["observation"], other.sample(10)["observation"])


def test_state_of_an_empty_buffer_round_trips(tmp_path):
    buffer = make("prioritized", tmp_path, capacity=4)
    other = make("prioritized", tmp_path, capacity=4)
    other.load_state_dict(roundtrip(buffer.state_dict()))
    assert len(other) == 0
    other.extend(transitions([1.0]))
    assert other.sample(2)["observation"].reshape(-1).tolist() == [1.0, 1.0]


def test_state_of_another_capacity_is_refused(tmp_path):
    state = make("uniform", tmp_path, capacity=4).state_dict()
    with pytest.raises(ValueError, match="capacity"):
        make("uniform", tmp_path, capacity=5).load_state_dict(state)


@pytest.mark.parametrize("name", ["uniform", "prioritized"])
def test_memmap_storage_writes_under_run_dir_and_reopens(tmp_path, name):
    buffer = make(name, tmp_path, capacity=8, storage="memmap")
    buffer.extend(transitions(torch.arange(11)))
    files = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.memmap")}
    assert "replay/observation.memmap" in files and "replay/next/reward.memmap" in files
    state = roundtrip(buffer.state_dict())
    assert "data" not in state  # the transitions stay in the files

    other = rlplug.make("replay_buffer", name, capacity=8, storage="memmap", seed=9, run_dir=tmp_path, device="cpu")
    other.load_state_dict(state)
    assert len(other) == 8
    assert torch.equal(buffer.sample(20)["observation"], other.sample(20)["observation"])
    other.extend(transitions([50.0]))
    assert 50.0 in other.sample(400)["observation"].reshape(-1).tolist()


def episodes(first_step: int, steps: int) -> TensorDict:
    """Two envs' steps ``first_step ..`` interleaved row by row, with ``episode`` (a new one every 7 steps of an
    env) and ``step``, as the off-policy loop labels them for recurrent networks."""
    t = torch.arange(first_step, first_step + steps).repeat_interleave(2)
    env = torch.arange(2).repeat(steps)
    td = transitions(t * 2 + env)
    td.set("episode", env + 2 * (t // 7))
    td.set("step", t % 7)
    return td


@pytest.mark.parametrize("storage", ["memory", "memmap"])
@pytest.mark.parametrize("name", ["uniform", "prioritized"])
def test_a_loaded_buffer_samples_what_the_saved_one_would_after_wrapping_and_writing_on(tmp_path, name, storage):
    buffer = make(name, tmp_path, capacity=30, storage=storage)
    buffer.extend(episodes(0, 12))
    buffer.extend(episodes(12, 9))  # 42 rows into 30: the ring has wrapped
    if name == "prioritized":
        sample = buffer.sample(16)
        buffer.update_priority(sample["index"], torch.linspace(0, 5, 16))
    else:
        buffer.sample_sequences(12, 4)  # the generator moves on
    state = roundtrip(buffer.state_dict())
    other = rlplug.make("replay_buffer", name, capacity=30, storage=storage, seed=7, run_dir=tmp_path, device="cpu")
    other.load_state_dict(state)

    def same(draw):
        mine, theirs = draw(buffer), draw(other)
        assert mine.batch_size == theirs.batch_size
        for key in mine.keys(include_nested=True, leaves_only=True):
            assert torch.equal(mine.get(key), theirs.get(key)), key

    for batch in (None, episodes(21, 5)):  # as loaded, then after both store the same steps
        if batch is not None:
            assert torch.equal(buffer.extend(batch), other.extend(batch))
        assert (len(other), other.cursor, other.write_count) == (len(buffer), buffer.cursor, buffer.write_count)
        for _ in range(3):
            same(lambda b: b.sample(16))
            if name == "uniform":
                same(lambda b: b.sample_sequences(12, 4))


def test_sequences_are_consecutive_steps_of_one_episode_across_the_rings_end(tmp_path):
    buffer = make("uniform", tmp_path, capacity=30)
    buffer.extend(episodes(0, 20))  # 40 rows into 30: steps of both envs wrap around the ring's end
    runs = buffer.sample_sequences(400, 4)
    assert runs.batch_size == torch.Size([100, 4])
    assert (runs["episode"] == runs["episode"][:, :1]).all()
    assert (runs["step"] == runs["step"][:, :1] + torch.arange(4)).all()
    assert runs["observation"].min() >= 10  # only what is still stored: rows 10..39
    with pytest.raises(rlplug.UserError, match="sequence_length"):
        buffer.sample_sequences(16, 8)  # no episode has 8 steps


def test_a_batch_with_other_keys_is_refused(tmp_path):
    buffer = make("uniform", tmp_path, capacity=8)
    buffer.extend(transitions([1.0, 2.0]))
    extra = transitions([3.0])
    extra.set("extra", torch.zeros(1, 1))
    with pytest.raises(ValueError, match="extra"):
        buffer.extend(extra)
    with pytest.raises(ValueError, match="action"):
        buffer.extend(transitions([3.0]).exclude("action"))
    assert len(buffer) == 2 and stored(buffer) == [1.0, 2.0]


def test_memmap_state_without_its_files_is_a_user_error(tmp_path):
    buffer = make("uniform", tmp_path / "a", capacity=4, storage="memmap")
    buffer.extend(transitions([1.0, 2.0]))
    elsewhere = make("uniform", tmp_path / "b", capacity=4, storage="memmap")
    with pytest.raises(rlplug.UserError, match="missing"):
        elsewhere.load_state_dict(buffer.state_dict())


# -- prioritized --------------------------------------------------------------------------------------------


def test_sampling_frequencies_follow_priority_to_the_alpha(tmp_path):
    alpha = 0.7
    buffer = make("prioritized", tmp_path, capacity=8, alpha=alpha, eps=1e-6)
    buffer.extend(transitions(torch.arange(6)))
    priorities = torch.tensor([0.1, 0.5, 1.0, 2.0, 4.0, 0.0])
    buffer.update_priority(torch.arange(6), priorities)
    expected = (priorities.double() + 1e-6) ** alpha
    expected /= expected.sum()
    assert torch.allclose(buffer.probabilities(), expected)

    n = 200_000
    index = torch.cat([buffer.sample(10_000)["index"] for _ in range(n // 10_000)])
    frequencies = torch.bincount(index, minlength=6).double() / n
    tolerance = 5 * (expected * (1 - expected) / n).sqrt()  # five binomial standard deviations
    assert ((frequencies - expected).abs() <= tolerance + 1e-12).all(), (frequencies, expected)
    assert frequencies[5] < 1e-3  # a priority of ~eps is (almost) never drawn
    chi_square = (((frequencies[:5] - expected[:5]) ** 2) / expected[:5]).sum() * n
    assert chi_square < 20.5  # the 0.999 quantile of chi-square with 4 degrees of freedom is 18.5


def test_sampled_rows_match_their_index(tmp_path):
    buffer = make("prioritized", tmp_path, capacity=5)
    buffer.extend(transitions(torch.arange(7)))  # 5, 6, 2, 3, 4 at slots 0..4
    sample = buffer.sample(50)
    assert torch.equal(sample["observation"].reshape(-1), torch.tensor(stored(buffer))[sample["index"]])
    assert sample["weight"].shape == (50,) and sample["weight"].dtype == torch.float32


@SETTINGS
@given(priorities=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=20), alpha=st.floats(0.0, 1.0),
       beta=st.floats(0.0, 1.0), signs=st.booleans())
def test_importance_weights_match_a_numpy_reference(tmp_path_factory, priorities, alpha, beta, signs):
    eps = 1e-3
    n = len(priorities)
    buffer = make("prioritized", tmp_path_factory.mktemp("rb"), capacity=32, alpha=alpha, beta=beta, eps=eps)
    buffer.extend(transitions(torch.arange(n)))
    given_priorities = np.array(priorities) * (-1 if signs else 1)  # td errors may be negative: |.| is taken
    buffer.update_priority(torch.arange(n), torch.tensor(given_priorities))
    sample = buffer.sample(64)

    p = (np.abs(given_priorities) + eps) ** alpha
    probability = p / p.sum()
    weights = (n * probability) ** -beta
    reference = weights / weights.max()
    index = sample["index"].numpy()
    np.testing.assert_allclose(sample["weight"].numpy(), reference[index], rtol=1e-5)
    np.testing.assert_allclose(buffer.probabilities().numpy(), probability, rtol=1e-9)
    assert (sample["weight"] <= 1).all() and (sample["weight"] > 0).all()


def test_beta_zero_gives_unit_weights_and_beta_can_be_set(tmp_path):
    buffer = make("prioritized", tmp_path, capacity=16, beta=0.0)
    buffer.extend(transitions(torch.arange(10)))
    buffer.update_priority(torch.arange(10), torch.arange(10.0) * 3)
    assert torch.equal(buffer.sample(100)["weight"], torch.ones(100))
    buffer.beta = 1.0
    assert buffer.sample(100)["weight"].min() < 1


def test_beta_anneals_linearly_over_total_frames(tmp_path):
    buffer = rlplug.make("replay_buffer", "prioritized", beta=0.4, beta_final=1.0, capacity=4, total_frames=1000,
                         run_dir=tmp_path, seed=0, device="cpu")
    for frames, beta in [(0, 0.4), (500, 0.7), (1000, 1.0), (5000, 1.0)]:
        buffer.step(frames)
        assert buffer.beta == pytest.approx(beta)


def test_update_priority_shifts_sampling(tmp_path):
    buffer = make("prioritized", tmp_path, capacity=10, alpha=1.0)
    buffer.extend(transitions(torch.arange(10)))
    buffer.update_priority(torch.arange(10), torch.full((10,), 1e-3))
    buffer.update_priority(torch.tensor([7]), torch.tensor([1e3]))
    index = buffer.sample(1000)["index"]
    assert (index == 7).float().mean() > 0.99


def test_new_transitions_get_the_largest_priority_seen(tmp_path):
    buffer = make("prioritized", tmp_path, capacity=10, alpha=0.6, eps=0.0 + 1e-6)
    buffer.extend(transitions(torch.arange(3)))
    assert torch.allclose(buffer.probabilities(), torch.full((3,), 1 / 3, dtype=torch.float64))  # all start at 1
    buffer.update_priority(torch.tensor([0, 1, 2]), torch.tensor([5.0, 0.5, 2.0]))
    buffer.extend(transitions([10.0, 11.0]))
    p = buffer.probabilities()
    assert p[3] == p[0] and p[4] == p[0] and p[3] > p[2] > p[1]
    buffer.update_priority(torch.tensor([1]), torch.tensor([1.0]))  # a lower priority leaves the maximum
    buffer.extend(transitions([12.0]))
    assert buffer.probabilities()[5] == buffer.probabilities()[0]


def test_overwritten_slots_take_the_new_transitions_priority(tmp_path):
    buffer = make("prioritized", tmp_path, capacity=3, alpha=1.0)
    buffer.extend(transitions(torch.arange(3)))
    buffer.update_priority(torch.arange(3), torch.tensor([0.0, 9.0, 0.0]))  # max is now 9 + eps
    buffer.extend(transitions([3.0]))  # overwrites slot 0
    p = buffer.probabilities()
    assert p[0] == p[1] and p[2] < p[0]


def test_bad_priorities_are_refused(tmp_path):
    buffer = make("prioritized", tmp_path, capacity=4)
    buffer.extend(transitions(torch.arange(4)))
    with pytest.raises(ValueError, match="NaN"):
        buffer.update_priority(torch.tensor([0]), torch.tensor([float("nan")]))
    with pytest.raises(ValueError):
        buffer.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(IndexError):
        buffer.update_priority(torch.tensor([4]), torch.tensor([1.0]))
