"""The recipe ``rlplug resume`` goes on with: the run's own, changed by ``--set`` only where trained weights and
the optimiser's state allow it, and compared with the directory's ``recipe.toml``, whose edits are never
overwritten silently (the run writes its recipe there when it starts training again)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from rlplug import recipe as recipes
from rlplug.errors import UserError
from rlplug.registry.docs import inline_toml

#: What may differ between a run's recipe and the recipe it resumes with (dotted prefixes): nothing that the
#: networks, the optimiser, the replay buffer, the env's statistics or the random streams depend on.
CHANGEABLE = ("run.total_frames", "run.checkpoint_every_frames", "run.keep_checkpoints", "run.num_threads",
              "run.compile", "run.log_every_frames", "eval", "loggers", "runner", "callbacks")
#: At most this many differing keys are named in a message.
NAMED = 4


def resumed_recipe(stored: dict[str, Any], overrides: list[str], *, source: str,
                   directory_recipe: Path | None) -> tuple[recipes.Recipe, list[str]]:
    """The recipe ``stored`` (a checkpoint's, or the directory's for a run that never wrote one) with the
    ``--set`` ``overrides``, and the keys they changed; ``UserError`` for a change trained weights cannot follow,
    and for edits of ``directory_recipe`` that these do not carry."""
    run_dir = Path(source).parent
    base = recipes.validate(copy.deepcopy(stored), file=source)
    data = copy.deepcopy(stored)
    for override in overrides:
        recipes.apply_override(data, override, file=str(run_dir))
    try:
        recipe = recipes.validate(data, file=str(run_dir))
    except UserError as error:
        raise recipes.with_switch_hint(error, overrides) from None
    changed = differences(base.resolved(), recipe.resolved())
    fixed = [key for key in changed if not changeable(key)]
    if fixed:
        raise UserError(f"{run_dir}: --set {named(fixed)}: cannot change when resuming, the trained weights depend "
                        f"on it (resume may change {', '.join(CHANGEABLE)}); to train with the change, start a new "
                        f"run: python -m rlplug run {run_dir / 'recipe.toml'} --set ... --out NEW_DIR")
    if directory_recipe is not None and directory_recipe.exists():
        check_edits(directory_recipe, base.resolved(), recipe.resolved())
    return recipe, changed


def check_edits(path: Path, stored: dict[str, Any], resumed: dict[str, Any]) -> None:
    """``UserError`` naming the keys where the user edited ``recipe.toml`` (it differs from the ``stored``
    recipe) and the ``resumed`` one does not follow: a change trained weights cannot take, or one not given
    with ``--set``."""
    try:
        theirs = recipes.load(path).resolved()
    except UserError as error:
        raise UserError(f"{error}; resume would replace this file with the run's recipe: fix it, or move it "
                        f"aside") from None
    edited = [key for key in differences(stored, theirs) if key in differences(resumed, theirs)]
    if not edited:
        return
    shown = "; ".join(f"{key} (the file's {value(theirs, key)}, the run's {value(stored, key)})"
                      for key in edited[:NAMED])
    more = f"; and {len(edited) - NAMED} more" if len(edited) > NAMED else ""
    fixed = [key for key in edited if not changeable(key)]
    if fixed:
        raise UserError(f"{path}: edited since the run's last checkpoint: {shown}{more}; {named(fixed)} cannot "
                        f"change for trained weights: undo that edit (resume never overwrites your file), or "
                        f"start a new run from the file: python -m rlplug run {path} --out NEW_DIR")
    sets = " ".join(f"--set '{key}={value(theirs, key)}'" for key in edited)
    raise UserError(f"{path}: edited since the run's last checkpoint: {shown}{more}; resume never overwrites your "
                    f"file: resume with the edits as python -m rlplug resume {path.parent} {sets}, or undo them")


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted key paths (``--set`` style: ``loggers.0.use``) where two resolved recipes differ, their
    ``provenance`` aside; a list differs as a whole unless it holds tables of the same count."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [*old, *(k for k in new if k not in old)]
        return [path for key in keys if not (key == "provenance" and not prefix)
                for path in differences(old.get(key), new.get(key), f"{prefix}{key}.")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and \
            any(isinstance(item, dict) for item in [*old, *new]):  # tables (loggers): each its own; else whole
        return [path for i, (a, b) in enumerate(zip(old, new)) for path in differences(a, b, f"{prefix}{i}.")]
    return [] if old == new else [prefix.rstrip(".")]


def lookup(data: Any, key: str) -> Any:
    """The value at a dotted key path of :func:`differences` (None where there is none)."""
    for part in key.split("."):
        if isinstance(data, list) and part.isascii() and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        elif isinstance(data, dict):
            data = data.get(part)
        else:
            return None
    return data


def value(data: Any, key: str) -> str:
    found = lookup(data, key)
    return "unset" if found is None else inline_toml(found)


def changeable(key: str) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in CHANGEABLE)


def named(keys: list[str]) -> str:
    return ", ".join(keys[:NAMED]) + (f" and {len(keys) - NAMED} more" if len(keys) > NAMED else "")
