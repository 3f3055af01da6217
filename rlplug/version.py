"""rlplug's version, in a module of its own: recipes record it, and nothing it imports imports them."""

__version__ = "0.1.0"
