"""(being written)"""


def add_commands(subparsers) -> None:
    """Adds this module's subcommands."""
