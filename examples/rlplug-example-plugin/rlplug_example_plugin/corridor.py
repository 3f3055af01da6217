"""A corridor of ``length`` cells, written against TorchRL's ``EnvBase`` API.

The agent starts in the leftmost cell (or, with ``random_start``, in a uniformly drawn cell other than the
goal) and moves one cell left (action 0) or right (action 1); walking into the left wall leaves it where it
is. Reaching the rightmost cell gives reward 1 and terminates the episode; every other step gives 0. An
episode that has not terminated after ``max_steps`` steps is truncated.

Observation: ``observation``, the position one-hot encoded (float32, shape ``[length]``). The env is
unbatched (``batch_size == []``) and keeps its state (position, step count) on the instance, like a
wrapped gym env; ``set_seed`` seeds the generator used by ``random_start``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

LEFT, RIGHT = 0, 1


class CorridorEnv(EnvBase):
    def __init__(self, length: int = 5, max_steps: int = 50, random_start: bool = False,
                 device: str | torch.device = "cpu"):
        if length < 2:
            raise ValueError(f"length must be >= 2, got {length}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        super().__init__(device=device, batch_size=torch.Size([]))
        self.length, self.max_steps, self.random_start = length, max_steps, random_start
        self.observation_spec = Composite(
            observation=Bounded(low=0.0, high=1.0, shape=(length,), dtype=torch.float32, device=self.device),
            shape=(),
        )
        self.action_spec = Categorical(2, shape=(), dtype=torch.int64, device=self.device)
        self.reward_spec = Unbounded(shape=(1,), dtype=torch.float32, device=self.device)
        self.full_done_spec = Composite(
            done=Categorical(2, shape=(1,), dtype=torch.bool, device=self.device),
            terminated=Categorical(2, shape=(1,), dtype=torch.bool, device=self.device),
            truncated=Categorical(2, shape=(1,), dtype=torch.bool, device=self.device),
            shape=(),
        )
        self.rng = torch.Generator()
        self.rng.manual_seed(0)
        self.position, self.steps = 0, 0

    def _observation(self) -> torch.Tensor:
        observation = torch.zeros(self.length, dtype=torch.float32, device=self.device)
        observation[self.position] = 1.0
        return observation

    def _flag(self, value: bool) -> torch.Tensor:
        return torch.tensor([value], dtype=torch.bool, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDictBase:
        if self.random_start:
            self.position = int(torch.randint(0, self.length - 1, (), generator=self.rng))
        else:
            self.position = 0
        self.steps = 0
        return TensorDict(
            {"observation": self._observation(), "done": self._flag(False), "terminated": self._flag(False),
             "truncated": self._flag(False)},
            batch_size=self.batch_size, device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = int(tensordict.get("action"))
        move = 1 if action == RIGHT else -1
        self.position = min(max(self.position + move, 0), self.length - 1)
        self.steps += 1
        terminated = self.position == self.length - 1
        truncated = not terminated and self.steps >= self.max_steps
        return TensorDict(
            {"observation": self._observation(),
             "reward": torch.tensor([1.0 if terminated else 0.0], device=self.device),
             "done": self._flag(terminated or truncated), "terminated": self._flag(terminated),
             "truncated": self._flag(truncated)},
            batch_size=self.batch_size, device=self.device,
        )

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            self.rng.seed()
        else:
            self.rng.manual_seed(seed)
