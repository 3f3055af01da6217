"""rlplug: TorchRL components behind a plugin registry, trained from declarative TOML recipes.

The public face: :data:`hookimpl` to write plugins, :func:`make` to build one component, the component
annotations (:class:`Network`, :class:`Estimator`, ...) and parameter checks (:class:`Range`,
:class:`Check`) a factory signature may use, and :class:`UserError`.
"""

from rlplug.errors import UserError
from rlplug.registry import get_registry
from rlplug.registry.components import (
    Algorithm,
    Component,
    Dataset,
    Env,
    Estimator,
    Logger,
    Loss,
    Network,
    Noise,
    Preprocessor,
    ReplayBuffer,
    Runner,
    Transform,
)
from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import CONTEXT_NAMES, Check, Range, Unbounded
from rlplug.version import __version__


def __getattr__(name: str):
    if name == "make":
        from rlplug.core.make import make

        return make
    if name == "Agent":  # imported on first use: it brings torch and TorchRL, which `rlplug list` does without
        from rlplug.agent import Agent

        return Agent
    raise AttributeError(f"module 'rlplug' has no attribute '{name}'")


__all__ = [
    "Agent", "__version__", "hookimpl", "make", "get_registry", "UserError", "Range", "Check", "Unbounded",
    "CONTEXT_NAMES",
    "Component", "Env", "Algorithm", "Estimator", "Logger", "Network", "ReplayBuffer", "Noise", "Preprocessor",
    "Runner", "Loss", "Transform", "Dataset",
]
