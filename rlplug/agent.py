"""The Python API: the objects ``python -m rlplug run`` builds, driven from code.

    agent = rlplug.Agent.from_recipe("recipes/cartpole-ppo.toml", run={"seed": 1}, **{"algorithm.lr": 3e-4})
    agent.train(max_frames=20_000)
    action = agent.select_action(observation)          # a numpy observation from a gymnasium env
    agent.save("cartpole.pt")
    agent = rlplug.Agent.load("cartpole.pt")
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.data import Composite, OneHot
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug import recipe as recipes
from rlplug.core.acting import ActorView, env_action
from rlplug.core.env_members import as_evaluation_env, env_capability
from rlplug.core.heads import observation_key
from rlplug.core.masks import MASK
from rlplug.core.training import compile_update
from rlplug.errors import UserError
from rlplug.recipe import EVAL_SEED_OFFSET, MAX_EVAL_EPISODES
from rlplug.registry import protocols
from rlplug.run import changes, start
from rlplug.run.batched import BatchedRun
from rlplug.run.directory import default_run_dir
from rlplug.run.evaluation import borrowed_eval_env, build_eval_env, check_eval_env, evaluate
from rlplug.run.init_from import Source
from rlplug.run.seeds import SeedRuns
from rlplug.run.trainer import Run


class Agent:
    """A built recipe: env, algorithm and run directory; train it in as many pieces as you like."""

    def __init__(self, run: Run):
        self.run = run

    @classmethod
    def from_recipe(cls, recipe: str | Path | Mapping[str, Any], *, out: str | Path | None = None,
                    seeds: Sequence[int] | None = None, batched: bool | None = None,
                    **overrides: Any) -> Agent | SeedAgents:
        """Build from a recipe: a TOML file, or the same tables as a dict (``{"env": {"use": "gym", "id":
        "CartPole-v1"}, "algorithm": {"use": "ppo"}}``). Overrides are dotted keys (``**{"algorithm.lr":
        3e-4}``) or tables (``algorithm={"lr": 3e-4}``), validated exactly like the file and like ``--set``.

        ``seeds=[0, 1, 2]``: one run per seed (its ``run.seed``) under ``out/seed-N``, given back as
        :class:`SeedAgents` (``agents[seed]`` is each seed's :class:`Agent`); ``agents.train()`` trains them
        together in one process, their networks stacked and updated at once under ``torch.vmap`` (what ``rlplug
        run --seeds --batched`` trains; refused in one line where the recipe cannot be batched), or, with
        ``batched=False``, one after another (``rlplug run --seeds`` without ``--batched``). Built as ``rlplug
        run`` builds (:func:`rlplug.run.start.build`)."""
        data, file, name = recipe_data(recipe, overrides)
        run_dir = Path(out) if out else default_run_dir(name)
        if seeds is None:
            if batched:
                raise UserError("batched=True trains the seeds of seeds= together; give seeds too (seeds=[0, 1])")
            return cls(start.build(recipes.validate(data, file=file), run_dir, file=file))
        if "run.seed" in flatten(overrides) or isinstance(seeds, (str, bytes)) or not seeds or \
                len(set(seeds)) != len(seeds) or not all(isinstance(s, int) and s >= 0 for s in seeds):
            raise UserError(f"seeds={seeds!r}: expected distinct non-negative whole numbers, and no run.seed beside")
        recipe_by_seed = {}
        for seed in seeds:
            recipes.set_value(data, "run.seed", seed, file=file)
            recipe_by_seed[seed] = recipes.validate(copy.deepcopy(data), file=file)
        together = True if batched is None else batched  # the documented default: seeds= trains together
        return SeedAgents(start.build(recipe_by_seed, run_dir, batched=together, file=file))

    @classmethod
    def from_run(cls, source: str | Path, *, recipe: str | Path | Mapping[str, Any] | None = None,
                 out: str | Path | None = None, init_optimiser: bool = False, allow_unverified: bool = False,
                 **overrides: Any) -> Agent:
        """A new run in ``out`` that starts from the weights of ``source`` (a run directory's latest checkpoint,
        or a checkpoint file such as ``best.pt``), as ``rlplug run RECIPE --init-from SOURCE`` does: its
        networks, env normalisation statistics and preprocessor, its optimiser state only with
        ``init_optimiser=True``, frames from 0. ``recipe`` (default: the source's own) and ``overrides`` as
        :meth:`from_recipe` takes them; networks of other shapes, or another algorithm, are refused in one line."""
        start_at = Source.read(source, optimiser=init_optimiser, allow_unverified=allow_unverified)
        data, file, name = recipe_data(start_at.state["recipe"] if recipe is None else recipe, overrides)
        file = str(start_at.path) if recipe is None else file
        run_dir = Path(out) if out else default_run_dir(name if recipe is not None else Path(source))
        return cls(start.build(recipes.validate(data, file=file), run_dir, file=file, init_from=start_at))

    @classmethod
    def load(cls, path: str | Path, *, out: str | Path | None = None, allow_unverified: bool = False) -> Agent:
        """An agent from a checkpoint written by :meth:`save` (or a run's ``checkpoint.pt``); one written before
        checkpoints carried a digest only with ``allow_unverified=True`` (nothing can check its data)."""
        run, _ = Run.from_checkpoint(Path(path), Path(out) if out else default_run_dir(Path(path)),
                                     allow_unverified=allow_unverified)
        return cls(run)

    def train(self, max_frames: int | None = None, max_episodes: int | None = None, max_iters: int | None = None,
              eval_every: int | None = None, callbacks: Sequence[Any] = (), *, log_every_frames: int | None = None,
              eval_env: Mapping[str, Any] | protocols.Env | None = None, eval_episodes: int | None = None,
              checkpoint_every_frames: int | None = None, compile: bool | None = None) -> dict[str, Any]:
        """Train on; stops at the recipe's ``total_frames`` or the first limit given, or when a callback stops it
        (status ``stopped``). Returns the summary.

        ``callbacks``: objects with any of ``on_update``, ``on_evaluation``, ``on_checkpoint``
        (:class:`rlplug.registry.protocols.Callback`), told of this training after the recipe's ``[[callbacks]]``.

        From this call on: ``log_every_frames``, the loggers get a row every this many frames (the recipe's
        ``run.log_every_frames``); ``eval_env``, evaluations run on another env, an env table (``{"use": "gym",
        "id": "CartPole-v1", "max_episode_steps": 200}``, the recipe's ``[eval.env]``) or a built env (a TorchRL
        ``EnvBase``, left open for the caller); ``eval_episodes``, episodes per evaluation (``eval.episodes``);
        ``checkpoint_every_frames``, frames between checkpoints (``run.checkpoint_every_frames``, 0: only at the
        end); ``compile=True``, the update compiled from now on (``run.compile``; a compiled update cannot be
        undone in the process, so ``compile=False`` on a compiled run is refused). Tables and numbers are validated
        as the recipe is, and recorded in it (checkpoints and ``resume`` keep them)."""
        for name, value, least in (("max_frames", max_frames, 1), ("max_episodes", max_episodes, 1),
                                   ("max_iters", max_iters, 1), ("eval_every", eval_every, 0)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
                # 0 and negative limits read as "no limit" below them and trained to the end
                raise UserError(f"train({name}={value!r}): expected a whole number of at least {least}, or None "
                                f"for no limit")
        changes = {key: value for key, value in (
            ("run.log_every_frames", log_every_frames), ("eval.episodes", eval_episodes),
            ("run.checkpoint_every_frames", checkpoint_every_frames), ("run.compile", compile),
            ("eval.env", dict(eval_env) if isinstance(eval_env, Mapping) else None)) if value is not None}
        if changes:
            self._change_recipe(changes, new_eval_env=eval_env is None or "eval.env" in changes)
        if eval_env is not None and "eval.env" not in changes:
            self.run.use_eval_env(borrowed_eval_env(self.run.env, eval_env), borrowed=True)
        return self.run.train(max_frames=max_frames, max_episodes=max_episodes, max_iters=max_iters,
                              eval_every=eval_every, callbacks=callbacks)

    def _change_recipe(self, changes: Mapping[str, Any], *, new_eval_env: bool) -> None:
        """The run's recipe with ``changes`` (dotted keys), validated, and what they change built: an eval env of
        the new ``[eval.env]`` or episode count where the run builds its own (``new_eval_env``), the update
        compiled. Everything is checked before anything changes, so a refused call leaves the run as it was."""
        data = self.run.recipe.resolved()
        for key, value in changes.items():
            recipes.set_value(data, key, copy.deepcopy(value), file="Agent.train")
        recipe, before = recipes.validate(data, file="Agent.train"), self.run.recipe
        if before.run.compile and not recipe.run.compile:
            raise UserError("compile=False: this run's update is already compiled and stays so in this process; "
                            "to train uncompiled, resume its directory with --set run.compile=false")
        rebuild = "eval.env" in changes or (new_eval_env and recipe.eval.episodes != before.eval.episodes
                                            and not self.run.eval_env_borrowed)
        env = build_eval_env(recipe) if rebuild else None
        try:
            if env is not None:
                check_eval_env(self.run.env, env, "eval_env")
            if recipe.run.compile and not before.run.compile:
                compile_update(self.run.algorithm, recipe.algorithm.title)
        except UserError:
            if env is not None:
                env.close()
            raise
        if env is not None:
            self.run.use_eval_env(env, borrowed=False)
        if recipe.eval.episodes != before.eval.episodes and hasattr(self.run.algorithm, "eval_episodes"):
            cast(Any, self.run.algorithm).eval_episodes = recipe.eval.episodes  # what num_test_episodes reports
        self.run.recipe = recipe

    def log(self, name: str, value: float) -> None:
        """A value of your own to every logger of the run at the current frame (a column of ``metrics.csv``): during
        :meth:`train` (from a callback) with that round's, otherwise when the next :meth:`train` starts."""
        self.run.callbacks.log(name, value, "Agent")

    def evaluate(self, episodes: int | None = None) -> list[float]:
        """Returns of the deterministic policy over ``episodes`` episodes (default: the recipe's
        ``eval.episodes``), from the start states of the run's own evaluations, with the env's normalisation
        statistics frozen."""
        if episodes is None or episodes == self.run.recipe.eval.episodes:
            return self.run.evaluate()
        if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
            raise UserError(f"evaluate(episodes={episodes!r}): expected a whole number of at least 1")
        if episodes > MAX_EVAL_EPISODES:  # the bound eval.episodes and eval --episodes have
            raise UserError(f"evaluate(episodes={episodes}): at most {MAX_EVAL_EPISODES}: more episodes take days "
                            f"and add nothing to the mean return")
        recipe = self.run.recipe
        env = self.run.eval_env if self.run.eval_env_borrowed else build_eval_env(recipe, episodes)
        try:
            as_evaluation_env(env, self.run.env_statistics())
            return evaluate(env, self.run.algorithm.policy, episodes, seed=recipe.run.seed + EVAL_SEED_OFFSET)
        finally:
            if not self.run.eval_env_borrowed:
                env.close()

    @torch.no_grad()
    def act(self, observation: TensorDictBase, deterministic: bool = True) -> TensorDictBase:
        """The policy on a TensorDict of observations (TorchRL's layout); writes ``action`` into it."""
        check_tensordict(self.run.env.observation_spec, self.run.algorithm.policy, observation)
        kind = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
        with set_exploration_type(kind):
            return self.run.algorithm.policy(observation)

    @torch.no_grad()
    def select_action(self, observation: np.ndarray | Mapping[str, np.ndarray],
                      deterministic: bool = True) -> np.ndarray:
        """An action for a numpy observation, or a batch of them, in gymnasium's format (an index for discrete
        actions, from the space's start; an index per part for MultiDiscrete). Observations are taken as a
        gymnasium env gives them (a Dict observation as a dict of arrays of its Box entries); the recipe's
        observation normalisation (with the statistics learned so far) is applied here, as in training. Where the
        env masks actions, the observation is the dict the env gives, its ``action_mask`` entry included, and
        the action is one it allows."""
        env = self.run.env
        observation, mask = split_mask(env.observation_spec, observation)
        observation = policy_entries(self.run.recipe.env.policy_in_keys, observation)
        check_observation(env.observation_spec, observation)
        normalize = env_capability(env, protocols.Env.normalize_observation)
        if normalize:
            observation = normalize(observation)
        batch, single = observation_batch(env.observation_spec, observation)
        masks = None if mask is None else mask_batch(mask, len(batch), single)
        try:
            view = ActorView.of(self.run.algorithm.policy)
            action, _ = view.act(batch, deterministic=deterministic, mask=masks)
        except TypeError:  # a deterministic actor or a Q-network policy: through its TensorDict interface
            key = cast(TensorDictModuleBase, self.run.algorithm.policy).in_keys[0]  # the contract: a TensorDict module
            data = TensorDict({key: batch, **({MASK: masks} if masks is not None else {})}, batch_size=batch.shape[:1])
            action = self.act(data, deterministic).get("action")
        read = env_capability(env, protocols.Env.read_action)
        actions = np.asarray(read(action)) if read is not None else env_action(action, type(env.action_spec) is OneHot)
        return actions[0] if single else actions

    def update_algorithm_parameter(self, name: str, value: Any) -> None:
        """Change ``name`` of the algorithm's table (``lr``, ``clip_epsilon``, ``exploration_noise.sigma``...) from
        its next update on, as ``rlplug set`` does for a run in another process: listed in ``parameters.jsonl``,
        logged as a metrics row, kept by checkpoints (:mod:`rlplug.run.changes`)."""
        changes.change(self.run, name, value, source="Agent.update_algorithm_parameter")

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint that :meth:`load` reads back (plain tensors and numbers, no pickled code)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.run.save_checkpoint(path)
        return path

    @property
    def frames(self) -> int:
        return self.run.frames

    @property
    def algorithm(self) -> protocols.Algorithm:
        """The algorithm the run trains: pytorchrl's interface (``acting_step``, ``gamma``...) is on it."""
        return self.run.algorithm

    def close(self) -> None:
        """Close the envs (their worker processes, with ``env.vectorization = "async"``) and give up the run
        directory; the agent is not used afterwards."""
        self.run.close()


def recipe_data(recipe: str | Path | Mapping[str, Any], overrides: Mapping[str, Any]) -> tuple[dict, str, Path]:
    """A recipe file's or dict's tables with ``overrides`` set (dotted keys or tables), the name its errors
    give, and the name a default run directory takes."""
    if isinstance(recipe, Mapping):
        data, file, name = copy.deepcopy(dict(recipe)), "<recipe dict>", Path("recipe")
    else:
        name = Path(recipe)
        data, file = recipes.read_toml(name), str(name)
    for key, value in flatten(overrides).items():
        recipes.set_value(data, key, value, file=file)
    return data, file, name


def split_mask(observation_spec, observation: Any) -> tuple[Any, np.ndarray | None]:
    """``select_action``'s observation without its ``action_mask``, and the mask, where the env masks actions
    (a :class:`UserError` where it is missing); otherwise the observation as it is and None. A Dict observation
    whose one other entry is what the networks read gives that entry (:class:`rlplug.core.masks.MaskEntry`)."""
    if MASK not in observation_spec.keys():
        return observation, None
    if not isinstance(observation, Mapping) or MASK not in observation:
        raise UserError(f"select_action(observation=...): this env allows only some actions at each step; pass the "
                        f"observation as the env gives it, a dict with its '{MASK}' entry")
    rest = {name: value for name, value in observation.items() if name != MASK}
    if not isinstance(observation_spec[observation_key(observation_spec)], Composite) and len(rest) == 1:
        rest = next(iter(rest.values()))
    return rest, np.asarray(observation[MASK])


def policy_entries(names: Sequence[str], observation: Any) -> Any:
    """``select_action``'s observation as the policy reads it where ``[algorithm.policy] in_keys`` names its
    entries and the observation is the env's dict: the named entries, concatenated along their last axis as the
    env's ``observation`` gathers vectors (:mod:`rlplug.core.observations`); otherwise as it is."""
    if not names or not isinstance(observation, Mapping):
        return observation
    missing = [name for name in names if name not in observation]
    if missing:
        raise UserError(f"select_action(observation=...): the policy reads the entries {list(names)} "
                        f"([algorithm.policy] in_keys), and this dict has no {missing[0]!r}")
    if len(names) == 1:
        return observation[names[0]]
    return np.concatenate([np.asarray(observation[name], dtype=np.float32) for name in names], axis=-1)


def mask_batch(mask: np.ndarray, rows: int, single: bool) -> torch.Tensor:
    """``select_action``'s ``action_mask`` as a ``[rows, choices]`` boolean batch."""
    tensor = torch.as_tensor(mask).bool()
    tensor = tensor.unsqueeze(0) if single else tensor
    if tensor.ndim != 2 or len(tensor) != rows:
        raise UserError(f"select_action(observation=...): '{MASK}' has shape {list(mask.shape)}, expected one flag "
                        f"per action for each observation")
    return tensor


def check_observation(observation_spec, observation: Any) -> None:
    """A :class:`UserError` naming what ``select_action``'s ``observation`` should be, where it is not one
    observation (or a batch of them) of the env's shapes, numeric and finite: torch's own errors ("mat1 and mat2
    shapes cannot be multiplied") name neither the argument nor the shape, and a NaN gives a NaN action."""
    spec = observation_spec[observation_key(observation_spec)]
    if isinstance(spec, Composite):
        if not isinstance(observation, Mapping):
            raise UserError(f"select_action(observation=...): this env's observations are a dict of "
                            f"{', '.join(map(repr, spec.keys()))}, got {type(observation).__name__}")
        for name in spec.keys():
            if name in observation:
                _check_entry(f"observation[{name!r}]", spec[name], observation_spec.ndim, observation[name])
        return
    _check_entry("observation", spec, observation_spec.ndim, observation)


def _check_entry(what: str, spec, env_dims: int, value: Any) -> None:
    shape = tuple(spec.shape[env_dims:])
    expected = (f"an array of shape {shape} ({spec.dtype}), or a batch of them of shape (N, "
                f"{', '.join(map(str, shape))})")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):  # ragged nested lists, objects numpy cannot make an array of
        array = None
    if array is None or array.dtype.kind not in "biuf":
        raise UserError(f"select_action({what}=...): expected {expected}, got {_described(value)}")
    if array.shape != shape and array.shape[1:] != shape:
        raise UserError(f"select_action({what}=...): expected {expected}, got shape {array.shape}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise UserError(f"select_action({what}=...): it holds NaN or infinity; a policy can only act on finite "
                        f"observations")


def _described(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def check_tensordict(observation_spec, policy: Any, observation: Any) -> None:
    """A :class:`UserError` where ``act``'s ``observation`` is not a TensorDict holding the policy's inputs with
    the env's shapes (batch dimensions first)."""
    keys = [key for key in getattr(policy, "in_keys", []) if key in observation_spec.keys(True)]
    env_dims = observation_spec.ndim

    def described(key: Any) -> str:
        spec = observation_spec[key]
        return repr(key) if isinstance(spec, Composite) else \
            f"{key!r} of shape [..., {', '.join(map(str, spec.shape[env_dims:]))}]"

    shown = ", ".join(map(described, keys))
    if not isinstance(observation, TensorDictBase):
        raise UserError(f"act(observation=...): expected a TensorDict holding {shown or 'the observations'} "
                        f"(select_action takes numpy observations), got {type(observation).__name__}")
    for key in keys:
        spec = observation_spec[key]
        shape = tuple(spec.shape[env_dims:])
        value = observation.get(key, None)
        if value is None or isinstance(spec, Composite) != isinstance(value, TensorDictBase):
            raise UserError(f"act(observation=...): the TensorDict has no {key!r} of this env's kind; expected "
                            f"{shown}")
        if isinstance(spec, Composite):
            continue
        if tuple(value.shape[observation.batch_dims:]) != shape:
            raise UserError(f"act(observation=...): {key!r} has shape {tuple(value.shape)} for batch size "
                            f"{tuple(observation.batch_size)}; expected {shape} after the batch dimensions")


def observation_batch(observation_spec, observation) -> tuple[torch.Tensor | TensorDict, bool]:
    """A numpy observation (a dict of arrays for a Dict observation) as a batch of the spec's dtypes, and
    whether it was one observation (then a batch of one)."""
    spec = observation_spec[observation_key(observation_spec)]
    env_dims = observation_spec.ndim
    if isinstance(spec, Composite):
        missing = sorted(set(spec.keys()) - set(observation))
        if missing:
            raise UserError(f"the observation has no entry {', '.join(map(repr, missing))}; this policy reads "
                            f"{', '.join(map(repr, spec.keys()))}")
        values = {name: torch.as_tensor(np.asarray(observation[name]), dtype=spec[name].dtype) for name in spec.keys()}
        name = next(iter(values))
        single = values[name].ndim == len(spec[name].shape) - env_dims
        batch = TensorDict(values, batch_size=[]) if single else TensorDict(values, batch_size=values[name].shape[:1])
        return (batch.unsqueeze(0) if single else batch), single
    tensor = torch.as_tensor(np.asarray(observation), dtype=spec.dtype)
    single = tensor.ndim == len(spec.shape) - env_dims
    return (tensor.unsqueeze(0) if single else tensor), single


class SeedAgents:
    """Several seeds of one recipe, each an :class:`Agent` of its own (``agents[seed]``) with its run directory
    ``out/seed-N``, trained together (:class:`~rlplug.run.batched.BatchedRun`) or one after another
    (:class:`~rlplug.run.seeds.SeedRuns`)."""

    def __init__(self, runs: BatchedRun | SeedRuns):
        self.runs = runs
        self.agents = {run.recipe.run.seed: Agent(run) for run in runs.runs} if isinstance(runs, BatchedRun) \
            else {seed: Agent(runs.run(seed)) for seed in runs.seeds}

    def train(self, max_frames: int | None = None, max_iters: int | None = None) -> dict[int, dict[str, Any]]:
        """Train every seed on (to the recipe's ``total_frames`` or the first limit given); returns each seed's
        summary. Together, a seed that diverged has status ``diverged`` and trains no more while the others go
        on; one after another, it raises :class:`rlplug.run.schedule.TrainingDiverged` as :meth:`Agent.train`."""
        return self.runs.train(max_frames=max_frames, max_iters=max_iters)["seeds"]

    def __getitem__(self, seed: int) -> Agent:
        return self.agents[seed]

    @property
    def seeds(self) -> list[int]:
        return list(self.agents)

    def close(self) -> None:
        """Close every seed's envs and give up their run directories."""
        self.runs.close()


def flatten(overrides: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"algorithm": {"lr": 1}, "run.seed": 2}`` -> ``{"algorithm.lr": 1, "run.seed": 2}``; a table
    with ``use`` stays whole, since it replaces a component."""
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and "use" not in value:
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


__all__ = ["Agent", "SeedAgents", "UserError"]
