"""Env construction helpers shared by env plugins, and the tensor-stepping gymnasium env.

:class:`VectorGymEnv` is TorchRL's ``GymWrapper`` (so it is a full ``EnvBase``, transforms and all) with one
addition: the array road, :meth:`~VectorGymEnv.step_arrays` and :meth:`~VectorGymEnv.step_tensors`, steps that
take and return plain arrays or tensors. TorchRL's TensorDict step costs far more than gymnasium's own step for
cheap envs such as CartPole (BENCHMARKS.md); rlplug's collector takes the array road whenever the env offers it
(see :mod:`rlplug.core.collect`).

Everything that changes what the agent sees is applied where both roads pass, so that TorchRL's ``env.step``
and :meth:`~VectorGymEnv.step_tensors` give the same numbers:

- per sub-env, as gymnasium wrappers (:func:`make_gym_vector_env`): the time limit, the recipe's wrappers,
  one-hot encoding or flattening of non-Box observations, the observation entries kept, frame stacking;
- on the vector env, as :class:`VectorStage`: observation normalisation and clipping (final observations of
  ended episodes included), reward scaling, and the statistics behind them.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torchrl.envs import EnvBase, GymWrapper

from rlplug.core.env_members import env_member
from rlplug.errors import UserError
from rlplug.plugins.envs import workers
from rlplug.plugins.envs.entries import pack_entries, packed_entries, with_entries
from rlplug.plugins.envs.stage import CONTINUE, Transition, VectorStage

#: The observation spaces :func:`make_gym_vector_env` takes, for messages.
SUPPORTED_OBSERVATIONS = ("Box; Discrete, MultiDiscrete and MultiBinary (one-hot encoded); Dict (its entries "
                          "kept, or concatenated with flatten_observations = true); Tuple with flatten_observations "
                          "= true")
#: The action spaces rlplug's policies act in, for messages.
SUPPORTED_ACTIONS = "Discrete, MultiDiscrete, MultiBinary and Box of floats, of any shape but MultiDiscrete's"


class VectorGymEnv(GymWrapper):
    """A gymnasium vector env (same-step autoreset) as a TorchRL env, with a tensor step for fast collection.

    TorchRL returns it inside a ``TransformedEnv`` (a transform that swaps in the final observations of
    ended episodes), which forwards every method below to it.

    - :meth:`reset_arrays` / :meth:`step_arrays` (numpy) and :meth:`reset_tensors` / :meth:`step_tensors`: the
      array road of :mod:`rlplug.core.collect` (``supports_tensor_steps`` says whether
      it is open: Discrete or Box actions and one Box observation). Discrete actions are indices from 0
      there, as in TorchRL's spec; a space's ``start`` is added on the way to gymnasium, on both roads
      (:meth:`read_action`).
    - :meth:`statistics` -> dict of tensors and floats (``torch.load(weights_only=True)`` reads it back):
      the observation and return statistics of :class:`VectorStage`; ``{}`` when nothing is normalised by
      running statistics. :meth:`load_statistics` puts them back, e.g. the training env's into the
      evaluation env. (Not ``state_dict``: the env is an ``nn.Module``, whose ``state_dict`` keeps its meaning.)
    - :meth:`set_training`: ``set_training(False)`` freezes the statistics (and returns rewards unscaled),
      for evaluation; ``set_training(True)`` (the default) updates them again. :attr:`updates_statistics`
      says which.

    A reset of every env right after a step in which every env ended (TorchRL's ``step_and_maybe_reset``
    asks for one) continues from the autoreset observations, as the tensor road does, rather than resetting
    the envs a second time: both roads see the same episodes.
    """

    def __init__(self, vector_env: gym.vector.VectorEnv, array_maker: workers.CopyMaker | None = None, **kwargs: Any):
        if not isinstance(vector_env, VectorStage):
            vector_env = VectorStage(vector_env)
        self.stage = vector_env
        super().__init__(vector_env, **kwargs)
        space = vector_env.single_action_space
        discrete = space if isinstance(space, gym.spaces.Discrete) else None
        self._discrete = discrete is not None
        self._one_hot = discrete is not None and self.action_spec.shape[-1:] == (discrete.n,) and discrete.n > 1 \
            and type(self.action_spec).__name__ == "OneHot"
        #: what gymnasium's Discrete space adds to an index (TorchRL's spec counts from 0)
        self.action_start = int(discrete.start) if discrete is not None else 0
        obs_key = "observation" if "observation" in self.observation_spec.keys() else None
        self.supports_tensor_steps = obs_key is not None and (self._discrete or isinstance(space, gym.spaces.Box))
        obs_dtype = self.observation_spec[obs_key].dtype if obs_key else torch.float32
        self._obs_dtype = torch.empty((), dtype=obs_dtype).numpy().dtype  # conversions happen in numpy: cheaper
        self._on_cpu = self.device is None or torch.device(self.device).type == "cpu"
        #: how each copy is made, where the copies may be stepped as one array (:meth:`steps_together`)
        self.array_maker = array_maker

    # -- statistics ---------------------------------------------------------------------------------------

    def statistics(self) -> dict[str, Any]:
        """The normalisation statistics: plain tensors and floats, ``{}`` when there are none."""
        return self.stage.state_dict()

    def load_statistics(self, state: Mapping[str, Any]) -> None:
        """Statistics from :meth:`statistics` of an env built with the same options (any ``num_envs``)."""
        self.stage.load_state_dict(state)

    def normalize_observation(self, observation: np.ndarray) -> np.ndarray:
        """One observation batch as the policy sees it: normalised and clipped as the env's own, statistics
        untouched (for acting on observations from elsewhere: ``Agent.select_action``)."""
        if not self.stage.transforms_observations:
            return observation
        return self.stage._transform(np.asarray(observation, dtype=np.float64))

    def observation_normalizer(self) -> torch.nn.Module | None:
        """:meth:`normalize_observation` as a torch module with the statistics as they are now, frozen (for
        ``rlplug export``); None when observations pass unchanged."""
        return self.stage.frozen_transform()

    def set_training(self, training: bool = True) -> None:
        """``False``: statistics frozen and rewards unscaled (evaluation); ``True``: statistics updated."""
        self.stage.training = bool(training)

    @property
    def updates_statistics(self) -> bool:
        return self.stage.training

    # -- stepping -----------------------------------------------------------------------------------------

    def _reset(self, tensordict=None, **kwargs):
        if not kwargs and tensordict is not None and self.stage.can_continue:
            reset = tensordict.get("_reset", None)
            if reset is not None and bool(reset.all()):
                kwargs = {"options": {CONTINUE: True}}
        return super()._reset(tensordict, **kwargs)

    def read_action(self, action):
        """TorchRL's action as gymnasium takes it (TorchRL's conversion, then a Discrete space's start)."""
        action = super().read_action(action)
        return action + self.action_start if self.action_start else action

    def reset_arrays(self, seed: int | None = None) -> np.ndarray:
        observation, _ = self._env.reset(seed=seed)
        return observation.astype(self._obs_dtype, copy=False)

    def step_arrays(self, action: np.ndarray) -> Transition:
        """One step with ``action`` in gymnasium's format (an index from 0 for discrete actions); numpy arrays
        back."""
        if self.action_start:
            action = action + self.action_start
        observation, reward, terminated, truncated, info = self._env.step(action)
        observation = observation.astype(self._obs_dtype, copy=False)
        next_observation = observation
        ended = terminated | truncated
        if ended.any():
            next_observation = observation.copy()
            for index in np.flatnonzero(ended):
                next_observation[index] = info["final_obs"][index]
        return Transition(next_observation, reward.astype(np.float32, copy=False), terminated, truncated, observation)

    def steps_together(self, envs: Sequence[EnvBase]) -> workers.ArraysTogether | None:
        """One array step for ``envs`` (this env among them, all built from one recipe: seeds trained together),
        every copy of them stepped as one array, each env's episodes still its own; None where they cannot be:
        an id without such an array env, copies wrapped or in worker processes, a stage that changes what the
        envs give (normalisation, reward scaling or clipping, episodic life: each env's own statistics), or an
        env whose array step is not this class's own (a plugin that wraps it: its step must be taken)."""
        own = (VectorGymEnv.reset_arrays, VectorGymEnv.step_arrays)
        if any(getattr(env_member(env, method.__name__), "__func__", None) is not method
               for env in envs for method in own):
            return None
        stages = [env_member(env, "stage") for env in envs]
        makers = [env_member(env, "array_maker") for env in envs]
        first = makers[0]
        if first is None or any(maker is None or (maker.env_id, maker.kwargs) != (first.env_id, first.kwargs)
                                for maker in makers):
            return None
        if any(not isinstance(stage, VectorStage) or stage.transforms_observations or stage.return_rms is not None
               or stage.clip_rewards is not None or stage.episodic_life for stage in stages):
            return None
        if len({stage.num_envs for stage in stages}) > 1:
            return None
        return workers.ArraysTogether([stage.env for stage in stages], first)

    def reset_tensors(self, seed: int | None = None) -> torch.Tensor:
        return self._tensor(self.reset_arrays(seed))

    def step_tensors(self, action: torch.Tensor) -> Transition:
        """:meth:`step_arrays` with tensors in (the actor's layout: one-hot for discrete actions) and out."""
        if self._one_hot:
            action = action.argmax(-1)
        return Transition(*(self._tensor(array) for array in self.step_arrays(action.cpu().numpy())))

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        return tensor if self._on_cpu else tensor.to(self.device)


# -- construction -------------------------------------------------------------------------------------------


def one_line(error: BaseException) -> str:
    return re.sub(r"\s+", " ", str(error)).strip() or type(error).__name__


def space_name(space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Dict):
        return f"Dict (keys {', '.join(map(str, space.spaces))})"
    if isinstance(space, gym.spaces.Tuple):
        return f"Tuple ({', '.join(map(str, space.spaces))})"
    if isinstance(space, gym.spaces.Box):
        return f"Box of shape {list(space.shape)}"
    return type(space).__name__


def wrapped(env: gym.Env, cls: type[gym.Wrapper], kwargs: Mapping[str, Any]) -> gym.Env:
    """``env`` in a recipe's wrapper or rlplug's own; gymnasium's warning that a bound lost precision is not
    shown: a recipe's numbers are TOML floats (float64), MuJoCo's observations float64 made float32 for the
    networks, neither the user's fault."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
        return cls(env, **kwargs)


def _wrap_with(index: int, cls: type[gym.Wrapper], kwargs: Mapping[str, Any]) -> Callable[[gym.Env], gym.Env]:
    name = cls.__name__

    def wrap(env: gym.Env) -> gym.Env:
        try:
            return wrapped(env, cls, kwargs)
        except UserError:
            raise
        except Exception as error:  # the wrapper's own check of its arguments or of the env
            raise UserError(f"gymnasium wrapper {name} failed on this env: {one_line(error)}",
                            path=f"env.wrappers[{index}]") from None

    return wrap


class SelectObservation(gym.ObservationWrapper):
    """Only the entries ``indices`` of a one-dimensional Box observation, in that order: a partially observed
    env from a recipe (Pendulum-v1 without its angular velocity: ``[0, 1]``)."""

    def __init__(self, env: gym.Env, indices: Sequence[int]):
        super().__init__(env)
        self.indices = np.asarray(indices, dtype=np.int64)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"selects entries of a Box observation, got {space}")
        self.observation_space = gym.spaces.Box(space.low[self.indices], space.high[self.indices],
                                                dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.indices]


class ChannelsFirst(gym.ObservationWrapper):
    """An image observation ``[H, W, C]`` as ``[C, H, W]``, the layout convolutions read (MinAtar gives the
    former)."""

    def __init__(self, env: gym.Env, env_id: str):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
            raise UserError(f"moves the channels of an [H, W, C] image first, and {env_id}'s observation is a "
                            f"{space_name(space)}", path="env.channels_first")
        self.observation_space = gym.spaces.Box(np.moveaxis(np.broadcast_to(space.low, space.shape), -1, 0),
                                                np.moveaxis(np.broadcast_to(space.high, space.shape), -1, 0),
                                                dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0))


def _select(env: gym.Env, env_id: str, indices: Sequence[int]) -> gym.Env:
    """:class:`SelectObservation`, or ``UserError`` naming ``env.observation_indices``."""
    space = env.observation_space
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise UserError(f"selects entries of a one-dimensional observation, and {env_id}'s is a "
                        f"{space_name(space)}; set flatten_observations = true", path="env.observation_indices")
    size = space.shape[0]
    outside = [i for i in indices if not 0 <= i < size]
    if outside:
        raise UserError(f"{env_id}'s observation has {size} entries (indices 0 to {size - 1}), got {outside[0]}",
                        path="env.observation_indices")
    return SelectObservation(env, indices)


def _shape_observations(env_id: str, flatten: bool, frame_stack: int,
                        indices: Sequence[int] | None = None) -> Callable[[gym.Env], gym.Env]:
    """One Box observation per sub-env: non-Box spaces one-hot encoded or flattened, the entries ``indices``
    kept, then frames stacked; or a Dict's entries packed (:mod:`rlplug.plugins.envs.entries`)."""
    spaces = gym.spaces

    def shape(env: gym.Env) -> gym.Env:
        space = env.observation_space
        if flatten and isinstance(space, spaces.Dict) and "action_mask" in space.spaces:
            raise UserError(f"{env_id}'s observation holds an action_mask, which flattening would turn into features "
                            f"and never apply to the actions; unset flatten_observations (the mask is applied, the "
                            f"other entries read)", path="env.flatten_observations")
        if isinstance(space, spaces.Dict) and not flatten:
            return pack_entries(env, env_id, frame_stack, indices)
        if isinstance(space, spaces.Tuple) and not flatten:
            raise UserError(f"{env_id} has a {space_name(space)} observation space; set flatten_observations = "
                            f"true to concatenate its entries (supported: {SUPPORTED_OBSERVATIONS})", path="env")
        if not isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary,
                                  spaces.Dict, spaces.Tuple)):
            raise UserError(f"{env_id} has a {space_name(space)} observation space, which rlplug does not "
                            f"support (supported: {SUPPORTED_OBSERVATIONS})", path="env")
        if flatten or not isinstance(space, spaces.Box):
            try:
                env = gym.wrappers.FlattenObservation(env)
            except Exception as error:
                raise UserError(f"{env_id}'s {space_name(space)} observation space cannot be flattened: "
                                f"{one_line(error)}", path="env") from None
            if not np.issubdtype(env.observation_space.dtype, np.floating):
                env = wrapped(env, gym.wrappers.DtypeObservation, {"dtype": np.float32})
        dtype = env.observation_space.dtype
        if np.issubdtype(dtype, np.floating) and dtype != np.float32:  # MuJoCo's float64: networks are float32
            env = wrapped(env, gym.wrappers.DtypeObservation, {"dtype": np.float32})
        if indices is not None:
            env = _select(env, env_id, indices)
        if frame_stack > 1:
            flat = len(env.observation_space.shape or ()) == 1
            env = gym.wrappers.FrameStackObservation(env, frame_stack)
            if flat:  # k vectors of n become one vector of k * n, oldest first: what an MLP reads
                env = gym.wrappers.FlattenObservation(env)
        return env

    return shape


def check_action_space(space: gym.Space, env_id: str) -> None:
    """``UserError`` unless rlplug's policies can act in ``space``."""
    spaces = gym.spaces
    problem = None
    if isinstance(space, spaces.Box):
        if not np.issubdtype(space.dtype, np.floating):
            problem = f"a {space_name(space)} action space of {space.dtype} values"
    elif isinstance(space, spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            problem = f"a MultiDiscrete action space of shape {list(space.nvec.shape)}"
    elif isinstance(space, spaces.MultiBinary):
        if np.ndim(space.n) > 0 and len(space.shape) != 1:
            problem = f"a MultiBinary action space of shape {list(space.shape)}"
    elif not isinstance(space, spaces.Discrete):
        problem = f"a {space_name(space)} action space"
    if problem:
        raise UserError(f"{env_id} has {problem}, which rlplug's policies cannot act in (supported: "
                        f"{SUPPORTED_ACTIONS})", path="env")


def make_gym_vector_env(env_id: str, *, num_envs: int, max_episode_steps: int | None,
                        make_kwargs: dict[str, Any], device: str = "cpu",
                        wrappers: Sequence[tuple[type[gym.Wrapper], Mapping[str, Any]]] = (),
                        flatten_observations: bool = False, frame_stack: int = 1,
                        observation_indices: Sequence[int] | None = None, normalize_observations: str = "none",
                        clip_observations: float | None = None,
                        normalize_rewards: bool = False, reward_gamma: float = 0.99,
                        vectorization: str = "sync", clip_rewards: float | None = None,
                        episodic_life: bool = False, channels_first: bool = False) -> EnvBase:
    """A TorchRL env over gymnasium's synchronous (``vectorization = "sync"``) or asynchronous (``"async"``:
    one worker process per copy, :mod:`rlplug.plugins.envs.workers`) vector env.

    TorchRL's wrapper needs the same-step autoreset (the final observation of an episode and the first of
    the next arrive in one step); gymnasium's native vector envs (CartPole's) only do next-step autoreset,
    so they are not used.

    Each sub-env is ``gym.make(env_id, max_episode_steps=..., **make_kwargs)``, then ``wrappers`` (gymnasium
    wrapper classes with their arguments, all but the env) in order, ``channels_first``, then the observation shaping of
    :func:`_shape_observations` (``flatten_observations``, ``observation_indices``, ``frame_stack``). The vector env
    then gets a :class:`VectorStage` (``normalize_observations``, ``clip_observations``, ``normalize_rewards``,
    ``reward_gamma``, ``clip_rewards``, ``episodic_life``). Problems with the id, the spaces or the options are
    ``UserError``.
    """
    wrapped = [key for key, given in (("wrappers", bool(wrappers)), ("flatten_observations", flatten_observations),
                                      ("frame_stack", frame_stack > 1), ("channels_first", channels_first),
                                      ("observation_indices", observation_indices is not None)) if given]
    if vectorization == "vector" and wrapped:
        raise UserError(f"'vector' steps the copies as {env_id}'s own array env, which takes no per-copy option; "
                        f"unset env.{wrapped[0]}, or use vectorization = 'sync'", path="env.vectorization")
    per_env = [_wrap_with(i, cls, kwargs) for i, (cls, kwargs) in enumerate(wrappers)]
    if channels_first:
        per_env.append(lambda env: ChannelsFirst(env, env_id))
    per_env.append(_shape_observations(env_id, flatten_observations, frame_stack, observation_indices))
    kwargs = {**({"max_episode_steps": max_episode_steps} if max_episode_steps else {}), **make_kwargs}
    make_copy = workers.CopyMaker(env_id, kwargs, per_env)
    try:
        vector_env = workers.vector_env(make_copy, num_envs, vectorization,
                                        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            raise
        raise UserError(f"{env_id} does not take that argument: {one_line(error)}", path="env.kwargs") from None
    except gym.error.DependencyNotInstalled as error:  # MuJoCo, Box2D...: say what to install, before training
        raise UserError(f"{env_id} needs a package that is not installed: {one_line(error)}", path="env.id") from None
    try:
        check_action_space(vector_env.single_action_space, env_id)
        entries = packed_entries(vector_env)
        if entries and (normalize_observations != "none" or clip_observations is not None):
            key = "normalize_observations" if normalize_observations != "none" else "clip_observations"
            raise UserError(f"rescales one Box observation, and {env_id}'s is a Dict (keys "
                            f"{', '.join(entry.name for entry in entries)}); leave it unset, or set "
                            f"flatten_observations = true", path=f"env.{key}")
        space = vector_env.single_observation_space
        if normalize_observations == "fixed":
            if not isinstance(space, gym.spaces.Box):  # every copy's observation is one Box after shaping
                raise TypeError(f"'fixed' rescales a Box observation, got {space}")
            infinite = np.flatnonzero(~(np.isfinite(space.low) & np.isfinite(space.high)).reshape(-1))
            if infinite.size:
                shown = ", ".join(map(str, infinite[:8])) + (", ..." if infinite.size > 8 else "")
                raise UserError(f"'fixed' rescales from the observation bounds, but {env_id}'s are infinite in "
                                f"dimensions {shown}; use 'running'", path="env.normalize_observations")
        stage = VectorStage(vector_env, observations=normalize_observations, clip=clip_observations,
                            rewards=normalize_rewards, gamma=reward_gamma, clip_rewards=clip_rewards,
                            episodic_life=episodic_life)
        arrays = vectorization != "async" and not wrapped and env_id in workers.array_ids()
        env = VectorGymEnv(stage, array_maker=make_copy if arrays else None, device=device)
    except BaseException:
        vector_env.close()
        raise
    # TorchRL stepped the env while inferring its specs: those steps are not experience.
    stage.reset_statistics()
    stage._continuable = False
    return with_entries(env, entries) if entries else env
