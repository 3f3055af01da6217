"""Built-in algorithms. Each factory's signature is the algorithm's recipe table."""

from __future__ import annotations

from typing import Annotated

import rlplug
from rlplug.components import Estimator, Network
from rlplug.registry.params import Range

Count = Annotated[int, Range(ge=1)]
Positive = Annotated[float, Range(gt=0.0)]
NonNegative = Annotated[float, Range(ge=0.0)]


def make_ppo(
    observation_spec,
    action_spec,
    total_frames: int,
    policy: Network = "mlp",
    critic: Network = "mlp",
    advantage: Estimator = "gae",
    value_target: Estimator = "from_advantage",
    frames_per_batch: Count = 2048,
    epochs: Count = 10,
    minibatch_size: Count = 64,
    lr: Positive = 3e-4,
    anneal_lr: bool = False,
    clip_epsilon: Positive = 0.2,
    anneal_clip: bool = False,
    entropy_coef: NonNegative = 0.0,
    value_coef: NonNegative = 0.5,
    max_grad_norm: Positive | None = 0.5,
    normalize_advantages: bool = True,
    device: str = "cpu",
):
    """Proximal policy optimisation with the clipped surrogate objective."""
    from rlplug.algorithms.ppo import PPO, PPOConfig

    specs = {"observation_spec": observation_spec, "action_spec": action_spec, "device": device}
    config = PPOConfig(frames_per_batch, epochs, minibatch_size, lr, anneal_lr, clip_epsilon, anneal_clip,
                       entropy_coef, value_coef, max_grad_norm, normalize_advantages, total_frames)
    return PPO(config, policy.build(role="policy", **specs), critic.build(role="value", **specs),
               [advantage.build(), value_target.build()])


@rlplug.hookimpl
def rlplug_register_algorithms(register):
    register("ppo", make_ppo)
