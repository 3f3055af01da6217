"""What an env plugin may use: the public helpers, documented API (docs/writing-plugins.md).

- :func:`one_observation`: the env with the observation entries it is told (``in_keys``, as a recipe
  names them: ``th``, ``params.g``), or all its floating-point ones, concatenated into the one
  ``observation`` entry rlplug's networks read; what no network can read is a one-line ``UserError``.
  rlplug applies it with ``in_keys`` unset to every env it builds; a factory that takes ``in_keys`` calls it.

The array step an env may offer is part of the env protocol, :class:`rlplug.registry.protocols.Env`. These
names stay as they are across rlplug releases; the modules behind them (``rlplug.core``) may move.
"""

from rlplug.core.observations import OBSERVATION, one_observation

__all__ = ["OBSERVATION", "one_observation"]
