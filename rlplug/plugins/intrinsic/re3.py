"""RE3, random encoders for efficient exploration (Seo, Chen, Shin, Lee, Abbeel, Lee 2021, "State Entropy
Maximization with Random Encoders for Efficient Exploration"): a k-nearest-neighbour estimate of the state
entropy in a fixed random encoder's space, rewarding each transition by how far its state lies from the others."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from rlplug.errors import UserError
from rlplug.plugins.intrinsic.networks import mlp, next_observations, observation_size


def knn_rewards(embeddings: torch.Tensor, k: int) -> torch.Tensor:
    """``log(1 + ||y_i - y_i^(k)||)`` for each row ``y_i`` of ``[N, features]``, ``y_i^(k)`` its k-th nearest
    other row (itself, at distance 0, is the 0th)."""
    distances = torch.cdist(embeddings, embeddings, compute_mode="donot_use_mm_for_euclid_dist")
    return torch.log1p(distances.kthvalue(k + 1, dim=-1).values)


class RandomEncoder(nn.Module):
    """A fixed random encoder; nothing learns."""

    def __init__(self, observation_spec, *, k: int, features: int, hidden: tuple[int, ...], device: str):
        super().__init__()
        self.key, self.size = observation_size(observation_spec, "re3")
        self.k = k
        self.encoder = mlp(self.size, hidden, features, device).requires_grad_(False)

    @torch.no_grad()
    def rewards(self, batch: TensorDictBase) -> torch.Tensor:
        observation = next_observations(batch, self.key, self.size).reshape(-1, self.size)
        if len(observation) <= self.k:
            raise UserError(f"re3 rewards each transition by its {self.k}-th nearest neighbour in the batch, and a "
                            f"batch holds {len(observation)} transitions; lower k or collect more per update "
                            f"(frames_per_batch; off-policy: num_envs x steps_per_update)",
                            path="algorithm.intrinsic.k")
        return knn_rewards(self.encoder(observation), self.k).reshape(batch.batch_size)

    def learn(self, batch: TensorDictBase) -> dict[str, float]:
        return {}

    def load_state_dict(self, state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().load_state_dict(state)
