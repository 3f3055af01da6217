"""The plugin guide and the protocols are one source: its contract sections are what
:mod:`rlplug.registry.guide` writes from them, and its worked off-policy loss plugin, taken from the guide as
written, trains ``ddpg`` through the real command line."""

from __future__ import annotations

import csv
import json
import math
import re
import tomllib

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
