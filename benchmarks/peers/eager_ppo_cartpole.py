"""A single-file eager PyTorch PPO on CartPole-v1: the floor ``benchmarks/versus_sb3.py`` times rlplug against.

What a careful user writes by hand in plain torch (the shape of CleanRL's single-file PPO, written here from the
algorithm): a gymnasium vector env, separate 64-64 tanh actor and critic, actions sampled from the logits'
log-softmax, one critic call per step during collection, GAE, the clipped surrogate, Adam. The hyperparameters
are exactly ``recipes/cartpole-ppo.toml``'s (rl-baselines3-zoo's): 8 envs, 256 frames a batch, 20 epochs of one
256-frame minibatch, lr 1e-3 and clip range 0.2 both annealed linearly to 0, gamma 0.98, lambda 0.8, value
coefficient 0.5 on the squared error, no entropy bonus, gradient norm clipped at 0.5, advantages normalised per
minibatch, Adam with eps 1e-5, orthogonal initialisation (gains sqrt 2, 0.01 for the logits, 1 for the value).

It imports neither rlplug nor Stable-Baselines3, and writes the same result JSON as the SB3 peers (frames, the
deterministic return over 10 episodes of a fresh env seeded ``seed + 10000``, the training time).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

# one intra-op thread before any tensor exists, as rlplug and the SB3 peers run
torch.set_num_threads(1)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from torch import nn  # noqa: E402

ENV_ID = "CartPole-v1"
NUM_ENVS, STEPS, EPOCHS, MINIBATCH = 8, 32, 20, 256
LR, CLIP, GAMMA, LMBDA = 1e-3, 0.2, 0.98, 0.8
VALUE_COEF, MAX_GRAD_NORM = 0.5, 0.5
EVAL_EPISODES = 10


def mlp(inputs: int, outputs: int, out_gain: float) -> nn.Sequential:
    """64-64 tanh, orthogonal weights and zero biases."""
    layers = [nn.Linear(inputs, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, outputs)]
    linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
    for layer, gain in zip(linears, (math.sqrt(2), math.sqrt(2), out_gain)):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


def gae(rewards, values, next_values, terminated, done):
    """Advantages along each env's row (``[steps, envs]``): bootstrap from the successor's value unless the
    episode terminated; the recursion stops where an episode ended (terminated or truncated)."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + GAMMA * next_values[t] * (1 - terminated[t]) - values[t]
        running = delta + GAMMA * LMBDA * (1 - done[t]) * running
        advantages[t] = running
    return advantages


def train(seed: int, frames: int) -> tuple[nn.Module, int]:
    torch.manual_seed(seed)
    envs = gym.make_vec(ENV_ID, num_envs=NUM_ENVS, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    observation_size, actions = envs.single_observation_space.shape[0], int(envs.single_action_space.n)
    actor, critic = mlp(observation_size, actions, 0.01), mlp(observation_size, 1, 1.0)
    optimiser = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=LR, eps=1e-5)
    parameters = [p for group in optimiser.param_groups for p in group["params"]]

    batch = NUM_ENVS * STEPS
    observations = torch.zeros(STEPS, NUM_ENVS, observation_size)
    taken = torch.zeros(STEPS, NUM_ENVS, dtype=torch.long)
    old_log_probs, values, truncated_values = (torch.zeros(STEPS, NUM_ENVS) for _ in range(3))
    truncated = torch.zeros(STEPS, NUM_ENVS, dtype=torch.bool)
    rewards, terminated, done = (torch.zeros(STEPS, NUM_ENVS) for _ in range(3))

    observation, _ = envs.reset(seed=seed)
    seen = 0
    while seen < frames:
        for t in range(STEPS):
            obs = torch.as_tensor(observation, dtype=torch.float32)
            with torch.no_grad():
                log_probs = actor(obs).log_softmax(-1)
                action = torch.multinomial(log_probs.exp(), 1)
                values[t] = critic(obs).squeeze(-1)
            observations[t], taken[t] = obs, action.squeeze(-1)
            old_log_probs[t] = log_probs.gather(-1, action).squeeze(-1)
            observation, reward, term, trunc, info = envs.step(action.squeeze(-1).numpy())
            rewards[t] = torch.as_tensor(reward)
            terminated[t] = torch.as_tensor(term, dtype=torch.float32)
            done[t] = torch.as_tensor(term | trunc, dtype=torch.float32)
            truncated[t] = torch.as_tensor(trunc & ~term)
            if truncated[t].any():  # the successor is the episode's last observation, not the reset's
                final = np.stack(info["final_obs"][truncated[t].numpy()])
                with torch.no_grad():
                    truncated_values[t, truncated[t]] = critic(torch.as_tensor(final, dtype=torch.float32)).squeeze(-1)
        with torch.no_grad():  # each step's successor is the next step's observation, but at the end of the batch
            last = critic(torch.as_tensor(observation, dtype=torch.float32)).squeeze(-1)
        next_values = torch.cat([values[1:], last.unsqueeze(0)])
        next_values = torch.where(truncated, truncated_values, next_values)
        seen += batch
        progress = min(1.0, seen / frames)
        for group in optimiser.param_groups:
            group["lr"] = LR * (1 - progress)
        clip = CLIP * (1 - progress)

        advantages = gae(rewards, values, next_values, terminated, done)
        returns = advantages + values
        flat = [x.reshape(batch, *x.shape[2:]) for x in (observations, taken, old_log_probs, advantages, returns)]
        for _ in range(EPOCHS):
            order = torch.randperm(batch)
            for start in range(0, batch, MINIBATCH):
                index = order[start: start + MINIBATCH]
                obs, action, old_log_prob, advantage, target = (x[index] for x in flat)
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
                log_prob = actor(obs).log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
                ratio = (log_prob - old_log_prob).exp()
                policy_loss = -torch.min(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage).mean()
                value_loss = (critic(obs).squeeze(-1) - target).pow(2).mean()
                loss = policy_loss + VALUE_COEF * value_loss
                optimiser.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(parameters, MAX_GRAD_NORM)
                optimiser.step()
    envs.close()
    return actor, seen


@torch.no_grad()
def evaluate(actor: nn.Module, seed: int) -> tuple[float, float]:
    """The deterministic policy's (argmax) returns over EVAL_EPISODES episodes of one fresh env."""
    env = gym.make(ENV_ID)
    returns = []
    observation, _ = env.reset(seed=seed + 10_000)
    for _ in range(EVAL_EPISODES):
        total, finished = 0.0, False
        while not finished:
            action = int(actor(torch.as_tensor(observation, dtype=torch.float32)).argmax())
            observation, reward, term, trunc, _ = env.step(action)
            total += float(reward)
            finished = term or trunc
        returns.append(total)
        observation, _ = env.reset()
    env.close()
    return float(np.mean(returns)), float(np.std(returns))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000, help="environment steps to train for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out", type=Path, default=None, help="where to write the result JSON")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    actor, frames = train(args.seed, args.frames)
    train_wall_time_s = time.perf_counter() - start
    mean_return, std_return = evaluate(actor, args.seed)
    result = {"frames": frames, "eval_return_mean": mean_return, "eval_return_std": std_return,
              "train_wall_time_s": round(train_wall_time_s, 3), "seed": args.seed}
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"eager ppo {ENV_ID} seed={args.seed} frames={frames} train={train_wall_time_s:.1f}s "
          f"eval_return={mean_return:.1f}±{std_return:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
