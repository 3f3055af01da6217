"""The extras a user is told to install exist under the names they are told.

pip compares a requested extra with the names in rlplug's metadata, which are normalised (lower case, hyphens);
the pip a new Python 3.11 venv brings (23.2) only warns "does not provide the extra" for any other spelling and
installs rlplug without it. So every ``rlplug[EXTRA]`` that the README, docs, recipes, benchmarks or rlplug's
messages name must be one of pyproject.toml's extras, spelled normalised; and every install command the README
and docs document is resolved by that pip, in a fresh venv, to the extra's requirements.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: ``rlplug[a,b]`` as written in text and messages (an f-string's ``rlplug[{...}]`` is not a name)
NAMED_EXTRAS = re.compile(r"rlplug\[([\w.,-]+)\]")
#: ``".[a]"`` in an install command, the checkout's own extras
LOCAL_EXTRAS = re.compile(r"(?<![\w/])\.\[([\w.,-]+)\]")


def pyproject_extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def documents() -> list:
    """The Markdown files that tell users what to install (the example plugin's docs are another package's)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def code_commands(text: str):
    """The shell commands in a Markdown text's code: each line of a fenced block, and each inline code span (one
    may wrap across lines), each split at ``&&``."""
    fenced = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
    lines = [line for block in fenced.finditer(text) for line in block.group(1).splitlines()]
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", fenced.sub("", text))]
    for command in lines + spans:
        yield from command.split("&&")


def install_extras(path) -> set[str]:
    """Every extra of rlplug that a ``pip install`` command in the Markdown file ``path`` names: ``rlplug[EXTRA]``,
    or ``.[EXTRA]`` where the command installs this checkout (it names constraints.txt, which only this
    repository has; a plugin package's ``.[test]`` in docs/writing-plugins.md is that package's)."""
    extras = set()
    for command in code_commands(path.read_text()):
        if "pip install" not in command:
            continue
        found = NAMED_EXTRAS.findall(command)
        if "constraints.txt" in command:
            found += LOCAL_EXTRAS.findall(command)
        extras.update(name for names in found for name in names.split(","))
    return extras


def documented_extras() -> set[str]:
    return set().union(*(install_extras(path) for path in documents()))


def test_pyprojects_extras_are_named_in_their_normalised_form():
    assert [name for name in pyproject_extras() if canonicalize_name(name) != name] == []


def test_every_extra_named_to_users_is_a_pyproject_extra_as_written():
    """The README, docs, benchmarks, recipe comments and rlplug's messages (including the extras an env id's
    package is installed with) name only extras pyproject.toml defines, spelled as it does."""
    from rlplug.plugins.envs import ENV_PACKAGES

    extras = pyproject_extras()
    markdown = [*documents(), ROOT / "BENCHMARKS.md", *sorted((ROOT / "benchmarks").rglob("*.md"))]
    named = {(path.relative_to(ROOT).as_posix(), name) for path in markdown for name in install_extras(path)}
    for path in [*sorted((ROOT / "recipes").glob("*.toml")), *sorted((ROOT / "rlplug").rglob("*.py")), *markdown]:
        named |= {(path.relative_to(ROOT).as_posix(), name) for names in NAMED_EXTRAS.findall(path.read_text())
                  for name in names.split(",")}
    named |= {("rlplug/plugins/envs/__init__.py: ENV_PACKAGES", extra) for _, _, extra, _ in ENV_PACKAGES}
    assert {name for _, name in named} >= {"atari", "export", "tune"}, "the search finds the names"
    assert sorted((place, name) for place, name in named if name not in extras) == []


def new_venv_python(tmp_path) -> str:
    """A new venv's Python 3.11, with the pip its ensurepip bundles (not upgraded)."""
    base = sys.executable if sys.version_info[:2] == (3, 11) else shutil.which("python3.11")
    if base is None:
        pytest.skip("needs a Python 3.11 interpreter (python3.11) to make the venv users make")
    venv = tmp_path / "venv"
    subprocess.run([base, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    return str(venv / "bin" / "python")


@pytest.mark.slow
def test_every_documented_install_resolves_to_its_extras_requirements_with_a_new_venvs_pip(tmp_path):
    """One dry-run resolution of all the documented extras at once (torch from constraints.txt, as the README's
    commands do): pip warns of no extra it lacks, and what it would install holds each extra's requirements."""
    extras = sorted(documented_extras())
    assert {"test", "tune", "export"} <= set(extras), "the documented commands are found"
    python = new_venv_python(tmp_path)
    report = tmp_path / "report.json"
    result = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--report", str(report),
         "-c", "constraints.txt", f".[{','.join(extras)}]"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    pip_says = result.stdout + result.stderr
    assert result.returncode == 0, pip_says[-3000:]
    assert [line for line in pip_says.splitlines() if "does not provide the extra" in line] == []
    install = json.loads(report.read_text())["install"]
    versions = {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"] for item in install}
    (rlplug,) = [item for item in install if item["metadata"]["name"] == "rlplug"]
    assert set(extras) <= set(rlplug["metadata"]["provides_extra"])
    requirements = [Requirement(line) for line in rlplug["metadata"]["requires_dist"]]
    for extra in extras:
        wanted = [r for r in requirements if r.marker is not None and r.marker.evaluate({"extra": extra})]
        assert wanted, f"the extra {extra!r} requires nothing"
        for requirement in wanted:
            name = canonicalize_name(requirement.name)
            assert name in versions, f"{extra}: {requirement} is not in what pip would install"
            assert requirement.specifier.contains(versions[name], prereleases=True), (extra, str(requirement),
                                                                                     versions[name])
