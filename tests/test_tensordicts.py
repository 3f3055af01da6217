"""``rlplug.core.tensordicts.trusted``: the hot paths' TensorDicts, built without re-validation, must be the
TensorDicts the checked constructor builds (keys, nesting, values, batch size, device)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rlplug.core.tensordicts import trusted


@settings(max_examples=30, deadline=None)
@given(batch=st.lists(st.integers(1, 4), min_size=1, max_size=2), widths=st.lists(st.integers(1, 3), min_size=1,
       max_size=4), device=st.sampled_from([None, "cpu"]))
def test_trusted_is_the_checked_constructor_without_the_checks(batch, widths, device):
    leaves = {f"key{i}": torch.randn(*batch, width) for i, width in enumerate(widths)}
    nested = {**leaves, "next": {"inner": torch.zeros(*batch, 1, dtype=torch.bool), "deeper": dict(leaves)}}
    ours, checked = trusted(nested, batch, device), TensorDict(nested, batch_size=batch, device=device)
    assert ours.batch_size == checked.batch_size and ours.device == checked.device
    assert set(ours.keys(True, True)) == set(checked.keys(True, True))
    for key in checked.keys(True, True):
        assert torch.equal(ours.get(key), checked.get(key))
    assert ours.get("next").batch_size == checked.get("next").batch_size
