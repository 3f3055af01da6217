"""What an env plugin may use: the public helpers, documented API (docs/writing-plugins.md).

- :func:`one_observation`: the env with the observation entries it is told (``in_keys``, as a recipe
  names them: ``th``, ``params.g``), or all its floating-point ones, concatenated into the one
  ``observation`` entry rlplug's networks read; what no network can read is a one-line ``UserError``.
  rlplug applies it with ``in_keys`` unset to every env it builds; a factory that takes ``in_keys`` calls it.
- :func:`check_env`: the env stepped with random actions through resets and time limits on every copy, and
  an :class:`EnvReport` with each broken promise as one line (``rlplug check-env RECIPE`` on a recipe).

The array step an env may offer is part of the env protocol, :class:`rlplug.registry.protocols.Env`. These
names stay as they are across rlplug releases; the modules behind them (``rlplug.core``) may move.
"""

from rlplug.core.env_check import EnvReport, check_env
from rlplug.core.observations import OBSERVATION, one_observation

__all__ = ["OBSERVATION", "EnvReport", "check_env", "one_observation"]
