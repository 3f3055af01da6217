"""A recipe's ``[[env.transforms]]`` around its env: TorchRL's ``TransformedEnv``, with the env's own reward
kept and the transforms' running statistics treated as the env's.

Reward transforms (``RewardScaling``, ``VecNorm`` on the reward...) shape what the algorithm learns from, not
what the run reports: before the first transform that reads a reward, :class:`KeepEnvReward` copies the
reward to ``env_reward`` (:data:`ENV_REWARD`), where episode returns are counted (:func:`env_rewards`). The key
is declared as an observation entry, as TorchRL's ``RewardSum`` declares its episode reward (zero at a reset),
so that TorchRL's ``check_env_specs`` holds and batched envs (``SerialEnv``, ``ParallelEnv``) pass it on; not as
a reward, so no transform that defaults to the reward keys touches it and no loss reads it; and networks do
not read it (:func:`rlplug.core.observations.one_observation` leaves it out).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import unravel_key
from torchrl.data import Composite, Unbounded
from torchrl.envs import EnvBase, FrameSkipTransform, GymWrapper, StepCounter, Transform, TransformedEnv

from rlplug.core.env_members import env_capability
from rlplug.errors import UserError
from rlplug.registry import protocols

#: where a transformed env's steps keep the env's own reward, beside the (maybe reshaped) ``reward``
ENV_REWARD = "env_reward"


def env_rewards(batch: TensorDictBase) -> torch.Tensor:
    """The env's own rewards of a batch of steps: ``("next", "env_reward")`` where reward transforms changed
    ``("next", "reward")``, else the reward itself."""
    kept = batch.get(("next", ENV_REWARD), None)
    return batch.get(("next", "reward")) if kept is None else kept


class KeepEnvReward(Transform):
    """Copies the reward, as the env gave it, to ``env_reward`` before any transform reshapes it, and declares
    the copy: an observation entry of the reward's spec, zero at a reset. It names no in or out keys, so that
    transforms and TorchRL's key bookkeeping take it for no reward."""

    def __init__(self, reward_key: Any = "reward"):
        super().__init__()
        self.reward_key = reward_key

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        reward = next_tensordict.get(self.reward_key, None)
        if reward is not None:  # cloned: a later transform may change the reward in place
            next_tensordict.set(ENV_REWARD, reward.clone())
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        # no step led here: a zero reward, as RewardSum starts its sum (a partial reset keeps the other copies')
        return tensordict_reset.set(ENV_REWARD, self.parent.full_reward_spec[self.reward_key].zero())

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = super().transform_output_spec(output_spec)
        reward = output_spec["full_reward_spec"][self.reward_key]
        output_spec["full_observation_spec"][ENV_REWARD] = Unbounded(shape=reward.shape, dtype=reward.dtype,
                                                                     device=reward.device)
        return output_spec


class TransformedRecipeEnv(TransformedEnv):
    """The env inside the recipe's transforms. Collected through TensorDicts (the array road would pass the
    transforms by); statistics are the env's and those of the transforms that learn them (``VecNorm``:
    any transform with ``freeze``/``unfreeze``), frozen with ``set_training(False)`` for evaluation."""

    supports_tensor_steps = False
    #: the recipe's ``env.transforms`` as built, in order (set by :func:`build_transformed`)
    recipe_transforms: Sequence[Transform] = ()

    def normalize_observation(self, observation: Any) -> Any:
        """The env's own normalisation where the transforms read nothing but rewards; otherwise what the policy
        sees is a TensorDict the transforms make (``Agent.act`` takes those)."""
        rewards = {unravel_key(key) for key in self.base_env.reward_keys}
        read = {unravel_key(key) for t in self.recipe_transforms for key in t.in_keys or ()}
        if read - rewards - {unravel_key(("next", key)) for key in rewards}:
            raise UserError("select_action takes observations as gymnasium gives them, and this recipe's "
                            "env.transforms change them; use Agent.act on the transformed env's TensorDicts")
        inner = env_capability(self.base_env, protocols.Env.normalize_observation)
        return inner(observation) if inner else observation

    def learning_transforms(self) -> list[tuple[int, Transform]]:
        """``(index in env.transforms, transform)`` for the transforms that keep running statistics."""
        return [(i, t) for i, t in enumerate(self.recipe_transforms) if hasattr(t, "freeze") and hasattr(t, "unfreeze")]

    def statistics(self) -> dict[str, Any]:
        inner = env_capability(self.base_env, protocols.Env.statistics)
        state = dict(inner()) if inner else {}
        for index, transform in self.learning_transforms():
            state[f"transforms[{index}]"] = dict(transform.state_dict())
        return state

    def load_statistics(self, state: dict[str, Any]) -> None:
        own = {key: value for key, value in state.items() if not key.startswith("transforms[")}
        inner = env_capability(self.base_env, protocols.Env.load_statistics)
        if own and inner:
            inner(own)
        for index, transform in self.learning_transforms():
            saved = state.get(f"transforms[{index}]")
            if saved is None:
                raise UserError(f"the env statistics hold none for env.transforms[{index}]; were they saved with "
                                "the same transforms?")
            try:
                transform.load_state_dict(saved)
            except (RuntimeError, KeyError, ValueError) as error:
                raise UserError(f"the env statistics do not fit env.transforms[{index}]: {flat(error)}") \
                    from None

    def set_training(self, training: bool = True) -> None:
        inner = env_capability(self.base_env, protocols.Env.set_training)
        if inner:
            inner(training)
        for _, transform in self.learning_transforms():
            transform.unfreeze() if training else transform.freeze()


def flat(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def entries(env: EnvBase) -> set[Any]:
    """Every key a transform may read in ``env``'s steps: observations, rewards, dones, states and actions."""
    keys: set[Any] = set()
    for spec in (env.full_observation_spec, env.full_reward_spec, env.full_done_spec, env.full_state_spec,
                 env.full_action_spec):
        keys.update(unravel_key(key) for key in spec.keys(True, True))
    return keys | {unravel_key(("next", key)) for key in keys}


def shown(key: Any) -> str:
    return repr(key) if isinstance(key, str) else repr(list(key))


def reads_reward(transform: Transform, reward_keys: Sequence[Any]) -> bool:
    """Whether ``transform`` reads (and so may reshape) a reward, by the keys it says it reads."""
    keys = {unravel_key(key) for key in reward_keys} | {unravel_key(("next", key)) for key in reward_keys}
    return any(unravel_key(key) in keys for key in transform.in_keys or ())


def build_transformed(component: Any, **context: Any) -> EnvBase:
    """A recipe's env component built, inside its ``[[env.transforms]]`` when it names any."""
    env = component.build(**context)
    return with_transforms(env, component.transforms, context) if component.transforms else env


def ends_episodes(transform: Transform) -> bool:
    """Whether ``transform`` ends episodes itself (a ``StepCounter`` with ``max_steps``) rather than only
    reading where the env ends them."""
    return isinstance(transform, StepCounter) and transform.max_steps is not None


def gymnasium_copies(env: EnvBase) -> int | None:
    """How many copies ``env`` steps where it is TorchRL's wrapper of a gymnasium vector env, else None. TorchRL
    resets such copies only where gymnasium ended them (or all at once), never one alone."""
    while isinstance(env, TransformedEnv):
        env = env.base_env
    return env.batch_size.numel() if isinstance(env, GymWrapper) and env.batch_size else None


def with_transforms(env: EnvBase, components: Sequence[Any], context: dict[str, Any]) -> TransformedRecipeEnv:
    """``env`` inside the built ``components`` (``[[env.transforms]]``), in order. A transform that cannot be
    built or does not fit this env's specs is a ``UserError`` naming ``env.transforms[i]``."""
    built = []
    for index, component in enumerate(components):
        try:
            built.append(component.build(**context))
        except UserError as error:
            raise error.located(prefix=f"env.transforms[{index}]") from None
    reward_keys = list(env.reward_keys)
    first_reward = next((i for i, t in enumerate(built) if reads_reward(t, reward_keys)), len(built))
    skip = next((i for i, t in enumerate(built) if isinstance(t, FrameSkipTransform) and i > first_reward), None)
    if skip is not None:
        raise UserError(f"FrameSkipTransform sums the rewards of the steps it repeats as the transforms before it "
                        f"leave them: put it before env.transforms[{first_reward}] "
                        f"({components[first_reward].spec.name}), the first that reads the reward",
                        path=f"env.transforms[{skip}]")
    copies = gymnasium_copies(env)
    ending = next((i for i, t in enumerate(built) if ends_episodes(t)), None)
    if ending is not None and copies is not None:
        steps = built[ending].max_steps
        raise UserError(f"{components[ending].spec.name} ends episodes at max_steps = {steps} on its own, and the "
                        f"copies of this gymnasium vector env ({copies} here) are reset only where gymnasium ends "
                        f"their episodes; set env.max_episode_steps = {steps} instead (gymnasium's time limit) and "
                        f"leave max_steps unset to count steps only", path=f"env.transforms[{ending}].max_steps")
    transformed = TransformedRecipeEnv(env, auto_unwrap=False)  # the env's own transforms stay its own
    transformed.recipe_transforms = built
    for index, transform in enumerate(built):
        if index == first_reward:
            transformed.append_transform(KeepEnvReward(reward_keys[0]))
        present = entries(transformed)
        missing = [key for key in transform.in_keys or () if unravel_key(key) not in present]
        if missing:
            raise UserError(f"{components[index].spec.name} reads {shown(missing[0])}, which this env does not have "
                            f"here; its entries: {', '.join(sorted(shown(k) for k in present if k[0] != 'next'))}",
                            path=f"env.transforms[{index}]")
        try:
            with warnings.catch_warnings():  # VecNorm over batched envs "is experimental": the batch is reduced
                warnings.filterwarnings("ignore", message=".*non-empty batch-size is experimental")
                transformed.append_transform(transform)
                transformed.output_spec  # noqa: B018 (computed now: a transform that does not fit fails here)
        except Exception as error:  # TorchRL's own message says what does not fit
            name = components[index].spec.name
            raise UserError(f"{name} does not apply to this env: {type(error).__name__}: {flat(error)}",
                            path=f"env.transforms[{index}]") from None
    if first_reward == len(built):
        transformed.append_transform(KeepEnvReward(reward_keys[0]))
    first_reset(transformed, [component.spec.name for component in components])
    return transformed


def first_reset(env: TransformedRecipeEnv, names: list[str]) -> None:
    """One reset, statistics frozen: what fails only on data (a transform made for one env on a batch of them,
    one that reads what a later one renamed) fails here, before training, in one line."""
    env.set_training(False)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*non-empty batch-size is experimental")
            env.reset()
    except Exception as error:  # TorchRL's message names what failed; the transform is one of these
        raise UserError(f"the transforms ({', '.join(names)}) fail on this env's first reset: "
                        f"{type(error).__name__}: {flat(error)}", path="env.transforms") from None
    finally:
        env.set_training(True)
