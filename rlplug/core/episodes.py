"""Episode returns counted as steps come in: the recent return people watch while training, and an
evaluation's returns."""

from __future__ import annotations

from collections import deque

import numpy as np

#: Episodes the recent return averages over.
RECENT_EPISODES = 20


class EpisodeTracker:
    """Episode returns as steps come in, for the 'recent return' people watch while training."""

    def __init__(self, envs: int, keep: int | None = RECENT_EPISODES, quota: int | None = None):
        """``quota``: count only that many episodes, shared out evenly over the envs (the first
        ``quota % envs`` envs one more), each env's first ones: an evaluation's, where an env whose
        episodes end early must not crowd out one whose first episode is long."""
        self.running = np.zeros(envs)
        self.recent: deque[float] = deque(maxlen=keep)
        self.episodes = 0
        self._mean: tuple[int, float | None] = (0, None)  # (episodes, their recent mean): asked for every step
        self.left = None if quota is None else np.array([quota // envs + (i < quota % envs) for i in range(envs)])

    def add(self, rewards: np.ndarray, dones: np.ndarray, rows: np.ndarray | None = None) -> None:
        """``rewards`` and ``dones`` shaped ``[envs, time]``; ``rows``: the tracked envs they are (one Ray
        worker's among all workers'), all of them when None."""
        for t in range(rewards.shape[1]):
            ended = np.flatnonzero(dones[:, t])
            if rows is None:
                self.running += rewards[:, t]
            else:
                self.running[rows] += rewards[:, t]
                ended = rows[ended]
            for row in ended:
                if self.left is None or self.left[row] > 0:
                    self.recent.append(float(self.running[row]))
                    self.episodes += 1
                    if self.left is not None:
                        self.left[row] -= 1
                self.running[row] = 0.0

    def recent_return(self) -> float | None:
        if self._mean[0] != self.episodes:
            self._mean = (self.episodes, float(np.mean(self.recent)) if self.recent else None)
        return self._mean[1]
