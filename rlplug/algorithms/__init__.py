"""Algorithm implementations; the plugin module :mod:`rlplug.plugins.algorithms` registers them."""
