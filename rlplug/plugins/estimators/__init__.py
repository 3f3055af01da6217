"""Advantage and value-target estimators: pure TensorDict modules over ``[*batch, time]`` data."""

from __future__ import annotations

from typing import Annotated

from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Range, Unbounded

Discount = Annotated[float, Range(ge=0.0, le=1.0)]
#: an importance-weight clip; inf turns clipping off
Clip = Annotated[float, Range(gt=0.0), Unbounded()]


def make_gae(gamma: Discount = 0.99, lmbda: Discount = 0.95):
    """Generalised advantage estimation (Schulman et al. 2016); writes ``advantage``."""
    from rlplug.plugins.estimators.returns import GAE

    return GAE(gamma=gamma, lmbda=lmbda)


def make_from_advantage():
    """Value targets as advantage plus the critic's value; writes ``value_target``."""
    from rlplug.plugins.estimators.returns import ValueTargetFromAdvantage

    return ValueTargetFromAdvantage()


def make_td0(gamma: Discount = 0.99):
    """One-step TD target r + gamma * V(s'); writes ``value_target`` and ``advantage``."""
    from rlplug.plugins.estimators.returns import TD0

    return TD0(gamma=gamma)


def make_td_lambda(gamma: Discount = 0.99, lmbda: Discount = 0.95):
    """TD(lambda) return, the trace cut at done; writes ``value_target`` and ``advantage``."""
    from rlplug.plugins.estimators.returns import TDLambda

    return TDLambda(gamma=gamma, lmbda=lmbda)


def make_mc(gamma: Discount = 0.99, bootstrap: bool = True):
    """Discounted Monte-Carlo return (REINFORCE's); writes ``value_target`` and ``advantage``.

    Sums rewards to each done; where the batch or a truncation cuts an episode, adds V(s') if
    ``bootstrap``. Without ``state_value`` the advantage is the return itself, and with
    ``bootstrap = false`` no critic is needed at all.
    """
    from rlplug.plugins.estimators.returns import MonteCarloReturn

    return MonteCarloReturn(gamma=gamma, bootstrap=bootstrap)


def make_vtrace(gamma: Discount = 0.99, rho_bar: Clip = 1.0, c_bar: Clip = 1.0):
    """V-trace off-policy targets (Espeholt et al. 2018); writes ``value_target`` and ``advantage``.

    Reads the behaviour policy's ``action_log_prob`` (recorded at collection) and the trained policy's
    ``target_log_prob``, which the algorithm writes before calling it. ``rho_bar`` clips the importance
    weight on each TD error, ``c_bar`` the one that carries the trace back (the paper keeps c_bar <=
    rho_bar).
    """
    from rlplug.plugins.estimators.returns import VTrace

    return VTrace(gamma=gamma, rho_bar=rho_bar, c_bar=c_bar)


@hookimpl
def rlplug_register_estimators(register):
    register("gae", make_gae)
    register("from_advantage", make_from_advantage, aliases=("from-advantage",))
    register("td0", make_td0)
    register("td-lambda", make_td_lambda, aliases=("td_lambda",))
    register("mc", make_mc)
    register("vtrace", make_vtrace)
