"""An env checked against what it promises (``rlplug check-env``; SB3's ``check_env``, TorchRL's
``check_env_specs``): :func:`check_env` steps it with random actions through resets and time limits on every
copy and gives an :class:`EnvReport`, each broken promise one line.

What is checked, each through TorchRL's ``EnvBase`` API and rlplug's env protocol
(:class:`rlplug.registry.protocols.Env`):

- TorchRL's own ``check_env_specs`` (its first failure, in one line);
- the specs themselves: the ``reward``, ``done`` and ``terminated`` entries rlplug reads, action bounds that are
  finite on one side only or low above high;
- every reset's and every step's entries against their specs: present, of the spec's shape and dtype, finite
  (no NaN or infinity), inside a bounded spec's bounds (the reward's range too) or a discrete spec's values;
- ``done`` equal to ``terminated | truncated``; a reset's observations in their spec, as a step's (a reset that
  leaves ``done`` true TorchRL refuses itself: its error is the problem);
- a time limit the env claims (``time_limit``, its ``max_episode_steps``, a ``StepCounter``'s ``max_steps``):
  no episode runs past it;
- seeding: the same seed and actions give the same observations, rewards and ends (statistics frozen);
- the array road where the env offers it (``reset_arrays``, ``step_arrays``): arrays of the protocol's shapes
  and dtypes, and the same episodes as the TensorDict road from the same seed and actions.

An exception the env raises is a problem too, ending the stepping where it came.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, OneHot, TensorSpec
from torchrl.envs import EnvBase, StepCounter, TransformedEnv
from torchrl.envs.transforms import Compose

from rlplug.core.env_members import env_capability, env_member
from rlplug.core.rollout import TensorDictRoad
from rlplug.core.transformed import env_rewards
from rlplug.registry import protocols

#: Steps of each copy the seeding and the array road are compared over.
COMPARED_STEPS = 64
#: Bounds of at most this many entries are listed one by one in the summary.
LISTED_BOUNDS = 8
#: A message quoted from TorchRL or an env is cut to this many characters (TorchRL's print whole specs).
QUOTED = 300


@dataclass
class EnvReport:
    """What :func:`check_env` found: the summary and each problem as one line (none: the env keeps its
    promises, as far as these steps show)."""

    name: str
    copies: int
    observation: str
    action: str
    reward: str
    #: the time limit the env claims and where the claim comes from, or None
    time_limit: tuple[int, str] | None = None
    #: steps taken by each copy (every copy steps together)
    steps: int = 0
    episode_lengths: list[int] = field(default_factory=list)
    episode_returns: list[float] = field(default_factory=list)
    #: what was compared beyond the random walk (seeding, the array road), one line each
    compared: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: what a user may want to know that breaks no promise (copies that ended no episode, unbounded actions)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> list[str]:
        """The summary's lines (without the problems)."""
        copies = f"{self.copies} cop{'y' if self.copies == 1 else 'ies'}"
        lines = [f"env: {self.name}, {copies}", f"observation: {self.observation}", f"action: {self.action}",
                 f"reward: {self.reward}"]
        if self.time_limit is not None:
            lines.append(f"time limit: {self.time_limit[0]} steps ({self.time_limit[1]})")
        episodes = len(self.episode_lengths)
        walked = f"steps: {self.steps} of each copy ({self.steps * self.copies} in all), random actions; " \
                 f"{episodes} episode{'s' * (episodes != 1)} ended"
        if episodes:
            walked += (f", mean length {np.mean(self.episode_lengths):.4g} (longest {max(self.episode_lengths)}), "
                       f"mean return {np.mean(self.episode_returns):.4g}")
        lines.append(walked)
        lines.extend(f"checked: {line}" for line in self.compared)
        lines.extend(f"note: {line}" for line in self.notes)
        return lines


# -- describing specs ------------------------------------------------------------------------------------------


def key_text(key: Any) -> str:
    return repr(key) if isinstance(key, str) else repr(tuple(key))


def number(value: float) -> str:
    return f"{value:.4g}"


def describe(spec: TensorSpec, batch_dims: int) -> str:
    """One line for a spec: each entry's kind, dtype, shape of one copy and bounds or values."""
    if isinstance(spec, Composite):
        parts = [f"{key_text(key)} {describe(spec[key], batch_dims)}" for key in spec.keys(True, True)]
        return "; ".join(parts) or "no entries"
    dtype = str(spec.dtype).removeprefix("torch.")
    shape = list(spec.shape[batch_dims:])
    if isinstance(spec, OneHot):
        return f"one-hot of {spec.space.n} ({dtype}, shape {shape})"
    if type(spec) is Categorical:
        values = "true/false" if spec.dtype == torch.bool else f"0 to {spec.space.n - 1}"
        return f"{dtype} {shape}, {values}"
    if isinstance(spec, Bounded):
        one = (0,) * batch_dims  # every copy's bounds are the first's in rlplug's envs
        low, high = spec.space.low.expand(spec.shape)[one].flatten().float(), \
            spec.space.high.expand(spec.shape)[one].flatten().float()
        if bool((low == low[0]).all()) and bool((high == high[0]).all()):
            bounds = f"in [{number(low[0])}, {number(high[0])}]"
        elif low.numel() <= LISTED_BOUNDS:
            bounds = f"low [{', '.join(map(number, low))}], high [{', '.join(map(number, high))}]"
        else:
            bounds = f"bounds per entry, from {number(low.min())} to {number(high.max())}"
        return f"{dtype} {shape} {bounds}"
    if type(spec).__name__ == "UnboundedContinuous":
        return f"{dtype} {shape}, unbounded"
    return f"{dtype} {shape} ({type(spec).__name__})"


# -- the findings -----------------------------------------------------------------------------------------------


class Findings:
    """Problems by kind: each kind one line, its first occurrence and how often it came."""

    def __init__(self) -> None:
        self.found: dict[Any, list] = {}  # kind -> [message, where, count]

    def add(self, kind: Any, message: str, where: str = "") -> None:
        if kind in self.found:
            self.found[kind][2] += 1
        else:
            self.found[kind] = [message, where, 1]

    def __contains__(self, kind: Any) -> bool:
        return kind in self.found

    def lines(self) -> list[str]:
        lines = []
        for message, where, count in self.found.values():
            times = f", {count} times in all" if count > 1 else ""
            lines.append(f"{message}{f' ({where}{times})' if where else ''}")
        return lines


def quoted(error: BaseException) -> str:
    text = " ".join(str(error).split()) or "(no message)"
    text = text if len(text) <= QUOTED else text[:QUOTED] + "..."
    return f"{type(error).__name__}: {text}"


# -- what the env claims ----------------------------------------------------------------------------------------


def claimed_time_limit(env: EnvBase) -> tuple[int, str] | None:
    """The time limit ``env`` itself claims: a ``max_episode_steps`` member (rlplug's ``torch-classic`` envs),
    else a ``StepCounter`` with ``max_steps`` among its transforms; None where it claims none."""
    limit = env_member(env, "max_episode_steps")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit, "the env's max_episode_steps"
    while isinstance(env, TransformedEnv):
        transforms = env.transform if isinstance(env.transform, Compose) else [env.transform]
        for transform in transforms:
            if isinstance(transform, StepCounter) and transform.max_steps is not None:
                return int(transform.max_steps), "a StepCounter's max_steps"
        env = env.base_env
    return None


def spec_problems(env: EnvBase) -> list[str]:
    """What the specs themselves break: the entries rlplug reads, action bounds."""
    problems = []
    rewards = [key for key in env.reward_keys]
    if "reward" not in rewards:
        listed = ", ".join(map(key_text, rewards)) or "none"
        problems.append(f"the reward spec has no 'reward' entry (it has {listed}); rlplug's algorithms and episode "
                        f"returns read ('next', 'reward')")
    dones = list(env.done_keys)
    for name in ("done", "terminated"):
        if name not in dones:
            listed = ", ".join(map(key_text, dones)) or "none"
            problems.append(f"the done spec has no '{name}' entry (it has {listed}); rlplug reads ('next', "
                            f"'{name}') to end episodes")
    action = env.full_action_spec
    for key in action.keys(True, True):
        spec = action[key]
        if not isinstance(spec, Bounded) or spec.domain != "continuous":
            continue
        low, high = spec.space.low.float(), spec.space.high.float()
        if bool(torch.isnan(low).any() | torch.isnan(high).any()):
            problems.append(f"the action spec {key_text(key)} has NaN bounds")
        elif bool((low > high).any()):
            problems.append(f"the action spec {key_text(key)} has a low bound above its high bound")
        elif bool(torch.isfinite(low).any() | torch.isfinite(high).any()) and \
                not bool(torch.isfinite(low).all() & torch.isfinite(high).all()):
            problems.append(f"the action spec {key_text(key)} is bounded on one side only (low "
                            f"{number(low.min())}, high {number(high.max())}): rlplug's policies take such actions "
                            f"as unbounded and may act outside the bounds; give finite low and high, or neither")
    return problems


def unbounded_actions(env: EnvBase) -> bool:
    spec = env.action_spec
    return spec.domain == "continuous" and hasattr(spec.space, "low") and \
        not bool(torch.isfinite(spec.space.low).any() | torch.isfinite(spec.space.high).any())


# -- entries against their specs --------------------------------------------------------------------------------


class EntryCheck:
    """Checks one tensor entry of a TensorDict against its spec, finding per copy what is wrong."""

    def __init__(self, key: Any, spec: TensorSpec, batch: torch.Size, what: str):
        self.key, self.spec, self.batch, self.what = key, spec, batch, what
        self.copies = max(1, batch.numel())
        self.bounds = None
        if isinstance(spec, Bounded):
            low = spec.space.low.expand(spec.shape).reshape(self.copies, -1)
            high = spec.space.high.expand(spec.shape).reshape(self.copies, -1)
            self.bounds = (low, high)
        self.values = spec.space.n if type(spec) is Categorical and spec.dtype != torch.bool else None

    def __call__(self, data: TensorDictBase, findings: Findings, where: Callable[[int | None], str],
                 rows: torch.Tensor | None = None, entry: Any = None) -> None:
        """``rows``: the copies to check (a bool mask), all where None. ``entry``: the key in ``data``."""
        name = key_text(entry if entry is not None else self.key)
        value = data.get(entry if entry is not None else self.key, None)
        kind = (self.what, self.key)
        if value is None:
            findings.add((kind, "missing"), f"{self.what} has no {name} entry, which its spec declares", where(None))
            return
        if not isinstance(value, torch.Tensor):
            return
        if tuple(value.shape) != tuple(self.spec.shape):
            findings.add((kind, "shape"), f"{self.what} {name} has shape {list(value.shape)} where its spec says "
                         f"{list(self.spec.shape)}", where(None))
            return
        if value.dtype != self.spec.dtype:
            findings.add((kind, "dtype"), f"{self.what} {name} is {str(value.dtype).removeprefix('torch.')} where "
                         f"its spec says {str(self.spec.dtype).removeprefix('torch.')}", where(None))
        flat = value.reshape(self.copies, -1)
        chosen = torch.ones(self.copies, dtype=torch.bool, device=flat.device) if rows is None else rows.reshape(-1)
        if not bool(chosen.any()):
            return
        if flat.is_floating_point():
            broken = ~torch.isfinite(flat)
            bad = broken.any(-1) & chosen
            if bool(bad.any()):
                copy = int(bad.nonzero()[0])
                findings.add((kind, "finite"), f"{self.what} {name} is not finite (NaN or infinity)", where(copy))
            chosen = chosen & ~broken.any(-1)
        if self.bounds is not None:
            low, high = (bound.to(flat.device) for bound in self.bounds)
            outside = ((flat < low) | (flat > high)).any(-1) & chosen
            if bool(outside.any()):
                copy = int(outside.nonzero()[0])
                index = int(((flat[copy] < low[copy]) | (flat[copy] > high[copy])).nonzero()[0])
                findings.add((kind, "bounds"), f"{self.what} {name} is outside its spec's bounds: "
                             f"{number(float(flat[copy, index]))} at index {index}, bounds "
                             f"[{number(float(low[copy, index]))}, {number(float(high[copy, index]))}]", where(copy))
        elif self.values is not None:
            outside = ((flat < 0) | (flat >= self.values)).any(-1) & chosen
            if bool(outside.any()):
                copy = int(outside.nonzero()[0])
                findings.add((kind, "values"), f"{self.what} {name} holds a value outside 0 to {self.values - 1}, "
                             f"the values its spec allows", where(copy))
        elif self.spec.domain == "discrete" and not self.spec.is_in(value):
            findings.add((kind, "values"), f"{self.what} {name} holds a value its {type(self.spec).__name__} spec "
                         f"does not allow", where(None))


def leaf_checks(spec: Composite, batch: torch.Size, what: str) -> list[EntryCheck]:
    return [EntryCheck(key, spec[key], batch, what) for key in spec.keys(True, True)
            if spec[key].dtype is not None]


def as_next(key: Any) -> tuple:
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


def flags(data: TensorDictBase, key: str, copies: int) -> torch.Tensor | None:
    value = data.get(key, None)
    if not isinstance(value, torch.Tensor) or value.numel() != copies:
        return None
    return value.reshape(copies).bool()


# -- the walk ---------------------------------------------------------------------------------------------------


class Walk:
    """The random walk over ``steps`` steps of every copy, training mode, as a run steps."""

    def __init__(self, env: EnvBase, findings: Findings, report: EnvReport):
        self.env, self.findings, self.report = env, findings, report
        batch = env.batch_size
        self.copies = max(1, batch.numel())
        self.observations = leaf_checks(env.full_observation_spec, batch, "a step's observation")
        self.resets = leaf_checks(env.full_observation_spec, batch, "a reset's observation")
        self.rewards = leaf_checks(env.full_reward_spec, batch, "a step's reward")
        self.dones = leaf_checks(env.full_done_spec, batch, "a step's done flags")
        self.reset_dones = leaf_checks(env.full_done_spec, batch, "a reset's done flags")

    def run(self, steps: int, seed: int, limit: int | None, limit_source: str) -> None:
        env, findings, copies = self.env, self.findings, self.copies
        torch.manual_seed(seed)
        try:
            state = TensorDictRoad(env, None).start(seed)
        except Exception as error:
            findings.add("raised", f"the first reset raised {quoted(error)}")
            return
        for check in (*self.resets, *self.reset_dones):
            check(state, findings, lambda copy: "the first reset" + ("" if copy is None else f", copy {copy}"))
        lengths = np.zeros(copies, dtype=np.int64)
        returns = np.zeros(copies)
        for t in range(steps):
            def at(copy: int | None, t: int = t) -> str:
                return f"first at step {t}" + ("" if copy is None else f" of copy {copy}")

            def after(copy: int | None, t: int = t) -> str:
                return f"first after step {t}" + ("" if copy is None else f" in copy {copy}")

            try:
                state = env.rand_action(state)
                step, state = env.step_and_maybe_reset(state)
            except Exception as error:
                findings.add("raised", f"stepping raised {quoted(error)}", f"at step {t}")
                break
            self.report.steps = t + 1
            for check in self.observations:
                check(step, findings, at, entry=as_next(check.key))
            for check in self.rewards:
                check(step, findings, at, entry=as_next(check.key))
            for check in self.dones:
                check(step, findings, at, entry=as_next(check.key))
            nxt = step.get("next")
            done, terminated = flags(nxt, "done", copies), flags(nxt, "terminated", copies)
            truncated = flags(nxt, "truncated", copies)
            if done is None:
                break  # reported by the checks above: nothing says where episodes end
            if terminated is not None:
                expected = terminated | truncated if truncated is not None else terminated
                wrong = done != expected
                if bool(wrong.any()):
                    first = int(wrong.nonzero()[0])
                    parts = f"terminated={bool(terminated[first])}" + \
                        (f", truncated={bool(truncated[first])}" if truncated is not None else "")
                    findings.add("done", f"done is not terminated | truncated: done={bool(done[first])} with "
                                 f"{parts}", at(first))
            if bool(done.any()):  # (TorchRL itself refuses a reset that leaves done true)
                for check in self.resets:
                    check(state, findings, after, rows=done)
            rewards = env_rewards(step).reshape(copies, -1).sum(-1).double().cpu().numpy()
            returns += rewards
            lengths += 1
            if limit is not None:
                over = (lengths == limit + 1) & ~done.cpu().numpy()
                for index in np.flatnonzero(over):
                    findings.add("time limit", f"an episode ran past the time limit of {limit} steps "
                                 f"({limit_source}) without ending", at(int(index)))
            for index in np.flatnonzero(done.cpu().numpy()):
                self.report.episode_lengths.append(int(lengths[index]))
                self.report.episode_returns.append(float(returns[index]))
                lengths[index], returns[index] = 0, 0.0
        never = [copy for copy in range(copies) if lengths[copy] == self.report.steps] if self.report.steps else []
        if never and "raised" not in findings:
            listed = ", ".join(map(str, never[:10])) + (" ..." if len(never) > 10 else "")
            self.report.notes.append(f"cop{'y' if len(never) == 1 else 'ies'} {listed} ended no episode in "
                                     f"{self.report.steps} steps")


# -- seeding and the array road ---------------------------------------------------------------------------------


def random_actions(env: EnvBase, steps: int, seed: int) -> list[torch.Tensor]:
    """``steps`` actions from the action spec, the same for the same seed, the global stream left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return [env.action_spec.rand() for _ in range(steps)]


def as_numpy(value: Any, copies: int) -> np.ndarray | None:
    """An entry as a numpy array ``[copies, ...]``; a TensorDict of entries (a Dict observation) as its leaves
    flattened and concatenated; None where there is no such entry."""
    if isinstance(value, TensorDictBase):
        leaves = [value.get(key).reshape(copies, -1).double() for key in value.keys(True, True)]
        return torch.cat(leaves, -1).cpu().numpy() if leaves else None
    if not isinstance(value, torch.Tensor):
        return None
    return value.reshape(copies, -1).cpu().numpy().copy()


def tensordict_pass(env: EnvBase, seed: int, actions: list[torch.Tensor], start: Callable) -> list[dict]:
    """The TensorDict road from ``start(seed)`` with ``actions``: each step's values as numpy arrays."""
    copies = max(1, env.batch_size.numel())
    state = start(seed)
    steps = [{"observation": as_numpy(state.get("observation", None), copies)}]
    for action in actions:
        state.set(env.action_key, action)
        step, state = env.step_and_maybe_reset(state)
        steps.append({name: as_numpy(step.get(("next", name), None), copies)
                      for name in ("reward", "terminated", "truncated")}
                     | {"next_observation": as_numpy(step.get(("next", "observation"), None), copies),
                        "observation": as_numpy(state.get("observation", None), copies)})
    return steps


def first_difference(a: list[dict], b: list[dict]) -> tuple[int, str, int] | None:
    """Where two passes part: ``(step, entry, copy)``, or None."""
    for t, (x, y) in enumerate(zip(a, b)):
        for name, left in x.items():
            right = y.get(name)
            if left is None or right is None:
                continue
            left, right = np.asarray(left), np.asarray(right)
            copies = left.shape[0] if left.ndim else 1
            if left.size != right.size:
                return t, name, 0
            left, right = left.reshape(copies, -1), right.reshape(copies, -1)
            same = np.isclose(left.astype(np.float64), right.astype(np.float64), rtol=1e-5, atol=1e-6,
                              equal_nan=True).all(-1)
            if not same.all():
                return t, name, int(np.flatnonzero(~same)[0])
    return None


def step_name(t: int) -> str:
    return "the first reset" if t == 0 else f"step {t - 1}"


def frozen(env: EnvBase) -> Callable[[bool], None]:
    """The env's ``set_training`` (statistics frozen with False), or a no-op."""
    return env_capability(env, protocols.Env.set_training) or (lambda training: None)


def seeding_problems(env: EnvBase, seed: int, steps: int, report: EnvReport) -> list[str]:
    """The TensorDict road twice from ``seed`` with the same actions (statistics frozen): the same steps."""
    actions = random_actions(env, steps, seed)
    start = TensorDictRoad(env, None).start
    set_training = frozen(env)
    set_training(False)
    try:
        first, second = (tensordict_pass(env, seed, actions, start) for _ in range(2))
    except Exception as error:
        return [f"stepping raised {quoted(error)} (the seeding check, from seed {seed})"]
    finally:
        set_training(True)
    report.compared.append(f"seeding: seed {seed} twice, the same {steps} random actions: "
                           + ("the same steps" if first_difference(first, second) is None else "other steps"))
    where = first_difference(first, second)
    if where is None:
        return []
    t, name, copy = where
    return [f"the same seed ({seed}) and actions give another {name} at {step_name(t)} of copy {copy}: "
            f"a seeded reset does not make the env's episodes repeat (seed every random stream it draws from and clear "
            f"whatever state a reset should)"]


def array_road(env: EnvBase) -> tuple[Callable, Callable] | None:
    """The env's ``reset_arrays`` and ``step_arrays`` where it offers them now, else None."""
    if not env_capability(env, protocols.Env.supports_tensor_steps):
        return None
    reset, step = (env_capability(env, member) for member in (protocols.Env.reset_arrays, protocols.Env.step_arrays))
    return (reset, step) if reset is not None and step is not None else None


def as_array_action(spec: TensorSpec, action: torch.Tensor) -> np.ndarray:
    """A TensorDict-road action in the array road's format: an index for discrete actions, else floats."""
    if isinstance(spec, OneHot):
        return action.argmax(-1).cpu().numpy()
    return action.cpu().numpy()


def array_pass(env: EnvBase, road: tuple[Callable, Callable], seed: int, actions: list[torch.Tensor],
               problems: list[str]) -> list[dict] | None:
    """The array road from ``reset_arrays(seed)`` with ``actions``; what its arrays break goes to ``problems``."""
    reset, step = road
    copies = max(1, env.batch_size.numel())
    spec = env.observation_spec.get("observation", None)
    shape = (copies, *spec.shape[len(env.batch_size):]) if spec is not None else None
    dtype = torch.empty((), dtype=spec.dtype).numpy().dtype if spec is not None else None
    names = ("next_observation", "reward", "terminated", "truncated", "observation")
    wanted = {"next_observation": (shape, dtype), "observation": (shape, dtype), "reward": ((copies,), np.float32),
              "terminated": ((copies,), np.bool_), "truncated": ((copies,), np.bool_)}

    def arrays_problem(name: str, value: Any, when: str) -> str | None:
        want_shape, want_dtype = wanted[name]
        if not isinstance(value, np.ndarray):
            return f"the array road's {name} is a {type(value).__name__}, not a numpy array ({when})"
        if want_shape is not None and tuple(value.shape) != tuple(want_shape):
            return (f"the array road's {name} has shape {list(value.shape)} where [envs, ...] is "
                    f"{list(want_shape)} ({when})")
        if want_dtype is not None and value.dtype != want_dtype:
            return (f"the array road's {name} is {value.dtype} where the protocol asks for {np.dtype(want_dtype)} "
                    f"({when})")
        return None

    try:
        observation = reset(seed=seed)
        problem = arrays_problem("observation", observation, "reset_arrays")
        if problem:
            problems.append(problem)
            return None
        steps = [{"observation": np.array(observation)}]
        for t, action in enumerate(actions):
            transition = tuple(step(as_array_action(env.action_spec, action)))
            if len(transition) != 5:
                problems.append(f"step_arrays gave {len(transition)} values where the protocol asks for 5 "
                                f"(next_observation, reward, terminated, truncated, observation)")
                return None
            for name, value in zip(names, transition):
                problem = arrays_problem(name, value, f"step_arrays, step {t}")
                if problem:
                    problems.append(problem)
                    return None
            values = dict(zip(names, (np.array(value) for value in transition)))
            steps.append(values)
        return steps
    except Exception as error:
        problems.append(f"the array road raised {quoted(error)}")
        return None


def roads_problems(env: EnvBase, seed: int, steps: int, report: EnvReport) -> list[str]:
    """The array road against the TensorDict road: from the same seed with the same actions, statistics
    frozen, the same steps. ``reset_arrays(seed)`` is matched by either of TorchRL's seeded starts: ``reset(seed=...)``
    (gymnasium's way, which TorchRL's gym wrapper passes on) or ``set_seed`` then ``reset()``."""
    road = array_road(env)
    if road is None:
        return []
    actions = random_actions(env, steps, seed)
    set_training = frozen(env)
    set_training(False)
    problems: list[str] = []

    def seeded_reset(seed: int) -> TensorDictBase:
        TensorDictRoad(env, None).start(seed)  # anything a last step left behind forgotten
        return env.reset(seed=seed)

    where: tuple[int, str, int] | None = None
    try:
        arrays = array_pass(env, road, seed, actions, problems)
        if arrays is None:
            return problems
        for start in (seeded_reset, TensorDictRoad(env, None).start):
            try:
                tensordicts = tensordict_pass(env, seed, actions, start)
            except Exception as error:
                if start is seeded_reset:  # an env whose reset takes no seed: TorchRL's set_seed then
                    continue
                return [f"stepping raised {quoted(error)} (the TensorDict road beside the array road, seed {seed})"]
            where = first_difference(tensordicts, arrays)
            if where is None or where[0] > 0:  # the same first observations: the roads start alike
                break
    finally:
        set_training(True)
    report.compared.append(f"the array road (reset_arrays, step_arrays) beside the TensorDict road, {steps} steps: "
                           + ("the same steps" if where is None else "other steps"))
    if where is not None:
        t, name, copy = where
        problems.append(f"the array road and the TensorDict road part at {step_name(t)} of copy {copy}: another "
                        f"{name} from the same seed ({seed}) and actions; both roads must give the same episodes"
                        + (" (reset_arrays(seed) must start what TorchRL's reset(seed=...) or set_seed(seed) and "
                           "reset() start)" if t == 0 else ""))
    return problems


# -- the whole check --------------------------------------------------------------------------------------------


def check_env(env: EnvBase, *, steps: int = 1000, seed: int = 0, time_limit: tuple[int, str] | None = None,
              name: str = "the env") -> EnvReport:
    """``env`` checked: TorchRL's ``check_env_specs``, its specs, ``steps`` random steps of every copy (resets,
    time limits), seeding, the array road where it has one. ``time_limit``: ``(steps, where it is declared)``
    of a limit the env's maker set (default: the one the env claims itself, :func:`claimed_time_limit`).
    Leaves the env open; global random streams are seeded from ``seed``."""
    batch_dims = len(env.batch_size)
    report = EnvReport(name=name, copies=max(1, env.batch_size.numel()),
                       observation=describe(env.full_observation_spec, batch_dims),
                       action=describe(env.full_action_spec, batch_dims),
                       reward=describe(env.full_reward_spec, batch_dims),
                       time_limit=time_limit or claimed_time_limit(env))
    problems = spec_problems(env)
    if unbounded_actions(env):
        report.notes.append("the actions are unbounded: rlplug's policies act with an unsquashed Gaussian")
    try:
        from torchrl.envs.utils import check_env_specs

        check_env_specs(env, seed=seed)
    except Exception as error:
        problems.append(f"TorchRL's check_env_specs fails: {quoted(error)}")
    findings = Findings()
    limit = report.time_limit
    Walk(env, findings, report).run(steps, seed, limit[0] if limit else None, limit[1] if limit else "")
    problems.extend(findings.lines())
    if "raised" not in findings:
        compared = min(steps, COMPARED_STEPS)
        problems.extend(seeding_problems(env, seed, compared, report))
        problems.extend(roads_problems(env, seed, compared, report))
    report.problems = [re.sub(r"\s+", " ", problem) for problem in problems]
    return report


def lines(report: EnvReport) -> Iterator[str]:
    """The report as printed: the summary, then each problem as a line, or that none was found."""
    yield from report.summary()
    if report.ok:
        yield "no problems found"
        return
    count = len(report.problems)
    yield f"{count} problem{'s' * (count != 1)} found:"
    for problem in report.problems:
        yield f"problem: {problem}"


__all__ = ["EnvReport", "check_env", "claimed_time_limit", "lines"]
