"""``python -m rlplug``: the command line. Each command is a module of this package with ``add_commands``.

User errors end as one line on stderr and exit status 2; tracebacks are for bugs (or ``RLPLUG_DEBUG=1``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from rlplug.errors import PluginError, RlplugWarning, UserError, one_line

EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")  # torchrl prints INFO lines to stdout otherwise
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.strict_plugins:
        os.environ["RLPLUG_STRICT_PLUGINS"] = "1"
    if not getattr(warnings.showwarning, "one_line", False):
        warnings.showwarning = one_line_warnings(warnings.showwarning)
    try:
        return args.handler(args)
    except (UserError, PluginError) as error:
        if os.environ.get("RLPLUG_DEBUG") or isinstance(error, PluginError):
            original = error.original if isinstance(error, UserError) else None
            if original is not None:  # the traceback of what a plugin's factory raised
                raise error from original
            raise  # a PluginError escapes only in strict mode, which promises the traceback
        print(f"rlplug: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rlplug: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`rlplug list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as error:  # a full disk, a directory gone: say what and where, no traceback
        if os.environ.get("RLPLUG_DEBUG"):
            raise
        from rlplug.run.directory import remedy

        where = f"{error.filename}: " if error.filename else ""
        print(f"rlplug: error: {where}{error.strerror or error}; {remedy(error)}, then run the command again",
              file=sys.stderr)
        return EXIT_USAGE


def one_line_warnings(show):
    """``warnings.showwarning`` that prints rlplug's own warnings as one line, like its errors."""
    def show_warning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RlplugWarning):
            print(f"rlplug: warning: {one_line(str(message))}", file=sys.stderr, flush=True)
        else:
            show(message, category, filename, lineno, file, line)

    show_warning.one_line = True
    return show_warning


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlplug", description="RL components as plugins, trained from TOML recipes.")
    parser.add_argument("--strict-plugins", action="store_true",
                        help="fail (with a traceback) when a plugin fails to load, instead of skipping it")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for module in COMMAND_MODULES:  # each adds its subcommand(s) with a handler; imported lazily by the handler
        importlib.import_module(module).add_commands(commands)
    for sub in commands.choices.values():
        sub.add_argument("--strict-plugins", action="store_true", default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS)
    return parser


#: Modules with more commands: each has ``add_commands(subparsers)`` and keeps its heavy imports in handlers.
COMMAND_MODULES: tuple[str, ...] = ("rlplug.cli.list", "rlplug.cli.run", "rlplug.cli.show", "rlplug.cli.init",
                                   "rlplug.cli.eval", "rlplug.cli.plot", "rlplug.cli.tune", "rlplug.cli.export",
                                   "rlplug.cli.new_plugin", "rlplug.cli.set", "rlplug.cli.bench",
                                   "rlplug.cli.check_env", "rlplug.cli.record")
