"""sb3-contrib's RecurrentPPO on CartPole-v1 with its velocities hidden: the peer of
``recipes/cartpole-novel-ppo-lstm.toml`` for ``benchmarks/versus_sb3.py --workload ppo-lstm-cartpole-novel``.

The recipe's hyperparameters (rl-baselines3-zoo's RecurrentPPO for CartPoleNoVel-v1): 8 envs x 32 steps, one
minibatch of 256, 20 epochs, linear lr 1e-3 and clip 0.2, gamma 0.98, GAE lambda 0.8, separate LSTMs of 64 for
the actor and the critic, each with a 64-unit ReLU layer, orthogonal initialisation, observations normalised by
running statistics (rewards not normalised, as in the recipe). Runs standalone, one process per seed.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
from sb3_common import frozen_normalisation, run_peer  # sets one torch thread before SB3 builds anything
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
from torch import nn

ENV_ID = "CartPole-v1"
#: the observation entries kept: cart position and pole angle (the recipe's env.observation_indices)
KEPT = [0, 2]


class HiddenVelocities(gym.ObservationWrapper):
    """CartPole's observation without the cart's and the pole's velocities."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(box.low[KEPT], box.high[KEPT], dtype=box.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[KEPT]


def make_env() -> gym.Env:
    return HiddenVelocities(gym.make(ENV_ID))


def linear_schedule(initial: float):
    """Decay linearly from `initial` to 0 over training (SB3 passes progress_remaining 1 -> 0)."""
    return lambda progress_remaining: progress_remaining * initial


def build_model(seed: int) -> RecurrentPPO:
    train_env = VecNormalize(make_vec_env(make_env, n_envs=8, seed=seed, vec_env_cls=DummyVecEnv),
                             norm_obs=True, norm_reward=False)
    return RecurrentPPO(
        "MlpLstmPolicy", train_env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
        ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, learning_rate=linear_schedule(1e-3),
        clip_range=linear_schedule(0.2), normalize_advantage=True, seed=seed, device="cpu", verbose=0,
        policy_kwargs={"lstm_hidden_size": 64, "n_lstm_layers": 1, "enable_critic_lstm": True,
                       "shared_lstm": False, "net_arch": {"pi": [64], "vf": [64]}, "activation_fn": nn.ReLU,
                       "ortho_init": True},
    )


def main(argv: list[str] | None = None) -> int:
    return run_peer(build_model, name="recurrent-ppo", env_id="CartPoleNoVel (CartPole-v1 without velocities)",
                    default_frames=100_000, description=__doc__.splitlines()[0], argv=argv,
                    make_eval_env=lambda model: frozen_normalisation(model, make_env))


if __name__ == "__main__":
    sys.exit(main())
