"""``sparse-chain``: a hard-exploration chain whose only reward is at its far end, the copies stepped as one tensor.

The agent starts at the chain's left end (cell 0) and moves one cell left or right per step; reaching the right end
(cell ``length - 1``) ends the episode with reward 1, and nothing else is rewarded. Which of the two actions moves
right differs from cell to cell (a fixed pattern for each length, the same in every run), so that no policy acting
the same everywhere reaches the end (an untrained deterministic policy would, one time in two). A policy acting at
random wanders about sqrt(steps) cells, so within the default time limit of ``2 * length`` steps it almost never reaches
the end of a chain of 40: an algorithm exploring by its policy's noise alone sees no reward to learn from, while
a bonus for new observations (``[algorithm.intrinsic]``) pulls it along. The observation is the cell, one-hot."""

from __future__ import annotations

import torch
from torchrl.data import Bounded, Composite

from rlplug.plugins.envs.torch_classic import BatchedEnv


class SparseChain(BatchedEnv):
    """``num_envs`` copies of the chain; :attr:`state` is each copy's cell (int64)."""

    env_id = "sparse-chain"
    max_steps = None
    actions = 2
    state: torch.Tensor

    def __init__(self, length: int, num_envs: int = 1, max_episode_steps: int | None = None,
                 device: str | None = "cpu"):
        super().__init__(num_envs, max_episode_steps=max_episode_steps or 2 * length, device=device)
        self.length = length
        #: the action that moves right in each cell: fixed for a length, not drawn from the run's seed
        self.right = torch.randint(2, (length,), generator=torch.Generator().manual_seed(length)).to(self.device)
        self.state = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.observation_spec = Composite(
            observation=Bounded(0.0, 1.0, shape=(num_envs, length), dtype=torch.float32, device=self.device),
            shape=(num_envs,), device=self.device)

    def start(self, count: int) -> torch.Tensor:
        return torch.zeros(count, dtype=torch.int64, device=self.device)

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(state, self.length).to(torch.float32)

    def advance(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The cell's right action moves right, the other left (the left end holds)."""
        step = torch.where(action.to(torch.int64) == self.right[state], 1, -1)
        cell = (state + step).clamp(0, self.length - 1)
        terminated = cell == self.length - 1
        return cell, terminated.to(torch.float32), terminated
