"""A new run that starts from another run's weights (``rlplug run RECIPE --init-from SOURCE``,
:meth:`rlplug.Agent.from_run`): the networks, the env's normalisation statistics and the preprocessor of the
source's checkpoint, its optimiser state only when asked, and everything else the new run's own (frames from 0,
an empty replay buffer, a fresh noise schedule). Everything that can be known from the checkpoint alone (it
loads, its digest, its algorithm) is checked before the run directory exists; shapes once the networks are
built, the new directory removed again where they differ."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlplug.errors import UserError, numbers
from rlplug.recipe import Recipe
from rlplug.run.checkpoints import check_statistics, entries, load_checkpoint

#: Entries of an algorithm's state that belong to the run that made them, not to its weights: its counters, the
#: experience it collected, its exploration noise's schedule, its intrinsic reward (its predictor and statistics
#: measure that run's novelty: a run fine-tuning after pretraining starts its own, or none).
RUN_OWN = ("frames", "steps", "replay_buffer", "episodes", "noise", "intrinsic")
#: Entries holding optimiser state (on-policy ``optimiser``, off-policy ``learners``): taken only when asked.
OPTIMISER = ("optimiser", "learners")


@dataclass(frozen=True)
class Source:
    """The checkpoint a run starts from, read and verified, and whether its optimiser state is taken too."""

    path: Path
    state: dict[str, Any]
    optimiser: bool = False

    @classmethod
    def read(cls, source: str | Path, *, optimiser: bool = False, allow_unverified: bool = False) -> Source:
        """A run directory's latest checkpoint, or a checkpoint file (``best.pt``, ``checkpoints/frames-N.pt``),
        loaded as ``resume`` loads one (digest checked; format 1 only with ``allow_unverified``)."""
        path = Path(source)
        if path.is_dir():
            path = path / "checkpoint.pt"
            if not path.is_file():
                raise UserError(f"--init-from {source}: no checkpoint.pt in it; give a run directory that wrote a "
                                f"checkpoint, or a checkpoint file (best.pt, checkpoints/frames-N.pt)")
        elif not path.exists():
            raise UserError(f"--init-from {source}: no such run directory or checkpoint file")
        return cls(path, load_checkpoint(path, allow_unverified=allow_unverified), optimiser)

    def check_algorithm(self, recipe: Recipe) -> None:
        """Refuses weights of another algorithm, and (with ``--init-optimiser``) optimiser state of another
        optimiser, before anything is built."""
        stored = self.state["recipe"].get("algorithm")
        theirs = stored.get("use") if isinstance(stored, dict) else None
        ours = recipe.algorithm.spec.qualified_name
        if theirs != ours:
            raise UserError(f"--init-from {self.path}: its weights are of algorithm {theirs!r}, this recipe trains "
                            f"{ours!r}; start from a run of the same algorithm")
        if self.optimiser and isinstance(stored, dict):
            theirs, ours = stored.get("optimizer"), recipe.resolved()["algorithm"].get("optimizer")
            if theirs is not None and ours is not None and theirs != ours:
                raise UserError(f"--init-optimiser: the optimiser state of {self.path} is of {theirs!r}, this recipe's "
                                f"algorithm.optimizer is {ours!r}, which keeps other state; set algorithm.optimizer = "
                                f"{theirs!r}, or leave out --init-optimiser for a fresh {ours!r}")

    def record(self) -> dict[str, Any]:
        """What the new run keeps of where it started (in its summary.json and checkpoints)."""
        return {"checkpoint": str(self.path.resolve()), "frames": self.state["frames"], "optimiser": self.optimiser}


def shapes(value: Any) -> dict[str, list[int]]:
    return {where: list(item.shape) for where, item in entries(value) if isinstance(item, torch.Tensor)}


def mismatch(ours: dict[str, Any], theirs: dict[str, Any], taken: list[str]) -> str | None:
    """The first entry of the ``taken`` parts of an algorithm's state whose shape differs between the new run
    (``ours``) and the source (``theirs``), or that one of them lacks, said in words; None when all fit."""
    for key in taken:
        if key not in theirs:
            return f"it has no {key!r}, which this recipe's algorithm has"
        mine, source = shapes({key: ours[key]}), shapes({key: theirs[key]})
        for where in sorted(set(mine) | set(source)):
            if mine.get(where) != source.get(where):
                shown = [str(s) if s is not None else "absent" for s in (source.get(where), mine.get(where))]
                return f"network entry {where} has shape {shown[0]} in the checkpoint and {shown[1]} in this recipe"
    return None


def optimiser_problem(ours: Any, theirs: Any, where: str = "") -> str | None:
    """Where the source's optimiser state (``theirs``) is of another kind of torch optimiser than the new run's
    (``ours``): its groups' settings or its per-parameter entries named otherwise (Adam's ``exp_avg``,
    RMSprop's ``square_avg``), which torch would only find at the first step, as a ``KeyError``."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if "param_groups" in ours and "param_groups" in theirs:
            mine = {key for group in ours["param_groups"] for key in group}
            source = {key for group in theirs["param_groups"] for key in group}
            state_keys = {key for entry in theirs.get("state", {}).values() for key in entry}
            reference = {key for entry in ours.get("state", {}).values() for key in entry}
            if mine != source or (reference and state_keys and reference != state_keys):
                return f"the optimiser state at {where or 'the top'} is of another optimiser"
            return None
        for key in ours.keys() & theirs.keys():
            problem = optimiser_problem(ours[key], theirs[key], f"{where}.{key}" if where else str(key))
            if problem:
                return problem
    return None


def bounds_problem(theirs: dict[str, torch.Tensor] | None, ours: dict[str, torch.Tensor] | None) -> str | None:
    """Where the source's env acted in another continuous range than the new run's (a run trained with
    ``dataset.rescale_actions`` acts in [-1, 1], the plain env in its own bounds): its policy and critics read
    and give actions at that scale, so the weights would be used at the wrong one. None where they agree, or
    where either is unknown (a checkpoint written before checkpoints kept the bounds, discrete actions)."""
    if theirs is None or ours is None or theirs["low"].shape != ours["low"].shape:
        return None  # shapes: the networks' check names the difference
    tolerance = 1e-4 * (ours["high"] - ours["low"]).abs().clamp_min(1.0)
    if bool(((theirs["low"] - ours["low"]).abs() <= tolerance).all()
            and ((theirs["high"] - ours["high"]).abs() <= tolerance).all()):
        return None
    return (f"its env acted within {numbers(theirs['low'])} to {numbers(theirs['high'])} and this recipe's env acts "
            f"within {numbers(ours['low'])} to {numbers(ours['high'])}, so its weights would act at another scale; "
            f"give this recipe's env the source's range (for a run trained with dataset.rescale_actions, gymnasium's "
            f"RescaleAction to [-1, 1] in env.wrappers)")


def start_from(run, source: Source) -> None:
    """``run`` (just built, at frame 0) given ``source``'s weights, env statistics and preprocessor (and its
    optimiser state when asked); ``UserError`` naming the first entry whose shape differs."""
    ours, theirs = run.algorithm.state_dict(), source.state["algorithm"]
    own = RUN_OWN + (() if source.optimiser else OPTIMISER)
    taken = [key for key in ours if key not in own]
    problem = mismatch(ours, theirs, [key for key in taken if key not in OPTIMISER])  # optimisers follow networks
    if problem:
        raise UserError(f"--init-from {source.path}: {problem}; start from a run of this recipe's networks")
    if source.optimiser:
        problem = optimiser_problem({key: ours[key] for key in taken if key in OPTIMISER},
                                    {key: theirs[key] for key in taken if key in OPTIMISER and key in theirs})
        if problem:
            raise UserError(f"--init-optimiser {source.path}: {problem} than this recipe's algorithm.optimizer; "
                            f"leave out --init-optimiser for a fresh one")
    problem = bounds_problem(source.state.get("action_bounds"), run.action_bounds_entry().get("action_bounds"))
    if problem:
        raise UserError(f"--init-from {source.path}: {problem}")
    statistics, current = source.state["env"], run.env_statistics()
    if not statistics and any("observation" in str(key) for key in current):  # fresh statistics: other inputs
        raise UserError(f"--init-from {source.path}: this recipe's env normalises observations and its env did not, "
                        f"so its weights expect raw observations; set env.normalize_observations as its recipe does")
    if statistics and not current:
        raise UserError(f"--init-from {source.path}: its env normalises observations and this recipe's does not, "
                        f"yet its weights expect them normalised; set env.normalize_observations as its recipe does")
    try:
        if statistics:
            check_statistics(statistics, current)
        run.algorithm.load_state_dict({**ours, **{key: theirs[key] for key in taken}})
    except UserError as error:
        raise UserError(f"--init-from {source.path}: {error}") from None
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as error:
        detail = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        raise UserError(f"--init-from {source.path}: its weights do not fit this recipe's algorithm ({detail})") \
            from error
    if statistics:
        run.load_env_statistics(statistics)
    run.collector.sync_weights()
    run.init_from = source.record()
