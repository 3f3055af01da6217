"""``rlplug record``: a run's policy acting on its env, kept as a Minari dataset for offline learning.

The run is rebuilt from its checkpoint as ``rlplug eval`` rebuilds it (:meth:`Run.from_checkpoint` into a scratch
directory, its env's statistics frozen in an evaluation env), then plays whole episodes on one copy of the env.
The episodes are written into a hidden folder beside ``--out`` and renamed to it at the end, so that a record that
is killed leaves no directory minari would take for a whole dataset.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w
import torch
from tensordict import TensorDictBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.core.env_members import as_evaluation_env, env_statistics
from rlplug.core.transformed import env_rewards
from rlplug.errors import UserError
from rlplug.plugins.datasets.minari_format import new_dataset_id, write_dataset
from rlplug.run.trainer import Run


@dataclass(frozen=True)
class Behaviour:
    """How the recorded actions are chosen from the run's policy."""

    #: sample the policy (and its exploration noise) instead of taking its mode
    stochastic: bool = False
    #: the probability of a uniformly random action instead of the policy's
    epsilon: float = 0.0
    #: Gaussian noise added to continuous actions, as a fraction of the action half-range, then clipped
    noise: float = 0.0


def behaviour_policy(policy: Callable, action_spec, behaviour: Behaviour,
                     generator: torch.Generator) -> Callable[[TensorDictBase], TensorDictBase]:
    """``policy`` with the noise and random actions ``behaviour`` asks for, drawn from ``generator``."""
    continuous = action_spec.domain == "continuous"

    def act(tensordict: TensorDictBase) -> TensorDictBase:
        tensordict = policy(tensordict)
        action = tensordict.get("action")
        if behaviour.noise and continuous:
            low, high = action_spec.space.low, action_spec.space.high
            noise = torch.randn(action.shape, generator=generator) * behaviour.noise * (high - low) / 2
            action = (action + noise).clamp(low, high)
        if behaviour.epsilon:
            chosen = torch.rand(action.shape[:-1] + (1,), generator=generator) < behaviour.epsilon
            action = torch.where(chosen, action_spec.rand().to(action.dtype), action)
        tensordict.set("action", action)
        return tensordict

    return act


def gymnasium_spaces(run: Run, observation_shape: tuple[int, ...], discrete_actions: int | None):
    """The dataset's spaces and gymnasium spec: the gymnasium env's own, inside the recipe's ``wrappers`` (whose
    spaces the policy acted in: ``RescaleAction``'s actions), where the recipe's env is a ``gym`` id whose
    observations the run reads unchanged, else boxes of what the run's env gives."""
    import gymnasium as gym

    from rlplug.plugins.envs import gym_wrapper_class
    from rlplug.plugins.envs.gym import wrapped

    params, env_spec = run.recipe.env.params, None
    observation_space = action_space = None
    if run.recipe.env.spec.name == "gym" and params.get("id"):
        made = gym.make(params["id"], max_episode_steps=params.get("max_episode_steps"), **(params.get("kwargs") or {}))
        try:
            for wrapper in params.get("wrappers") or ():  # the run built its env with them: they wrap this one too
                made = wrapped(made, gym_wrapper_class(wrapper.name), wrapper.kwargs)
            env_spec = made.spec
            if made.observation_space.shape == observation_shape:
                observation_space = made.observation_space
            action_space = made.action_space
        finally:
            made.close()
    if observation_space is None:
        observation_space = gym.spaces.Box(-np.inf, np.inf, observation_shape, np.float32)
    if action_space is None:
        spec = run.env.action_spec
        if discrete_actions is not None:
            action_space = gym.spaces.Discrete(discrete_actions)
        else:
            low = spec.space.low.reshape(spec.shape)[0].cpu().numpy()
            high = spec.space.high.reshape(spec.shape)[0].cpu().numpy()
            action_space = gym.spaces.Box(low, high, dtype=np.float32)
    return observation_space, action_space, env_spec


def episodes_of(run: Run, env, policy: Callable, *, episodes: int | None, frames: int | None,
                seed: int) -> Iterator[dict[str, Any]]:
    """Whole episodes of ``policy`` on ``env`` (one copy) until ``episodes`` or ``frames`` are reached, as
    numpy arrays: observations (one more than actions: the last ``next`` observation), actions (class indices for
    discrete actions), rewards in the env's own units, terminations, truncations."""
    one_hot = "OneHot" in type(env.action_spec).__name__
    done_episodes = done_frames = 0
    env.set_seed(seed)
    while (episodes is None or done_episodes < episodes) and (frames is None or done_frames < frames):
        trajectory = env.rollout(1_000_000, policy, break_when_any_done=True, auto_reset=True)[0]
        key = "observation"
        observations = torch.cat([trajectory.get(key), trajectory.get(("next", key))[-1:]])
        actions = trajectory.get("action")
        actions = actions.argmax(-1) if one_hot else actions
        if actions.ndim > 1 and not actions.is_floating_point() and actions.shape[-1] == 1:
            actions = actions.squeeze(-1)
        yield {"observations": observations.cpu().numpy(), "actions": actions.cpu().numpy(),
               "rewards": env_rewards(trajectory).reshape(-1).cpu().numpy().astype(np.float64),
               "terminations": trajectory.get(("next", "terminated")).reshape(-1).cpu().numpy(),
               "truncations": trajectory.get(("next", "truncated")).reshape(-1).cpu().numpy()}
        done_episodes += 1
        done_frames += len(actions)


def record(checkpoint: Path, out: Path, *, episodes: int | None, frames: int | None, behaviour: Behaviour,
           seed: int | None, progress: Callable[[int, int], None] | None = None,
           allow_unverified: bool = False) -> dict[str, Any]:
    """Record the checkpoint's policy into a new Minari dataset at ``out``; what was written (``episodes``,
    ``steps``, ``returns``, ``dataset_id``). ``progress(episodes, steps)`` is told after each episode."""
    if out.exists():
        raise UserError(f"--out {out}: already exists; record writes a new dataset (remove it or choose another "
                        f"directory)")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: cannot create it in {parent} (no such directory, or not writable)")
    with tempfile.TemporaryDirectory(prefix="rlplug-record-") as scratch:
        changes: dict = {"runner": {"use": "rlplug:local"}, "eval": {"episodes": 1}}
        run, state = Run.from_checkpoint(checkpoint, Path(scratch) / "run", changes=changes,
                                         allow_unverified=allow_unverified)
        try:
            return write_recording(run, state, checkpoint, out, parent, episodes=episodes, frames=frames,
                                   behaviour=behaviour, seed=seed, progress=progress)
        finally:
            run.close()


def write_recording(run: Run, state: dict, checkpoint: Path, out: Path, parent: Path, *, episodes: int | None,
                    frames: int | None, behaviour: Behaviour, seed: int | None,
                    progress: Callable[[int, int], None] | None) -> dict[str, Any]:
    env = run.eval_env
    as_evaluation_env(env, env_statistics(run.env))
    action_spec = env.action_spec
    if behaviour.noise and action_spec.domain != "continuous":
        raise UserError("--noise adds Gaussian noise to continuous actions, and this run's are discrete; use "
                        "--epsilon for random actions")
    seed = run.recipe.run.seed if seed is None else seed
    generator = torch.Generator().manual_seed(seed)
    policy = behaviour_policy(run.algorithm.policy, action_spec, behaviour, generator)
    kind = ExplorationType.RANDOM if behaviour.stochastic else ExplorationType.DETERMINISTIC
    recorded: list[dict[str, Any]] = []
    steps = 0
    with set_exploration_type(kind), torch.no_grad():
        for episode in episodes_of(run, env, policy, episodes=episodes, frames=frames, seed=seed):
            recorded.append(episode)
            steps += len(episode["actions"])
            if progress is not None:
                progress(len(recorded), steps)
    discrete = int(action_spec.space.n) if action_spec.domain == "discrete" else None
    observation_space, action_space, env_spec = gymnasium_spaces(run, recorded[0]["observations"].shape[1:],
                                                                 discrete)
    for episode in recorded:
        episode["observations"] = episode["observations"].astype(observation_space.dtype, copy=False)
        episode["actions"] = episode["actions"].astype(action_space.dtype, copy=False)
    dataset_id = new_dataset_id(out)
    returns = [float(episode["rewards"].sum()) for episode in recorded]
    metadata = {
        "dataset_id": dataset_id, "algorithm_name": run.recipe.algorithm.spec.qualified_name,
        "description": f"{len(recorded)} episodes of the policy of the rlplug run checkpoint {checkpoint} "
                       f"(frame {state.get('frames')}), recorded with rlplug record",
        "rlplug_env": json.dumps(run.recipe.env.resolved()),
        "rlplug_recipe": tomli_w.dumps(run.recipe.resolved()),
        "rlplug_behaviour": json.dumps({"stochastic": behaviour.stochastic, "epsilon": behaviour.epsilon,
                                        "noise": behaviour.noise, "seed": seed}),
    }
    # absolute: minari joins a relative data path onto itself
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=parent)).resolve()
    umask = os.umask(0)
    os.umask(umask)
    partial.chmod(0o777 & ~umask)  # a folder as any other the user makes (mkdtemp's is private)
    try:
        write_dataset(partial, recorded, observation_space=observation_space, action_space=action_space,
                      env_spec=env_spec, metadata=metadata)
        os.rename(partial, out)  # the whole dataset appears at once, or none of it
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return {"episodes": len(recorded), "steps": steps, "returns": returns, "dataset_id": dataset_id,
            "frame": state.get("frames")}
