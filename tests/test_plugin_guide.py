"""The plugin guide and the protocols are one source: its contract sections are what
:mod:`rlplug.registry.guide` writes from them, and its worked off-policy loss plugin, taken from the guide as
written, trains ``ddpg`` through the real command line."""

from __future__ import annotations

import csv
import json
import math
import re
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT, rlplug_cli

from rlplug.registry import guide, protocols

GUIDE = ROOT / "docs" / "writing-plugins.md"


def test_the_guides_contract_sections_are_written_from_the_protocols():
    text = GUIDE.read_text()
    assert guide.render(text) == text, ("docs/writing-plugins.md's contract sections differ from the protocols: "
                                        "run python -m rlplug.registry.guide docs/writing-plugins.md")


@pytest.mark.parametrize("kind", sorted(guide.SECTIONS))
def test_every_member_of_every_protocol_is_in_its_section_with_its_signature(kind):
    body = re.search(rf"<!-- contract:{kind} -->\n(.*?)<!-- /contract:{kind} -->", GUIDE.read_text(), re.S).group(1)
    required, optional = body.partition("Optional (used where the object has it):")[::2]
    for name, needed in protocols.members(guide.SECTIONS[kind]).items():
        assert f"- `{name}" in (required if needed else optional), f"{kind}: {name}"
    assert "step_arrays(action: np.ndarray) -> tuple[" in GUIDE.read_text(), "signatures carry their types"


def test_a_stale_section_is_written_again_and_check_says_so(tmp_path):
    stale = tmp_path / "guide.md"
    text = GUIDE.read_text()
    stale.write_text(text.replace("- `update_targets(tau: float) -> None`", "- `update_targets(tau)`"))
    assert guide.main([str(stale), "--check"]) == 1
    assert guide.main([str(stale)]) == 0 and stale.read_text() == text
    assert guide.main([str(stale), "--check"]) == 0


def test_a_section_for_no_protocol_or_a_protocol_without_section_is_refused():
    text = GUIDE.read_text()
    with pytest.raises(ValueError, match="'nois', which names no protocol"):
        guide.render(text + "<!-- contract:nois -->\n<!-- /contract:nois -->\n")
    dropped = re.sub(r"<!-- contract:noise -->.*?<!-- /contract:noise -->", "", text, flags=re.S)
    with pytest.raises(ValueError, match="no contract section for noise"):
        guide.render(dropped)


def guide_block(first_line: str) -> str:
    """The guide's fenced code block that starts with ``first_line``."""
    blocks = re.findall(r"```(?:python|toml)\n(.*?)```", GUIDE.read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return block


@pytest.mark.slow
def test_the_guides_worked_offpolicy_loss_trains_ddpg_on_pendulum(tmp_path):
    where = tmp_path / "site"
    package = where / "rlplug_plainddpg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in ("plugin", "losses"):
        (package / f"{name}.py").write_text(guide_block(f"# rlplug_plainddpg/{name}.py"))
    info = where / "rlplug_plainddpg-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlplug-plainddpg\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[rlplug]\nplainddpg = rlplug_plainddpg.plugin\n")
    recipe = tmp_path / "recipe.toml"  # the recipe's loss table as the guide writes it, on the Pendulum recipe
    shown = tomllib.loads(guide_block('[algorithm]\nuse = "ddpg"'))
    base = (ROOT / "recipes" / "pendulum-ddpg.toml").read_text()
    recipe.write_text(base + f'\n[algorithm.loss]\nuse = "{shown["algorithm"]["loss"]["use"]}"\n')
    out = tmp_path / "run"
    result = rlplug_cli("run", str(recipe), "--out", str(out), "--set", "run.total_frames=384",
                        "--set", "algorithm.random_frames=128", "--set", "algorithm.learning_starts=128",
                        "--set", "algorithm.batch_size=32", "--set", "eval.episodes=1", "--set", "eval.every_frames=0",
                        path=where, timeout=300, RLPLUG_STRICT_PLUGINS="1")
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    resolved = tomllib.loads((out / "recipe.toml").read_text())
    assert resolved["provenance"]["components"]["algorithm.loss"].startswith("plainddpg:plain-ddpg ")
    with (out / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("loss_actor")]
    assert rows and all(math.isfinite(float(r["loss_value"])) for r in rows), "the plugin's terms were learned from"


def install_guide_package(where: Path, package: str, files: tuple[str, ...], entry: str) -> None:
    """The guide's blocks ``# PACKAGE/FILE.py`` written as an installed distribution with the entry point ``entry``."""
    folder = where / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    for name in files:
        (folder / f"{name}.py").write_text(guide_block(f"# {package}/{name}.py"))
    info = where / f"{package}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[rlplug]\n{entry}\n")


@pytest.mark.slow
def test_the_guides_onpolicy_algorithm_trains_takes_set_and_batches(tmp_path):
    """The guide's SPO, its code as the guide prints it: trained, changed live by rlplug set, resumed, and trained
    with seeds together, all through the kit alone."""
    where = tmp_path / "site"
    install_guide_package(where, "rlplug_spo", ("plugin", "algorithm"), "spo = rlplug_spo.plugin")
    recipe = tmp_path / "spo.toml"
    recipe.write_text('[env]\nuse = "gym"\nid = "CartPole-v1"\nnum_envs = 4\n\n[algorithm]\nuse = "spo"\n'
                      'frames_per_batch = 256\nminibatch_size = 64\nepochs = 2\n')
    tiny = ["--set", "run.total_frames=1024", "--set", "eval.every_frames=512", "--set", "eval.episodes=1"]
    out = tmp_path / "run"
    stop_early = ["--set", "callbacks=[{use='stop-at-return', threshold=-1e9}]"]
    ran = rlplug_cli("run", str(recipe), "--out", str(out), *tiny, *stop_early, path=where, timeout=300,
                     RLPLUG_STRICT_PLUGINS="1")
    assert ran.returncode == 0, ran.stderr
    with (out / "metrics.csv").open() as f:
        assert any(row.get("loss_objective") for row in csv.DictReader(f)), "SPO's objective was learned from"
    asked = rlplug_cli("set", str(out), "algorithm.lr=1e-4", "algorithm.epochs=3", path=where)
    assert asked.returncode == 0, asked.stderr
    resumed = rlplug_cli("resume", str(out), "--set", "callbacks=[]", path=where, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "algorithm.lr 0.0003 -> 0.0001" in resumed.stdout and "algorithm.epochs" in resumed.stdout
    seeds = rlplug_cli("run", str(recipe), "--seeds", "0-1", "--batched", "--out", str(tmp_path / "seeds"), *tiny,
                       path=where, timeout=300)
    assert seeds.returncode == 0, seeds.stderr
    assert json.loads((tmp_path / "seeds" / "seed-1" / "summary.json").read_text())["frames"] >= 1024


def test_the_guides_offpolicy_algorithm_is_the_example_plugins_code():
    """The guide prints the example plugin's SAC-N as it is (its tests train it): the guide cannot drift from it."""
    example = ROOT / "examples" / "rlplug-example-plugin" / "rlplug_example_plugin"
    algorithm = guide_block("# rlplug_example_plugin/sac_n.py").split("\n", 1)[1]
    assert algorithm == (example / "sac_n.py").read_text()
    hooks = guide_block("# rlplug_example_plugin/plugin.py (the algorithm)").split("\n", 1)[1]
    assert hooks in (example / "plugin.py").read_text()
