"""Stable-Baselines3 DQN on CartPole-v1: the reference point for ``benchmarks/versus_sb3.py --workload
dqn-cartpole``.

Hyperparameters are rl-baselines3-zoo's tuned CartPole-v1 DQN, the settings ``recipes/cartpole-dqn.toml``
starts from (50k steps, lr 2.3e-3, batch 64, buffer 100k, 1000 steps before learning, gamma 0.99, 128 gradient
steps every 256 env steps, the target copied every 10 steps, epsilon 1 to 0.04 over 16% of the run, [256, 256]
ReLU). SB3's DQN has no double DQN, the zoo keeps the learning rate constant and takes 128 gradient steps a
round: the recipe changes all three, so the comparison is the zoo's reference against the recipe, not the same
arithmetic on both sides.
"""

from __future__ import annotations

import sys

from sb3_common import run_peer  # sets one torch thread before SB3 builds anything
from stable_baselines3 import DQN

ENV_ID = "CartPole-v1"


def build_model(seed: int) -> DQN:
    """DQN with the zoo's CartPole-v1 hyperparameters; everything else is SB3's default."""
    return DQN(
        "MlpPolicy",
        ENV_ID,
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
        verbose=0,
    )


def main(argv: list[str] | None = None) -> int:
    return run_peer(build_model, name="dqn", env_id=ENV_ID, default_frames=50_000,
                    description=__doc__.splitlines()[0], argv=argv)


if __name__ == "__main__":
    sys.exit(main())
