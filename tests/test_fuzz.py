"""Fuzzing the inputs users type: whatever TOML, override or command line comes in, the answer is rlplug's
one-line error (or a valid recipe), never another exception, a hang or a run directory."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest
import tomli_w
from conftest import CANONICAL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlplug import cli
from rlplug import recipe as recipes
from rlplug.errors import UserError

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

keys = st.text(min_size=1, max_size=12)
scalars = st.one_of(st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                    st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)), max_leaves=12)
documents = st.dictionaries(st.one_of(keys, st.sampled_from(["run", "env", "algorithm", "loggers", "eval"])),
                            values, max_size=6)
CANONICAL_DATA = tomllib.loads(CANONICAL.read_text())


def paths(data, prefix=()):
    """Every key path in a nested recipe, tables and list items included."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*prefix, key)
            yield from paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from paths(value, (*prefix, index))


ALL_PATHS = list(paths(CANONICAL_DATA))


def validate_only(data) -> None:
    try:
        recipes.validate(data, file="fuzz.toml")
    except UserError as error:
        assert str(error).startswith("fuzz.toml: ") and "\n" not in str(error)


@FUZZ
@given(documents)
def test_random_documents(document):
    validate_only(document)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS), st.sampled_from(["rename", "retype", "delete"]), keys, values),
                min_size=1, max_size=4))
def test_mutated_canonical_recipes(mutations):
    data = copy.deepcopy(CANONICAL_DATA)
    for path, how, new_key, new_value in mutations:
        parent = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            last = path[-1]
            if how == "delete":
                del parent[last]
            elif how == "retype":
                parent[last] = new_value
            elif isinstance(parent, dict):
                parent[new_key] = parent.pop(last)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this path
    validate_only(data)


@FUZZ
@given(st.lists(st.text(max_size=30), min_size=1, max_size=3))
def test_random_overrides(tmp_path, overrides):
    try:
        recipes.load(CANONICAL, overrides)
    except UserError as error:
        assert "\n" not in str(error)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(["run", "list", "resume", "--set", "--out", "--json", "--strict-plugins",
                                           "algorithm.lr=-1", "missing.toml", "a=b", "--", "-h"]),
                          st.text(max_size=10)), max_size=6))
def test_random_command_lines(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    if any(a in ("-h", "--help") or a.startswith("--h") for a in argv):
        argv = [a for a in argv if not a.startswith("-h") and not a.startswith("--h")]
    try:
        status = cli.main(argv)
    except SystemExit as exit:  # argparse's own usage errors
        status = exit.code
    assert status in (0, 2), (argv, status)
    assert not (tmp_path / "runs").exists() and not any(p.is_dir() for p in Path(tmp_path).iterdir())


@pytest.mark.parametrize("text", ["[run]\nseed = 1e400\n", "[run]\ntotal_frames = 1e400\n",
                                  "[algorithm]\nuse='ppo'\nlr = inf\n", "[algorithm]\nuse='ppo'\nlr = nan\n",
                                  "[env]\nuse='gym'\nid='CartPole-v1'\n[algorithm]\nuse='ppo'\nlr=" + "9" * 400 + "\n"])
def test_numbers_out_of_any_range(tmp_path, text):
    path = tmp_path / "r.toml"
    path.write_text(text)
    with pytest.raises(UserError):
        recipes.load(path)


def test_dumped_canonical_recipe_round_trips():
    assert recipes.validate(tomllib.loads(tomli_w.dumps(CANONICAL_DATA)))


@FUZZ
@given(documents)
def test_random_documents_as_files(tmp_path, document):
    path = tmp_path / "fuzz.toml"
    try:
        path.write_text(tomli_w.dumps(document))
    except (TypeError, ValueError):
        return  # a document tomli_w cannot write (nan keys and the like) is no TOML file
    try:
        recipes.load(path)
    except UserError as error:
        assert str(error).startswith(str(path)) and "\n" not in str(error)


@FUZZ
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_random_bytes_as_files(tmp_path, content):
    path = tmp_path / "fuzz.toml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    try:
        recipes.load(path)
    except UserError as error:
        assert "\n" not in str(error)


@pytest.mark.parametrize("command", ["list", "run", "resume", "show", "init", "eval", "plot", "tune", "export",
                                     "new-plugin", "set", "bench", "check-env"])
def test_every_commands_help_reads_as_written(capsys, command):
    """argparse formats argument help (``%`` written ``%%``) but prints a description as it is: a description's
    ``%%`` would reach the user doubled."""
    with pytest.raises(SystemExit) as exit:
        cli.main([command, "--help"])
    assert exit.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: rlplug {command}") and "%%" not in text and "%(" not in text
