"""``mc-return``: discounted Monte-Carlo returns computed within one collected batch.

Input layout is rlplug's estimator contract (TorchRL's, time on dim -2): ``state_value``,
``("next", "state_value")``, ``("next", "reward")``, ``("next", "done")`` and ``("next", "terminated")``,
all shaped ``[*batch, time, 1]``. Going backwards in time::

    G[t] = r[t] + gamma * tail[t]
    tail[t] = 0                     if terminated[t]         (the episode really ended)
            = V(next_obs[t])        elif done[t] or t is the last step of the batch   (cut short)
            = G[t + 1]              otherwise                 (same episode continues in the batch)

So the return resets at every ``done``, and the critic's value of the next state stands in for the
unseen rest of the episode only where the episode was cut short: at a truncation (done but not
terminated) and at the end of the batch, which cuts every running episode. With ``bootstrap=False``
those cuts count as zero too (a pure, biased Monte-Carlo return).

Writes ``value_target = G`` and ``advantage = G - state_value``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

VALUE = "state_value"
NEXT_VALUE = ("next", "state_value")
REWARD = ("next", "reward")
DONE = ("next", "done")
TERMINATED = ("next", "terminated")


def discounted_returns(reward: torch.Tensor, next_value: torch.Tensor, done: torch.Tensor,
                       terminated: torch.Tensor, gamma: float, bootstrap: bool = True) -> torch.Tensor:
    """The returns ``G`` above for tensors shaped ``[*batch, time, 1]``."""
    next_value = next_value if bootstrap else torch.zeros_like(next_value)
    done, alive = done.bool(), ~terminated.bool()
    returns = torch.empty_like(reward)
    following = next_value[..., -1, :]  # the batch end is a cut: bootstrap there
    for t in reversed(range(reward.shape[-2])):
        if t < reward.shape[-2] - 1:
            following = torch.where(done[..., t, :], next_value[..., t, :], returns[..., t + 1, :])
        returns[..., t, :] = reward[..., t, :] + gamma * following * alive[..., t, :]
    return returns


class MonteCarloReturn(TensorDictModuleBase):
    """Writes ``value_target`` (the discounted return) and ``advantage`` (return minus ``state_value``)."""

    in_keys = [VALUE, NEXT_VALUE, REWARD, DONE, TERMINATED]
    out_keys = ["value_target", "advantage"]

    def __init__(self, gamma: float = 0.99, bootstrap: bool = True):
        super().__init__()
        self.gamma, self.bootstrap = gamma, bootstrap

    @torch.no_grad()
    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        value = batch.get(VALUE)
        returns = discounted_returns(batch.get(REWARD).to(value.dtype), batch.get(NEXT_VALUE), batch.get(DONE),
                                     batch.get(TERMINATED), self.gamma, self.bootstrap)
        batch.set("value_target", returns)
        batch.set("advantage", returns - value)
        return batch
