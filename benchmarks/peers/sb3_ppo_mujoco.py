"""Stable-Baselines3 PPO on a MuJoCo env with rl-baselines3-zoo's MuJoCo defaults: the peer of ant-ppo's reference.

``benchmarks/suites/mujoco.toml``'s ant-ppo compares with the zoo's one Ant-v3 PPO agent, trained with the zoo's
``Ant-v3`` entry in ``hyperparams/ppo.yml``: ``normalize: true`` and SB3's PPO defaults (one env, 2048-step
rollouts, 10 epochs of minibatches of 64, lr 3e-4 constant, gamma 0.99, GAE lambda 0.95, clip 0.2, no value
clipping, no entropy bonus, value coefficient 0.5, gradient norm 0.5, 64-64 tanh networks, observations and rewards
normalised, clipped to 10). This trains exactly that on whichever ``--env-id`` names (the suite's are v5) and
evaluates it with the training's observation statistics frozen, as rlplug evaluates, so that both libraries meet
at the same env version and frames. rlplug's bench recipe differs from it in two of CleanRL's settings: the
learning rate annealed to 0 and the clipped value loss.
"""

from __future__ import annotations

import sys

import gymnasium as gym
from sb3_common import frozen_normalisation, run_peer  # sets one torch thread before SB3 builds anything
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize


def build_model(seed: int, env_id: str) -> PPO:
    # the zoo's normalize: true is VecNormalize with its defaults; everything else is SB3's PPO default
    env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed, vec_env_cls=DummyVecEnv))
    return PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0)


def main(argv: list[str] | None = None) -> int:
    return run_peer(build_model, name="ppo", env_id="Ant-v5", default_frames=1_000_000,
                    description=__doc__.splitlines()[0], argv=argv, env_choice=True,
                    make_eval_env=lambda model, env_id: frozen_normalisation(model, lambda: gym.make(env_id)))


if __name__ == "__main__":
    sys.exit(main())
