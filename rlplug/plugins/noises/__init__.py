"""Exploration noise for deterministic continuous policies: Gaussian and Ornstein-Uhlenbeck.

Noise is added only while collecting (exploration type RANDOM), scaled to the action range (``sigma`` is a
fraction of half the range) and clamped into the bounds; see :mod:`rlplug.plugins.noises.processes`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Range

Sigma = Annotated[float, Range(ge=0.0)]
#: how sigma moves from its start to final_sigma over run.total_frames (step(frames) sets the position)
Schedule = Literal["constant", "linear", "exponential"]


def make_gaussian(
    #: the noise's standard deviation, as a fraction of half the action range
    sigma: Sigma = 0.1,
    #: sigma at the end of the run (needed by the 'linear' and 'exponential' schedules)
    final_sigma: Sigma | None = None,
    #: 'constant', 'linear' (sigma to final_sigma), or 'exponential' (sigma * (final_sigma / sigma) ** progress)
    schedule: Schedule = "constant",
    action_spec=None,
    device="cpu",
    total_frames=None,
):
    """Gaussian action noise, a fraction of half the action range, clamped into the bounds."""
    from rlplug.plugins.noises.processes import GaussianNoise

    return GaussianNoise(action_spec, sigma=sigma, final_sigma=final_sigma, schedule=schedule,
                         total_frames=total_frames, device=device)


def make_ornstein_uhlenbeck(
    #: how fast the process returns to mu
    theta: Annotated[float, Range(ge=0.0)] = 0.15,
    #: the process's noise scale, as a fraction of half the action range
    sigma: Sigma = 0.2,
    #: the time step of the process
    dt: Annotated[float, Range(gt=0.0)] = 1e-2,
    #: the value the process returns to
    mu: float = 0.0,
    #: sigma at the end of the run (needed by the 'linear' and 'exponential' schedules)
    final_sigma: Sigma | None = None,
    #: 'constant', 'linear' (sigma to final_sigma), or 'exponential' (sigma * (final_sigma / sigma) ** progress)
    schedule: Schedule = "constant",
    action_spec=None,
    device="cpu",
    total_frames=None,
):
    """Temporally correlated Ornstein-Uhlenbeck action noise (DDPG's), one process per env."""
    from rlplug.plugins.noises.processes import OrnsteinUhlenbeckNoise

    return OrnsteinUhlenbeckNoise(action_spec, theta=theta, sigma=sigma, dt=dt, mu=mu, final_sigma=final_sigma,
                                  schedule=schedule, total_frames=total_frames, device=device)


@hookimpl
def rlplug_register_noises(register):
    register("gaussian", make_gaussian)
    register("ornstein-uhlenbeck", make_ornstein_uhlenbeck, aliases=("ornstein_uhlenbeck", "ou"))
