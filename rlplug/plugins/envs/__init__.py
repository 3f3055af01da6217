"""Env plugins: gymnasium ids vectorised in-process (``gym``, with the array road), gymnasium's classic-control
envs written in torch (``torch-classic``), TorchRL's ``PendulumEnv`` (``torchrl-pendulum``) and DeepMind
Control (``dm_control``, TorchRL's ``DMControlEnv``)."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rlplug.errors import UserError, did_you_mean
from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Check, Range


def known_gym_id(env_id: str) -> str | None:
    """The problem with a gymnasium id, or None. An id is a registered id and nothing else: gymnasium imports
    the module named before a colon (``module:Id``), and recipes are data, never a way to run code (a
    checkpoint's stored recipe goes through this check too)."""
    if ":" in env_id:
        return (f"'{env_id}' names a module to import ('module:Id'), which a recipe may not do; use a registered "
                f"gymnasium id, and for an env another package registers, a plugin that imports that package "
                f"(docs/writing-plugins.md)")
    from gymnasium.envs.registration import registry

    if env_id in registry:
        return None
    missing = register_env_packages(env_id)
    if env_id in registry:
        return None
    if missing:
        return f"{env_id} needs the {missing[0]} package: pip install \"rlplug[{missing[1]}]\""
    return f"no gymnasium environment '{env_id}'{did_you_mean(env_id, registry)}"


#: Packages whose gymnasium ids a recipe names without importing anything itself (recipes are data; 'module:Id'
#: is refused): (module, pip name, rlplug extra, how the ids they register look).
ENV_PACKAGES = (
    ("ale_py", "ale-py", "atari", re.compile(r"ALE/.+|\w+(NoFrameskip|Deterministic)-v[04]")),
    ("minatar", "minatar", "minatar", re.compile(r"MinAtar/.+")),
)


#: The gymnasium ids rlplug registers itself (rlplug/plugins/envs/masked.py and privileged.py), and their entry
#: points: strings, so nothing is imported until one is made.
OWN_IDS = {"rlplug/MaskedCartPole-v1": "rlplug.plugins.envs.masked:MaskedCartPole",
           "rlplug/PrivilegedCartPole-v1": "rlplug.plugins.envs.privileged:PrivilegedCartPole"}


def register_env_packages(env_id: str) -> tuple[str, str] | None:
    """Registers the gymnasium ids of the package of :data:`ENV_PACKAGES` that ``env_id`` looks like it is
    from, and rlplug's own (:data:`OWN_IDS`); returns ``(pip name, extra)`` where that package is not installed."""
    import importlib
    import importlib.util

    import gymnasium as gym
    from gymnasium.envs.registration import registry

    for own_id, entry_point in OWN_IDS.items():
        if own_id not in registry:
            gym.register(own_id, entry_point=entry_point, max_episode_steps=500, reward_threshold=475.0)

    for module, pip_name, extra, ids in ENV_PACKAGES:
        if not ids.fullmatch(env_id):
            continue
        if importlib.util.find_spec(module) is None:
            return pip_name, extra
        if module == "minatar":  # registers its ids on request only
            if not any(name.startswith("MinAtar/") for name in registry):
                importlib.import_module("minatar.gym").register_envs()
        else:  # ale_py registers its ids when imported
            importlib.import_module(module)
    return None


def gym_wrapper_names() -> list[str]:
    """The wrappers a recipe may name: the public wrapper classes of ``gymnasium.wrappers``."""
    import gymnasium.wrappers as wrappers

    return [name for name in wrappers.__all__ if name[:1].isupper()]


def gym_wrapper_class(name: str):
    """The class of ``gymnasium.wrappers`` called ``name`` (recipes are data: nothing else is ever imported),
    or ``UserError`` saying what is wrong with the name."""
    import gymnasium as gym
    import gymnasium.wrappers as wrappers

    names = gym_wrapper_names()
    if name not in names:
        raise UserError(f"no gymnasium wrapper '{name}'{did_you_mean(name, names)}; wrappers are looked "
                               "up in gymnasium.wrappers only")
    try:
        cls = getattr(wrappers, name)
    except (ImportError, gym.error.Error) as error:
        detail = " ".join(str(error).split())
        raise UserError(f"gymnasium wrapper '{name}' is not available here: {detail}") from None
    if not (isinstance(cls, type) and issubclass(cls, gym.Wrapper)):
        raise UserError(f"gymnasium.wrappers.{name} is not a wrapper of one env")
    return cls


def known_wrapper_name(name: str) -> str | None:
    """The problem with a wrapper name, or None."""
    try:
        gym_wrapper_class(name)
    except UserError as error:
        return error.message
    return None


@dataclass(frozen=True)
class Wrapper:
    """A gymnasium wrapper around each sub-env: a class of ``gymnasium.wrappers`` by name, and its arguments
    (all but the env), e.g. ``{name = "TimeAwareObservation", kwargs = {normalize_time = true}}``."""

    name: Annotated[str, Check(known_wrapper_name)]
    kwargs: dict[str, Any] = field(default_factory=dict)


def wrapper_arguments_problem(wrapper: Wrapper) -> str | None:
    """Arguments the wrapper does not take, or required ones missing; checked against its signature."""
    signature = inspect.signature(gym_wrapper_class(wrapper.name).__init__)
    parameters = [p for p in signature.parameters.values() if p.name not in ("self", "env")]
    functions = [p.name for p in parameters if "Callable" in str(p.annotation)
                 and (p.name in wrapper.kwargs or p.default is p.empty)]
    if functions:  # TOML has no functions: a string here would be called in the middle of a run
        return (f"gymnasium wrapper {wrapper.name} takes a function as '{functions[0]}', which a recipe cannot "
                f"give (recipes are data); apply it in an env plugin instead (docs/writing-plugins.md)")
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in wrapper.kwargs:
        if key not in names:
            known = ", ".join(names) or "none"
            return (f"gymnasium wrapper {wrapper.name} takes no argument '{key}'{did_you_mean(key, names)}; "
                    f"its arguments: {known}")
    missing = [p.name for p in parameters if p.default is p.empty and p.kind is not p.VAR_POSITIONAL
               and p.name not in wrapper.kwargs]
    if missing:
        return f"gymnasium wrapper {wrapper.name} needs {', '.join(repr(m) for m in missing)} in its kwargs"
    return None


def indices_problem(indices: list[int]) -> str | None:
    """What is wrong with ``observation_indices`` before the env exists (the range is checked at build)."""
    if not indices:
        return "must name at least one observation entry to keep"
    if len(set(indices)) != len(indices):
        return f"names an entry twice: {indices}"
    return None


#: the recipe's gymnasium wrappers, each checked against its class's signature
Wrappers = list[Annotated[Wrapper, Check(wrapper_arguments_problem)]]

#: More copies than this, stepped in one process, earn a warning: a minute of silence otherwise.
MANY_ENVS = 1024


def make_gym(
    #: the gymnasium id, e.g. CartPole-v1
    id: Annotated[str, Check(known_gym_id)],
    #: copies of the env, stepped together in this process
    num_envs: Annotated[int, Range(ge=1)] = 1,
    max_episode_steps: Annotated[int, Range(ge=1)] | None = None,
    kwargs: dict[str, Any] | None = None,
    wrappers: Wrappers = (),  # type: ignore[assignment]  # the schema makes defaults lists
    flatten_observations: bool = False,
    frame_stack: Annotated[int, Range(ge=1)] = 1,
    observation_indices: Annotated[list[Annotated[int, Range(ge=0)]], Check(indices_problem)] | None = None,
    normalize_observations: Literal["none", "fixed", "running"] = "none",
    clip_observations: Annotated[float, Range(gt=0)] | None = None,
    normalize_rewards: bool = False,
    #: the discount of the return whose running std scales rewards (normalize_rewards)
    reward_gamma: Annotated[float, Range(ge=0, le=1)] = 0.99,
    #: rewards clipped to [-c, c] while training (Atari: 1, the sign of each score change); evaluation and the
    #: reported returns of evaluation count the env's own
    clip_rewards: Annotated[float, Range(gt=0)] | None = None,
    #: while training, a lost life (info["lives"], as Atari envs give it) ends the episode the algorithm sees and
    #: the game goes on; evaluation plays whole games
    episodic_life: bool = False,
    #: an [H, W, C] image observation as [C, H, W], the layout convolutions read (MinAtar's), after the wrappers
    channels_first: bool = False,
    #: where the copies are stepped: "sync", one after another in this process; "async", each in a worker
    #: process of its own (gymnasium's AsyncVectorEnv), for envs whose step costs more than a pipe's round trip;
    #: "vector", all at once by the id's own array env (gymnasium's vector entry point: CartPole), the very
    #: episodes of "sync" (each copy seeded and restarted by itself), for ids that have one and no per-copy
    #: option (wrappers, frame_stack, observation_indices, flatten_observations, channels_first)
    vectorization: Literal["sync", "async", "vector"] = "sync",
    device: str = "cpu",
):
    """Any gymnasium id, ``num_envs`` copies stepped in this process or in worker processes.

    - ``max_episode_steps``: a time limit (truncation) instead of the id's own.
    - ``kwargs``: arguments of ``gymnasium.make`` for the id.
    - ``wrappers``: gymnasium wrappers around each copy, in order, by class name in ``gymnasium.wrappers``
      with their ``kwargs``.
    - ``flatten_observations``: Dict, Tuple and multi-dimensional Box observations flattened into one vector
      (Discrete, MultiDiscrete and MultiBinary observations are always one-hot encoded). Unset, a Dict keeps
      its entries, each with its shape and dtype, under ``observation`` (``("observation", "image")``),
      for networks that read them (``cnn``); images (Box of 2 or more dims) are kept as gymnasium gives them.
    - ``observation_indices``: only these entries of a one-dimensional observation are kept, in this order
      (after flattening, before frame stacking): partial observability from a recipe, e.g. ``[0, 1]`` is
      Pendulum-v1's cos and sin of the angle without its angular velocity. Unset: all.
    - ``frame_stack``: the last k observations stacked, oldest first (vectors concatenated into one of k times
      the size; other shapes get a leading axis of k); 1: none.
    - ``normalize_observations``: "fixed" rescales into [-1, 1] from the space's finite bounds; "running"
      centres and scales by running statistics (saved with the env's ``state_dict``, frozen by
      ``set_training(False)``).
    - ``clip_observations``: observations clipped to [-c, c] after normalisation.
    - ``normalize_rewards``: rewards scaled by the running std of the discounted return (``reward_gamma``),
      as gymnasium's NormalizeReward; left unscaled out of training (evaluation).
    - ``clip_rewards``, ``episodic_life``: Atari's training-only shaping, off in evaluation, which plays whole
      games and counts the game's score.
    - A Dict observation with an ``action_mask`` entry (MultiBinary(n)) masks a Discrete action of n choices:
      every discrete algorithm chooses only allowed actions (``env.action_mask``; rlplug registers
      ``rlplug/MaskedCartPole-v1``, CartPole with a random mask, to try it).
    - A Dict observation's entries are read together by every network, unless ``[algorithm.policy] in_keys`` and
      ``[algorithm.critic] in_keys`` name each one's (an asymmetric actor-critic; rlplug registers
      ``rlplug/PrivilegedCartPole-v1``, whose critic may read the velocities its policy does not see).
    - ``vectorization``: "async" steps each copy in a worker process of its own; the workers ignore Ctrl-C
      (the run stops after the iteration and closes them) and end with the run however it ends. "vector"
      steps every copy at once by gymnasium's array env of the id, with the episodes "sync" gives.
    """
    from rlplug.plugins.envs.gym import make_gym_vector_env

    # validation registered the id's package in the process that read the recipe; a Ray worker builds the env
    # from the pickled component in a process of its own, where nothing has yet
    register_env_packages(id)
    if num_envs > MANY_ENVS and vectorization != "vector":  # maybe meant, maybe a digit too many: not silence
        import warnings

        from rlplug.errors import RlplugWarning

        how = "in worker processes" if vectorization == "async" else "one after another in this process"
        warnings.warn(RlplugWarning(f"env.num_envs = {num_envs}: each copy is a gymnasium env of its own, stepped "
                                    f"{how}, so starting takes long and each step is slow; more than {MANY_ENVS} "
                                    f"is rarely meant (vectorization = 'vector' steps them as one array where "
                                    f"the id has one)"), stacklevel=2)
    return make_gym_vector_env(
        id, num_envs=num_envs, max_episode_steps=max_episode_steps, make_kwargs=kwargs or {}, device=device,
        wrappers=[(gym_wrapper_class(w.name), dict(w.kwargs)) for w in wrappers],
        flatten_observations=flatten_observations, frame_stack=frame_stack,
        observation_indices=observation_indices, normalize_observations=normalize_observations,
        clip_observations=clip_observations,
        normalize_rewards=normalize_rewards, reward_gamma=reward_gamma, vectorization=vectorization,
        clip_rewards=clip_rewards, episodic_life=episodic_life, channels_first=channels_first,
    )


#: the gymnasium ids torch-classic has (rlplug.plugins.envs.torch_classic.CLASSES: one class each)
TORCH_CLASSIC_IDS = ("CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCarContinuous-v0")
#: the MinAtar ids it has (rlplug.plugins.envs.torch_minatar: MinAtar's games in torch)
TORCH_MINATAR_IDS = ("MinAtar/Breakout-v1",)


def torch_classic_id_problem(env_id: str) -> str | None:
    """The problem with an id for ``torch-classic``, or None."""
    ids = TORCH_CLASSIC_IDS + TORCH_MINATAR_IDS
    if env_id in ids:
        return None
    return (f"torch-classic has no '{env_id}'{did_you_mean(env_id, ids)}; its ids: "
            f"{', '.join(ids)} (any other gymnasium id: use = \"gym\")")


def make_torch_classic(
    #: the gymnasium id of the env it follows: CartPole-v1, Pendulum-v1, Acrobot-v1, MountainCarContinuous-v0,
    #: MinAtar/Breakout-v1
    id: Annotated[str, Check(torch_classic_id_problem)],
    #: copies of the env, stepped together as one batch of tensors
    num_envs: Annotated[int, Range(ge=1)] = 1,
    #: a time limit (truncation) instead of the id's own (500, 200, 500 and 999 steps; MinAtar's: none)
    max_episode_steps: Annotated[int, Range(ge=1)] | None = None,
    device: str = "cpu",
):
    """gymnasium's classic-control envs and MinAtar's Breakout in torch, every copy stepped at once on the run's
    device.

    All ``num_envs`` copies are stepped as one tensor operation on ``run.device`` (a GPU keeps envs, policy
    and update there), with gymnasium's (MinAtar's) dynamics, rewards, terminations, time limits, random
    starts and sticky actions and the observations and actions of the ``gym`` env of the same id: a recipe
    switches by its ``use`` alone. Copies that end restart at once, from the env's seeded random stream; on
    the CPU it offers rlplug's array road."""
    if id in TORCH_MINATAR_IDS:
        from rlplug.plugins.envs.torch_minatar import Breakout

        return Breakout(num_envs, max_episode_steps=max_episode_steps, device=device)
    from rlplug.plugins.envs.torch_classic import make_classic

    return make_classic(id, num_envs=num_envs, max_episode_steps=max_episode_steps, device=device)


def make_sparse_chain(
    #: cells in the chain; the reward is at the last one, length - 1 steps right of the start
    length: Annotated[int, Range(ge=2)] = 40,
    #: copies of the env, stepped together as one batch of tensors
    num_envs: Annotated[int, Range(ge=1)] = 1,
    #: the time limit (truncation); unset: 2 * length steps
    max_episode_steps: Annotated[int, Range(ge=1)] | None = None,
    device: str = "cpu",
):
    """A hard-exploration chain: start at the left end, move left or right, reward 1 only on reaching the right
    end (which ends the episode); the observation is the cell, one-hot.

    Random actions almost never reach the end of a long chain within the time limit, so a policy exploring by its
    own noise sees no reward; an intrinsic reward (``[algorithm.intrinsic] use = "rnd"``) leads it there. Every
    copy is stepped as one tensor operation on the run's device, and the array road is offered on the CPU."""
    from rlplug.plugins.envs.sparse_chain import SparseChain

    return SparseChain(length, num_envs, max_episode_steps=max_episode_steps, device=device)


def in_keys_problem(in_keys: list[str]) -> str | None:
    """What is wrong with ``in_keys`` before the env exists (names are checked against it at build)."""
    if not in_keys:
        return "must name at least one observation entry"
    if len(set(in_keys)) != len(in_keys):
        return f"names an entry twice: {in_keys}"
    return None


#: the observation entries networks read, concatenated into ``observation`` (nested ones as ``params.g``);
#: unset: every floating-point entry, in the env's order
InKeys = Annotated[list[str], Check(in_keys_problem)] | None


def make_torchrl_pendulum(
    #: pendulums stepped together, as one batch
    num_envs: Annotated[int, Range(ge=1)] = 1,
    #: TorchRL's PendulumEnv never ends by itself: episodes are truncated here (gymnasium's Pendulum: 200)
    max_episode_steps: Annotated[int, Range(ge=1)] = 200,
    in_keys: InKeys = None,
    device: str = "cpu",
):
    """TorchRL's own ``PendulumEnv``, batched: observations ``th`` (the angle, 0 upright) and ``thdot``, plus
    the physical constants under ``params`` (all read unless ``in_keys = ["th", "thdot"]``); reward
    ``-(th^2 + 0.1 thdot^2 + 0.001 torque^2)``; one torque in [-2, 2]."""
    from rlplug.plugins.envs.torchrl_envs import make_pendulum

    return make_pendulum(num_envs, max_episode_steps, in_keys, device)


def make_dm_control(
    #: the dm_control suite domain, e.g. cheetah, walker, cartpole
    domain: str,
    #: the domain's task, e.g. run (cheetah), walk (walker), swingup (cartpole)
    task: str,
    #: copies of the task, batched as one env
    num_envs: Annotated[int, Range(ge=1)] = 1,
    #: "sync" steps the copies one after the other in this process (TorchRL's SerialEnv); "async" steps each
    #: in a worker process of its own (TorchRL's ParallelEnv), closed with the run
    vectorization: Literal["sync", "async"] = "sync",
    #: observe the camera's image only (a float [3, pixels_size, pixels_size] entry 'pixels'); needs an
    #: OpenGL backend for MuJoCo (MUJOCO_GL=egl on a machine without a display)
    from_pixels: bool = False,
    pixels_size: Annotated[int, Range(ge=8)] = 84,
    #: each action repeated this many times (action repeat); episodes are 1000 physics steps long
    frame_skip: Annotated[int, Range(ge=1)] = 1,
    in_keys: InKeys = None,
    device: str = "cpu",
):
    """A DeepMind Control suite task through TorchRL's ``DMControlEnv`` (``pip install "rlplug[dm-control]"``):
    observations as float32 entries (cheetah: ``position``, ``velocity``) concatenated for the networks,
    continuous actions in [-1, 1], rewards in [0, 1] per step."""
    from rlplug.plugins.envs.torchrl_envs import make_dm_control as make

    return make(domain, task, num_envs=num_envs, vectorization=vectorization, from_pixels=from_pixels,
                pixels_size=pixels_size, frame_skip=frame_skip, in_keys=in_keys, device=device)


@hookimpl
def rlplug_register_envs(register):
    register("gym", make_gym, aliases=("gymnasium",))
    register("torch-classic", make_torch_classic)
    register("torchrl-pendulum", make_torchrl_pendulum)
    register("dm_control", make_dm_control, aliases=("dm-control", "dmc"))
    register("sparse-chain", make_sparse_chain)
