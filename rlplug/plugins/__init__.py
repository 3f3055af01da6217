"""Built-in plugins: registered through the very same hooks as third-party ones.

Each module keeps its imports of torch and TorchRL inside the factories, so that ``rlplug list`` stays
quick and a recipe is validated before any heavy import.
"""
