"""The factory signature is the schema: conversions and rejections of the parameter validator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlplug.errors import ParameterError
from rlplug.registry.schema import Range, Schema, Unbounded, convert, validate


def factory(
    count: Annotated[int, Range(ge=1)],
    rate: Annotated[float, Range(gt=0.0, le=1.0)] = 0.5,
    flag: bool = False,
    mode: Literal["fast", "slow"] = "fast",
    sizes: list[int] = (8,),
    limit: int | None = None,
    seed=None,  # a context name: never a recipe key
):
    return locals()


SCHEMA = Schema.of(factory)


def check(**values):
    return validate(SCHEMA, values, what="thing 'x'")


def test_context_names_are_not_parameters():
    assert "seed" not in SCHEMA.params and SCHEMA.context == {"seed"}
    with pytest.raises(ParameterError, match="set by rlplug"):
        check(count=1, seed=3)


def test_defaults_are_filled_and_converted():
    assert check(count=2) == {"count": 2, "rate": 0.5, "flag": False, "mode": "fast", "sizes": [8], "limit": None}


@given(st.integers(min_value=1, max_value=10**9))
def test_in_range_integers_pass_and_ints_are_floats(n):
    values = check(count=n, rate=1)
    assert values["count"] == n and values["rate"] == 1.0 and isinstance(values["rate"], float)


@given(st.integers(max_value=0))
def test_out_of_range_integers_are_rejected(n):
    with pytest.raises(ParameterError, match="must be >= 1") as caught:
        check(count=n)
    assert caught.value.path == "count"


@given(st.one_of(st.text(), st.booleans(), st.lists(st.integers()),
                 st.floats(allow_nan=False).filter(lambda x: not float(x).is_integer())))
def test_non_integers_are_rejected_for_int(value):
    with pytest.raises(ParameterError, match="expected an integer"):
        check(count=value)


def test_messages_name_the_key_and_suggest():
    with pytest.raises(ParameterError, match=r"unknown key 'cuont'.*did you mean 'count'") as caught:
        check(count=1, cuont=2)
    assert caught.value.path == "cuont"
    with pytest.raises(ParameterError, match="missing required key 'count'"):
        check()
    with pytest.raises(ParameterError, match=r"one of 'fast', 'slow'.*did you mean 'slow'"):
        check(count=1, mode="slwo")
    with pytest.raises(ParameterError) as caught:
        check(count=1, sizes=[1, "a"])
    assert caught.value.path == "sizes[1]"
    with pytest.raises(ParameterError, match="must be > 0"):
        check(count=1, rate=0)


def test_optional_accepts_value_and_rejects_wrong_type():
    assert check(count=1, limit=3)["limit"] == 3
    with pytest.raises(ParameterError, match="expected int"):
        check(count=1, limit="x")


@dataclass(frozen=True)
class Settings:
    seed: int = 0
    name: str = "run"


def test_dataclass_tables_are_checked_field_by_field():
    assert convert({"seed": 4}, Settings, path="run") == Settings(seed=4)
    with pytest.raises(ParameterError) as caught:
        convert({"sed": 4}, Settings, path="run")
    assert caught.value.path == "run.sed" and "did you mean 'seed'" in caught.value.message


def limit(clip: Annotated[float, Range(gt=0.0), Unbounded()] = 1.0, lr: float = 1.0):
    return locals()


def test_infinity_only_where_it_means_no_limit():
    schema = Schema.of(limit)
    assert validate(schema, {"clip": float("inf")}, what="x")["clip"] == float("inf")
    for bad in ({"clip": float("nan")}, {"lr": float("inf")}, {"clip": -float("inf")}):
        with pytest.raises(ParameterError):
            validate(schema, bad, what="x")
