"""Estimator modules shared by the built-in estimator plugins.

Inputs (TorchRL's layout, time on dim -2): ``state_value``, ``("next", "state_value")``,
``("next", "reward")``, ``("next", "done")``, ``("next", "terminated")``, all ``[*batch, time, 1]``;
V-trace also reads the behaviour and target log-probs (``[*batch, time]`` or ``[*batch, time, 1]``).

Recursions over time use TorchRL's loop-based functions, which tests/test_estimators.py checks against
a float64 reference for every gamma and lambda in [0, 1]; its vectorised ones are avoided because they
fail when gamma * lambda is small.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.objectives.value.functional import (
    generalized_advantage_estimate,
    td_lambda_return_estimate,
    vtrace_advantage_estimate,
)

from rlplug.errors import UserError

VALUE = "state_value"
NEXT_VALUE = ("next", "state_value")
REWARD = ("next", "reward")
DONE = ("next", "done")
TERMINATED = ("next", "terminated")
#: log-prob of the taken action under the policy that collected it (what ProbabilisticActor records)
BEHAVIOUR_LOG_PROB = "action_log_prob"
#: log-prob of the same action under the policy being trained; the algorithm writes it before V-trace runs
TARGET_LOG_PROB = "target_log_prob"


class GAE(TensorDictModuleBase):
    """``advantage`` by GAE: ``done`` ends the lambda trace, ``terminated`` also drops the bootstrap.

    TorchRL's recursive form, not its vectorised one: the vectorised filter drops terms when
    gamma * lambda is small (0 or below about 3e-4; see tests/test_estimators.py), and for rlplug's
    batch lengths the recursion costs little more (BENCHMARKS.md).
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


class TD0(TensorDictModuleBase):
    """One-step TD: ``value_target = r + gamma * V(s')``, without ``V(s')`` past a termination.

    Nothing is summed over time, so ``done`` plays no part: a truncated step still bootstraps.
    """

    in_keys = [VALUE, NEXT_VALUE, REWARD, TERMINATED]
    out_keys = ["advantage", "value_target"]

    def __init__(self, gamma: float):
        super().__init__()
        self.gamma = gamma

    @torch.no_grad()
    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        value = batch.get(VALUE)
        # masked_fill rather than a product: a terminal V(s') that is inf or nan must not leak in
        bootstrap = batch.get(NEXT_VALUE).masked_fill(batch.get(TERMINATED), 0.0)
        target = batch.get(REWARD).to(value.dtype) + self.gamma * bootstrap
        batch.set("value_target", target)
        batch.set("advantage", target - value)
        return batch


class TDLambda(TensorDictModuleBase):
    """The lambda-return ``G_t = r_t + gamma * ((1 - lambda) * V(s_{t+1}) + lambda * G_{t+1})``.

    At a ``done`` (and at the batch end) ``G_{t+1}`` is replaced by ``V(s_{t+1})``, which termination
    zeroes. Writes ``value_target = G`` and ``advantage = G - V(s)``; with the same gamma and lambda
    this is GAE's advantage plus ``V(s)`` when the critic is consistent (``V(s_{t+1})`` is the next
    step's ``state_value``).
    """

    in_keys = [VALUE, NEXT_VALUE, REWARD, DONE, TERMINATED]
    out_keys = ["advantage", "value_target"]

    def __init__(self, gamma: float, lmbda: float):
        super().__init__()
        self.gamma, self.lmbda = gamma, lmbda

    @torch.no_grad()
    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        value = batch.get(VALUE)
        target = td_lambda_return_estimate(
            self.gamma, self.lmbda, batch.get(NEXT_VALUE), batch.get(REWARD).to(value.dtype),
            batch.get(DONE), batch.get(TERMINATED), time_dim=-2,
        )
        batch.set("value_target", target)
        batch.set("advantage", target - value)
        return batch


class MonteCarloReturn(TensorDictModuleBase):
    """Discounted reward-to-go within the batch, summed until each episode's ``done``.

    Where the batch ends mid-episode or an episode is truncated, the tail is ``V(s')`` with
    ``bootstrap`` and 0 without; a terminated episode's tail is always 0. ``advantage`` is the return
    minus ``state_value``, or the return itself when there is no ``state_value``: REINFORCE without a
    critic, which with ``bootstrap=False`` needs no value key at all.
    """

    out_keys = ["advantage", "value_target"]

    def __init__(self, gamma: float, bootstrap: bool):
        super().__init__()
        self.gamma, self.bootstrap = gamma, bootstrap
        # state_value is optional, so it is not an in_key
        self.in_keys = [REWARD, DONE, *([NEXT_VALUE, TERMINATED] if bootstrap else [])]

    @torch.no_grad()
    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        reward, done = batch.get(REWARD), batch.get(DONE)
        value = batch.get(VALUE, None)
        if self.bootstrap:
            if batch.get(NEXT_VALUE, None) is None:
                raise UserError("the 'mc' estimator bootstraps from the critic's ('next', 'state_value'), which "
                                "this batch lacks; set bootstrap = false to use plain returns without a critic")
            next_value, terminated = batch.get(NEXT_VALUE), batch.get(TERMINATED)
        else:
            # a zero tail that every done "terminates": the sum stops at each done and at the batch end
            dtype = value.dtype if value is not None else _float_dtype(reward)
            next_value, terminated = torch.zeros_like(reward, dtype=dtype), done
        # lambda = 1 makes TorchRL's lambda-return the plain discounted sum with a bootstrapped tail
        target = td_lambda_return_estimate(
            self.gamma, 1.0, next_value, reward.to(next_value.dtype), done, terminated, time_dim=-2,
        )
        batch.set("value_target", target)
        batch.set("advantage", target if value is None else target - value)
        return batch


class VTrace(TensorDictModuleBase):
    """V-trace (Espeholt et al. 2018): targets for the trained policy from data another policy collected.

    The importance weight ``rho_t = pi(a_t|s_t) / mu(a_t|s_t)`` (target over behaviour) is clipped at
    ``rho_bar`` where it weighs a TD error and at ``c_bar`` where it carries the trace back in time, so
    stale data neither explodes the variance nor pulls the target far from ``V``. ``done`` cuts the
    trace. Writes ``value_target = v_s`` and ``advantage = min(rho_bar, rho_t) * (r_t + gamma *
    v_{t+1} - V(s_t))`` (the policy-gradient weight), with ``v_{t+1} = V(s_{t+1})`` at a done or the
    batch end and no bootstrap past a termination.
    """

    in_keys = [VALUE, NEXT_VALUE, REWARD, DONE, TERMINATED, BEHAVIOUR_LOG_PROB, TARGET_LOG_PROB]
    out_keys = ["advantage", "value_target"]

    def __init__(self, gamma: float, rho_bar: float, c_bar: float):
        super().__init__()
        self.gamma, self.rho_bar, self.c_bar = gamma, rho_bar, c_bar

    @torch.no_grad()
    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        value = batch.get(VALUE)
        if TARGET_LOG_PROB not in batch.keys():
            raise UserError(f"the 'vtrace' estimator needs '{TARGET_LOG_PROB}', the trained policy's log-prob of "
                            f"each taken action, which the algorithm must write first; this one did not, so "
                            f"choose another estimator")
        behaviour = _per_step(batch.get(BEHAVIOUR_LOG_PROB), value, BEHAVIOUR_LOG_PROB)
        target = _per_step(batch.get(TARGET_LOG_PROB), value, TARGET_LOG_PROB)
        # TorchRL's log_pi is the target policy and log_mu the behaviour one (its docstring has them the
        # other way round; the hand-computed test in tests/test_estimators.py pins the direction)
        advantage, value_target = vtrace_advantage_estimate(
            self.gamma, target, behaviour, value, batch.get(NEXT_VALUE), batch.get(REWARD).to(value.dtype),
            batch.get(DONE), batch.get(TERMINATED),
            rho_thresh=torch.tensor(self.rho_bar, dtype=value.dtype, device=value.device),
            c_thresh=torch.tensor(self.c_bar, dtype=value.dtype, device=value.device),
            time_dim=-2,
        )
        batch.set("value_target", value_target)
        batch.set("advantage", advantage)
        return batch


def _per_step(log_prob: torch.Tensor, value: torch.Tensor, key: str) -> torch.Tensor:
    """``log_prob`` shaped like ``value`` (``[*batch, time, 1]``).

    ProbabilisticActor writes ``[*batch, time]``; TorchRL's V-trace, given that, fails with an
    unrelated-looking broadcasting or index error.
    """
    if log_prob.shape == value.shape[:-1]:
        log_prob = log_prob.unsqueeze(-1)
    if log_prob.shape != value.shape:
        raise ValueError(f"'{key}' has shape {tuple(log_prob.shape)}; V-trace needs one log-prob per step, "
                         f"shaped {tuple(value.shape[:-1])} or {tuple(value.shape)}")
    return log_prob.to(value.dtype)


def _float_dtype(tensor: torch.Tensor) -> torch.dtype:
    return tensor.dtype if tensor.is_floating_point() else torch.get_default_dtype()
