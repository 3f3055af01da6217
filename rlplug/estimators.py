"""Estimator modules shared by the built-in estimator plugins.

Inputs (TorchRL's layout, time on dim -2): ``state_value``, ``("next", "state_value")``,
``("next", "reward")``, ``("next", "done")``, ``("next", "terminated")``, all ``[*batch, time, 1]``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.objectives.value.functional import generalized_advantage_estimate

VALUE = "state_value"
NEXT_VALUE = ("next", "state_value")
REWARD = ("next", "reward")
DONE = ("next", "done")
TERMINATED = ("next", "terminated")


class GAE(TensorDictModuleBase):
    """``advantage`` by GAE: ``done`` ends the lambda trace, ``terminated`` also drops the bootstrap.

    TorchRL's recursive form, not its vectorised one: the vectorised filter drops terms when
    gamma * lambda is small (0 or below about 3e-4; see tests/test_estimators.py), and for rlplug's
    batch lengths the recursion costs about 0.1 ms more per batch.
    """

    in_keys = [VALUE, NEXT_VALUE, REWARD, DONE, TERMINATED]
    out_keys = ["advantage"]

    def __init__(self, gamma: float, lmbda: float):
        super().__init__()
        self.gamma, self.lmbda = gamma, lmbda

    @torch.no_grad()
    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        value = batch.get(VALUE)
        advantage, _ = generalized_advantage_estimate(
            self.gamma, self.lmbda, value, batch.get(NEXT_VALUE), batch.get(REWARD).to(value.dtype),
            batch.get(DONE), batch.get(TERMINATED), time_dim=-2,
        )
        batch.set("advantage", advantage)
        return batch


class ValueTargetFromAdvantage(TensorDictModuleBase):
    """``value_target = advantage + state_value``: the return that the advantage estimate implies."""

    in_keys = ["advantage", VALUE]
    out_keys = ["value_target"]

    @torch.no_grad()
    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        batch.set("value_target", batch.get("advantage") + batch.get(VALUE))
        return batch
