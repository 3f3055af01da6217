"""Subcommands beyond list/run/resume, one module each; :data:`rlplug.cli.COMMAND_MODULES` names them."""
