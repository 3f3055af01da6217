"""Random network distillation (Burda, Edwards, Storkey, Klimov 2018, "Exploration by Random Network
Distillation"), on TorchRL's pieces: ``RNDLoss`` trains the predictor, and ``RunningMeanStd`` (TorchRL's RND
statistics) keeps the observations' and the intrinsic returns' running moments. TorchRL's ``RNDTransform``
computes a reward per env step inside the env; here the reward is computed per collected batch by the algorithm,
so that the same module serves both families and its statistics live in the algorithm's checkpoint."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.envs.transforms.rnd import RunningMeanStd
from torchrl.objectives import RNDLoss

from rlplug.plugins.intrinsic.networks import mlp, next_observations, observation_size

#: standardised observations are clipped to this, as the paper does
OBSERVATION_CLIP = 5.0


class RandomNetworkDistillation(nn.Module):
    """A fixed random ``target`` and a trained ``predictor`` of its features; the reward is the predictor's error."""

    carry: torch.Tensor

    def __init__(self, observation_spec, *, hidden: tuple[int, ...], features: int, lr: float, epochs: int,
                 minibatch_size: int, update_fraction: float, gamma: float, device: str):
        super().__init__()
        self.key, self.size = observation_size(observation_spec, "rnd")
        self.epochs, self.minibatch_size, self.gamma = epochs, minibatch_size, gamma
        self.target = mlp(self.size, hidden, features, device)
        self.predictor = mlp(self.size, hidden, features, device)
        self.observations = RunningMeanStd(shape=(self.size,)).to(device)
        self.returns = RunningMeanStd(shape=()).to(device)
        #: each env's discounted intrinsic return so far (the running standard deviation's input), or empty
        self.register_buffer("carry", torch.zeros(0, device=device))
        self.loss = RNDLoss(self.predictor, self.target, obs_rms=self.observations, obs_clip=OBSERVATION_CLIP,
                            update_fraction=update_fraction)
        self.loss.set_keys(observation=("next", self.key))
        self.optimiser = torch.optim.Adam(self.predictor.parameters(), lr=lr)

    def standardised(self, observation: torch.Tensor) -> torch.Tensor:
        """What both networks read: RNDLoss's normalisation of the observation."""
        return self.observations.normalize(observation).clamp(-OBSERVATION_CLIP, OBSERVATION_CLIP)

    def error(self, observation: torch.Tensor) -> torch.Tensor:
        """The predictor's squared error at the target's features, mean over features (RNDLoss's per sample)."""
        standardised = self.standardised(observation)
        return (self.predictor(standardised) - self.target(standardised)).pow(2).mean(-1)

    @torch.no_grad()
    def rewards(self, batch: TensorDictBase) -> torch.Tensor:
        observation = next_observations(batch, self.key, self.size)
        self.observations.update(observation.reshape(-1, self.size))
        error = self.error(observation)
        self.returns.update(self.discounted(error))
        return error / self.returns.var.clamp_min(1e-8).sqrt()

    def discounted(self, error: torch.Tensor) -> torch.Tensor:
        """Each env's discounted sum of its rewards so far, step by step along its row (``[envs, time]``)."""
        rows = error.reshape(1, -1) if error.ndim < 2 else error.reshape(error.shape[0], -1)
        carry = self.carry if self.carry.shape == rows.shape[:1] else torch.zeros_like(rows[:, 0])
        sums = []
        for step in rows.unbind(1):
            carry = self.gamma * carry + step
            sums.append(carry)
        self.carry = carry
        return torch.stack(sums, 1)

    def learn(self, batch: TensorDictBase) -> dict[str, float]:
        observation = next_observations(batch, self.key, self.size).reshape(-1, self.size)
        count, losses = len(observation), []
        for _ in range(self.epochs):
            order = torch.randperm(count, device=observation.device)
            for start in range(0, count, self.minibatch_size):
                chosen = observation[order[start:start + self.minibatch_size]]
                loss = self.loss(TensorDict({"next": {self.key: chosen}}, batch_size=[len(chosen)]))["loss_predictor"]
                self.optimiser.zero_grad()
                loss.backward()
                self.optimiser.step()
                losses.append(loss.detach())
        return {"rnd_loss": float(torch.stack(losses).mean())}

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]  # the optimiser too
        return {"networks": super().state_dict(), "optimiser": self.optimiser.state_dict()}

    def load_state_dict(self, state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self.carry = state["networks"]["carry"]  # its shape is the number of envs of the run that saved it
        super().load_state_dict(state["networks"])
        self.optimiser.load_state_dict(state["optimiser"])
