"""An example rlplug plugin: the ``corridor`` env and the ``mc-return`` estimator.

rlplug finds it through the ``rlplug`` entry point in ``pyproject.toml``, which names
:mod:`rlplug_example_plugin.plugin`; the env and estimator themselves live in :mod:`.corridor` and
:mod:`.estimators` and are imported only when a recipe builds them.
"""

__version__ = "0.1.0"
