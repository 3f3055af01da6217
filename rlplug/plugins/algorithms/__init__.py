"""Built-in algorithms, each a folder of its own that registers itself as a plugin's package would (rlplug's
registry loads every sub-package here as a built-in plugin module: :data:`rlplug.registry.manager.BUILTIN_FOLDERS`).
A folder holds the algorithm's config dataclass (its fields are the recipe table; see
:func:`rlplug.plugins.algorithms.common.factory_for`), the factories of the losses that serve it alone, and their
registration, torch-free in its ``__init__.py``; its class, rlplug's loss and the builds of TorchRL's in
``algorithm.py``, imported when built.

What a family shares stays in the family's package, which registers nothing: ``onpolicy/`` (collect a batch, then
learn from it over epochs of minibatches) and ``offpolicy/`` (store transitions in a replay buffer, learn from
samples), the bases of the algorithm kit, :mod:`rlplug.algorithms`. The losses that serve the whole on-policy family
are :mod:`rlplug.plugins.losses`'.
"""
