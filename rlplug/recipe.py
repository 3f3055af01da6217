"""Recipes: a TOML file plus ``--set`` overrides, validated whole into a tree of unbuilt components.

Any table with a ``use`` key is a component; its kind comes from where it stands: the top-level ``env``,
``algorithm``, ``loggers``, ``runner``, ``callbacks`` and ``dataset`` here, nested ones from the annotation of the
parent factory's parameter. ``run`` and ``eval`` are plain settings tables. A ``provenance`` table (written into
resolved recipes) is ignored on reading, so a run directory's ``recipe.toml`` runs again as it is.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from rlplug.errors import RecipeError, UserError
from rlplug.plugins.loggers import shared_file_problem
from rlplug.registry import get_registry, resolve
from rlplug.registry.components import Algorithm, Callback, Dataset, Env, Logger, Network, Runner
from rlplug.registry.schema import Check, Range, convert

#: Tables, arrays and dotted keys nest at most this deep in a recipe (the built-in ones need 4): deeper input is
#: refused in one line before anything recurses into it.
MAX_NESTING = 32
TOO_DEEP = f"nested too deeply: tables, arrays and dotted keys nest at most {MAX_NESTING} levels in a recipe"


def device_problem(device: str) -> str | None:
    if device == "cpu":
        return None  # the common case needs no torch import
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError:
        return f"'{device}' is not a torch device; use 'cpu' or 'cuda'"
    if parsed.type not in ("cpu", "cuda"):  # meta, xla...: tensors there hold no numbers an env can step with
        return f"'{device}' is not a device rlplug trains on; use 'cpu' or 'cuda'"
    if parsed.type == "cpu" and parsed.index not in (None, 0):  # torch takes any index and ignores it
        return f"'{device}' is no device: the CPU is one device, 'cpu'; use 'cpu'"
    if parsed.type == "cuda" and not torch.cuda.is_available():
        return f"device '{device}' is not available on this machine (no CUDA GPU); use 'cpu'"
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        return (f"no device '{device}' on this machine: it has {count} CUDA GPU{'s' * (count != 1)}, "
                f"'cuda:0' to 'cuda:{count - 1}'; use one of those or 'cuda'")
    return None


#: The most frames a run may train for: at a million frames a second, 10**15 take over 30 years, so a larger
#: count is a slip of the keyboard (its schedules would also stay at their start for the whole run).
MAX_TOTAL_FRAMES = 10**15
#: The most compute threads: torch starts each one, and pools of tens of thousands exhaust memory or crash the
#: process; no machine torch runs on has a use for more.
MAX_THREADS = 1024
#: The most episodes one evaluation plays (their returns are all kept and averaged).
MAX_EVAL_EPISODES = 100_000


def total_frames_problem(frames: int) -> str | None:
    if frames > MAX_TOTAL_FRAMES:
        return (f"{frames} frames is beyond any run: at most {MAX_TOTAL_FRAMES:.0e} (at a million frames a second "
                f"that takes over 30 years); did you mean fewer?")
    return None


def threads_problem(threads: int) -> str | None:
    if threads > MAX_THREADS:
        return (f"{threads} threads is beyond any machine: at most {MAX_THREADS} (pools of tens of thousands exhaust "
                f"memory or crash the process; for small networks on a few cores one is fastest)")
    return None


def eval_episodes_problem(episodes: int) -> str | None:
    if episodes > MAX_EVAL_EPISODES:
        return (f"{episodes} episodes per evaluation is beyond any use: at most {MAX_EVAL_EPISODES} (a mean's "
                f"standard error shrinks only with the square root of the count)")
    return None


@dataclass(frozen=True)
class RunSettings:
    #: seeds Python, numpy, torch and the envs; the same recipe and seed give the same returns
    seed: Annotated[int, Range(ge=0, lt=2**63)] = 0
    #: env steps to train for, over all envs together
    total_frames: Annotated[int, Range(ge=1), Check(total_frames_problem)] = 100_000
    #: the torch device for networks and data: 'cpu', or 'cuda' where there is a GPU
    device: Annotated[str, Check(device_problem)] = "cpu"
    #: threads for torch's kernels and numpy's BLAS; for small networks on a few cores one is fastest
    #: (BENCHMARKS.md)
    num_threads: Annotated[int, Range(ge=1), Check(threads_problem)] = 1
    #: torch.compile the update's loss, its backward with it (CUDA graphs on 'cuda'); the first updates wait
    #: for the compiler, so it pays only on long runs (benchmarks/HISTORY.md, "run.compile")
    compile: bool = False
    #: write a checkpoint every this many frames (0: only at the end); every env starts a new episode
    #: there, so that a run resumed from it goes on exactly as the uninterrupted run did
    checkpoint_every_frames: Annotated[int, Range(ge=0)] = 100_000
    #: how many periodic checkpoints to keep in checkpoints/ (checkpoint.pt is always the latest)
    keep_checkpoints: Annotated[int, Range(ge=1)] = 3
    #: give the loggers a row of training metrics (the latest update's) every this many frames; 0: one per update
    log_every_frames: Annotated[int, Range(ge=0)] = 0


#: Evaluation episodes start from seeds ``run.seed + EVAL_SEED_OFFSET + i``: apart from the training envs' seeds,
#: and the same for a run's own evaluations, ``rlplug eval`` and ``Agent.evaluate``.
EVAL_SEED_OFFSET = 10_000


@dataclass(frozen=True)
class EvalSettings:
    #: evaluate every this many frames (0: only at the end); always once at the end.
    every_frames: Annotated[int, Range(ge=0)] = 0
    #: episodes per evaluation (deterministic policy, its own env)
    episodes: Annotated[int, Range(ge=1), Check(eval_episodes_problem)] = 10
    #: film one evaluation episode at each evaluation to videos/frames-N.mp4, handed to loggers that take
    #: videos (wandb, tensorboard); needs rlplug[video] and an env that renders rgb_array frames
    video: bool = False
    #: the env evaluations run on, validated as [env] is (another max_episode_steps, say); unset: [env] itself.
    #: Its observations and actions must be the training env's, whose normalisation statistics it gets (frozen)
    env: Env | None = None


def default_loggers() -> list[Any]:
    """The loggers a recipe without ``[[loggers]]`` gets, as recipe tables: validation makes them components."""
    return [{"use": "rlplug:console"}, {"use": "rlplug:csv"}]


@dataclass(frozen=True)
class Recipe:
    env: Env
    algorithm: Algorithm
    run: RunSettings = RunSettings()
    eval: EvalSettings = EvalSettings()
    loggers: Annotated[list[Logger], Check(shared_file_problem)] = field(default_factory=default_loggers)
    #: where experience is collected: "local" (this process) or "ray" (workers; [runner] use = "ray")
    runner: Runner = "rlplug:local"  # type: ignore[assignment]  # a name, made a component on validation
    #: told of updates, evaluations and checkpoints; may log values and stop the run ([[callbacks]])
    callbacks: list[Callback] = field(default_factory=list)
    #: recorded experience: a recipe with a dataset is an offline run, which learns from it alone and steps its
    #: env only to evaluate (docs/offline.md); without [env], the env the data was recorded on
    dataset: Dataset | None = None
    provenance: dict[str, Any] | None = None

    def resolved(self) -> dict[str, Any]:
        """The recipe with every default filled in and every component qualified, as TOML data."""
        from rlplug.version import __version__

        tables: dict[str, Any] = {
            "run": vars(self.run), "eval": {**vars(self.eval), "env": self.eval.env and self.eval.env.resolved()},
            "env": self.env.resolved(),
            "algorithm": self.algorithm.resolved(), "loggers": [logger.resolved() for logger in self.loggers],
            "runner": self.runner.resolved(),
            # absent when empty: the recipes of runs from before callbacks read the same
            **({"callbacks": [c.resolved() for c in self.callbacks]} if self.callbacks else {}),
            **({"dataset": self.dataset.resolved()} if self.dataset else {}),
        }
        components = {path: f"{c.spec.qualified_name} {c.spec.version}" for path, c in self.components()}
        tables["provenance"] = {"rlplug_version": __version__, "components": components}
        return _without_none(tables)

    def components(self):
        """``(dotted path, component)`` for every component in the recipe, nested ones included."""
        from rlplug.registry.components import Component

        evaluated = [("eval.env", self.eval.env)] if self.eval.env else []
        queue = [("env", self.env), *evaluated, ("algorithm", self.algorithm),
                 *((f"loggers[{i}]", logger) for i, logger in enumerate(self.loggers)), ("runner", self.runner),
                 *((f"callbacks[{i}]", callback) for i, callback in enumerate(self.callbacks)),
                 *([("dataset", self.dataset)] if self.dataset else [])]
        while queue:
            path, component = queue.pop(0)
            yield path, component
            queue.extend((f"{path}.{k}", v) for k, v in component.params.items() if isinstance(v, Component))


def _without_none(value: Any) -> Any:
    """TOML has no null: a parameter left at None is simply absent, which means the same default."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def load(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    """Read, override and validate a recipe; every problem is a :class:`UserError` naming file and key."""
    path = Path(path)
    data = read_toml(path)
    for override in overrides:
        apply_override(data, override, file=str(path))
    try:
        return validate(data, file=str(path))
    except UserError as error:
        raise with_switch_hint(error, overrides) from None


#: the quotes a TOML string may be written in: a basic string's and a literal string's
QUOTES = "\"'"


def with_switch_hint(error: UserError, overrides: Sequence[str]) -> UserError:
    """``error``, with what to do added when it is a key the file wrote for the component an override of
    ``TABLE.use`` replaced (``--set runner.use=local`` on a recipe whose ``[runner]`` has Ray's keys)."""
    for override in overrides:
        key, _, name = (part.strip() for part in override.partition("="))
        table = key.removesuffix(".use")
        if table != key and error.path.startswith(table + ".") and error.message.startswith("unknown key"):
            error.message += (f"; the file's other keys in [{table}] belong to the component it named: replace "
                              f"the whole table instead, e.g. --set '{table}={{use=\"{name.strip(QUOTES)}\"}}'")
            return error
    return error


def validate(data: dict[str, Any], *, file: str = "<recipe>") -> Recipe:
    registry = get_registry()
    try:
        too_deep = nesting_beyond_limit(data)
        if too_deep is not None:
            raise RecipeError(TOO_DEEP, path=too_deep)
        data = with_dataset_env(data, registry)
        recipe = convert(data, Recipe, path="", resolve=lambda cls, table, path: resolve(cls, table, path, registry))
        refuse_offline_only(recipe)
        return with_network_entries(recipe)
    except UserError as error:
        raise error.located(file=file) from None


def with_dataset_env(data: dict[str, Any], registry) -> dict[str, Any]:
    """``data`` with the ``[env]`` its ``[dataset]`` was recorded on where it has a dataset and no env (the env
    an offline run evaluates on); the dataset's table is validated and built (its metadata read) to know it."""
    table = data.get("dataset")
    if not isinstance(table, dict) or "env" in data:
        return data
    dataset = convert(table, Dataset, path="dataset",
                      resolve=lambda cls, value, path: resolve(cls, value, path, registry)).build()
    env = dataset.env_table()
    if env is None:
        raise RecipeError("the dataset names no env it was recorded on; give the recipe an [env] to evaluate on",
                          path="dataset")
    return {**data, "env": env}


def refuse_offline_only(recipe: Recipe) -> None:
    """An algorithm that learns from a dataset alone (its factory's ``offline_only``), in a recipe without one."""
    if recipe.dataset is None and getattr(recipe.algorithm.spec.factory, "offline_only", False):
        name = recipe.algorithm.spec.name
        raise RecipeError(f"{name} learns from a dataset only and this recipe has none: add [dataset] (use = "
                          f"\"minari\", path = \"DIR\", the --out of rlplug record), or --set dataset.path=DIR on "
                          f"a recipe that has one", path="dataset")


def with_network_entries(recipe: Recipe) -> Recipe:
    """``recipe`` with its envs told the entries ``[algorithm.policy] in_keys`` and ``[algorithm.critic] in_keys``
    name (an asymmetric actor-critic's: every env built from it gathers them, :mod:`rlplug.core.observations`);
    ``in_keys`` on any other network table, or in an offline run (which learns from the dataset's observations
    alone), refused at its key."""
    named = {name: recipe.algorithm.params.get(name) for name in ("policy", "critic")}
    for path, component in recipe.components():
        if isinstance(component, Network) and component.in_keys and not any(component is n for n in named.values()):
            raise RecipeError("in_keys is read on [algorithm.policy] and [algorithm.critic] only (the entries of an "
                              "asymmetric actor-critic)", path=f"{path}.in_keys")
    keys = {name: network.in_keys if isinstance(network, Network) else () for name, network in named.items()}
    if not any(keys.values()):
        return recipe
    if recipe.dataset is not None:
        name = "policy" if keys["policy"] else "critic"
        raise RecipeError("an offline run learns from the dataset's observations, which hold no other entries; "
                          "leave in_keys unset", path=f"algorithm.{name}.in_keys")
    env = replace(recipe.env, policy_in_keys=keys["policy"], critic_in_keys=keys["critic"])
    evaluated = recipe.eval.env and replace(recipe.eval.env, policy_in_keys=keys["policy"])
    return replace(recipe, env=env, eval=replace(recipe.eval, env=evaluated))


def nesting_beyond_limit(data: Any) -> str | None:
    """The key path where ``data`` nests deeper than :data:`MAX_NESTING`, or None (found without recursion)."""
    stack = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            if isinstance(item, (dict, list)):
                here = f"{path}[{key}]" if isinstance(value, list) else f"{path}.{key}" if path else str(key)
                if depth + 1 > MAX_NESTING:
                    return here
                stack.append((item, here, depth + 1))
    return None


def read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError("no such recipe file; check the path (recipes/ has examples)", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as error:
        raise RecipeError(f"cannot read the recipe: {error}", file=str(path)) from None
    try:
        return tomllib.loads(text)
    except RecursionError:  # the parser recurses once per level of nesting
        raise RecipeError(TOO_DEEP, file=str(path)) from None
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        where = re.search(r"\(at line (\d+), column (\d+)\)", message)
        line = int(where.group(1)) if where else None
        detail = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        column = f"column {where.group(2)}: " if where else ""
        raise RecipeError(f"{column}invalid TOML: {detail}", file=str(path), line=line) from None


def apply_override(data: dict[str, Any], override: str, *, file: str) -> None:
    """Apply ``a.b.c=value`` to ``data``; the value is read as TOML, or as a plain string if it is not TOML."""
    key, sep, text = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise RecipeError(f"--set {override!r}: expected KEY=VALUE, e.g. --set algorithm.lr=3e-4", file=file)
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    except RecursionError:
        raise RecipeError(f"--set {key}: {TOO_DEEP}", file=file) from None
    set_value(data, key, value, file=file)


def set_value(data: dict[str, Any], key: str, value: Any, *, file: str) -> None:
    """Set the dotted ``key`` (``algorithm.lr``, ``loggers.0.use``) in ``data``, creating tables on the way."""
    parts = key.split(".")
    if len(parts) > MAX_NESTING:
        raise RecipeError(f"--set {'.'.join(parts[:3])}...: {TOO_DEEP}", file=file)
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        here = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            node = node[_list_index(node, part, here, file)]
        elif isinstance(node, dict):
            node = node.setdefault(part, {})
        if not isinstance(node, (dict, list)):
            raise RecipeError(f"--set {key}: '{here}' is a value, not a table", file=file, path=here)
    last = parts[-1]
    if isinstance(node, list):
        node[_list_index(node, last, key, file)] = value
    else:
        node[last] = value


def _list_index(items: list, part: str, path: str, file: str) -> int:
    if not re.fullmatch("[0-9]+", part) or int(part) >= len(items):  # str.isdigit() takes '²' too
        raise RecipeError(f"--set: '{part}' is not an index of this list (0 to {len(items) - 1})", file=file, path=path)
    return int(part)
