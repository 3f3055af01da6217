"""``python -m rlplug``: list what is installed, run a recipe.

User errors end as one line on stderr and exit status 2; tracebacks are for bugs (or ``RLPLUG_DEBUG=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rlplug.errors import PluginError, UserError

EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")  # torchrl prints INFO lines to stdout otherwise
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.strict_plugins:
        os.environ["RLPLUG_STRICT_PLUGINS"] = "1"
    try:
        return args.handler(args)
    except (UserError, PluginError) as error:
        if os.environ.get("RLPLUG_DEBUG") or isinstance(error, PluginError):
            raise  # a PluginError escapes only in strict mode, which promises the traceback
        print(f"rlplug: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rlplug: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`rlplug list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlplug", description="RL components as plugins, trained from TOML recipes.")
    parser.add_argument("--strict-plugins", action="store_true",
                        help="fail (with a traceback) when a plugin fails to load, instead of skipping it")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", help="show every installed component, grouped by kind")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(handler=cmd_list)

    run = commands.add_parser("run", help="train from a recipe")
    run.add_argument("recipe", type=Path, help="the recipe TOML file")
    run.add_argument("--out", type=Path, help="run directory (default: a fresh one under runs/)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a recipe value, e.g. --set algorithm.lr=3e-4 (repeatable)")
    run.set_defaults(handler=cmd_run)
    for sub in (listing, run):
        sub.add_argument("--strict-plugins", action="store_true", default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS)
    return parser


def report_plugin_failures(registry) -> None:
    for plugin in registry.failures():
        print(f"rlplug: warning: plugin '{plugin.name}' ({plugin.source}) was skipped: {plugin.error}",
              file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    from rlplug.registry import get_registry
    from rlplug.registry.registry import KINDS

    registry = get_registry()
    if args.json:
        data = {
            "components": {
                kind: [{"name": s.name, "qualified_name": s.qualified_name, "plugin": s.plugin,
                        "version": s.version, "summary": s.summary, "aliases": list(s.aliases),
                        "parameters": s.schema.describe()} for s in registry.specs[kind]]
                for kind in KINDS
            },
            "plugins": [{"name": p.name, "version": p.version, "source": p.source, "components": p.components,
                         "error": p.error} for p in registry.plugins],
        }
        print(json.dumps(data, indent=2))
        report_plugin_failures(registry)
        return 0

    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    for kind in KINDS:
        table = Table(title=f"{kind}s", title_justify="left", show_edge=False, pad_edge=False)
        for column in ("name", "plugin", "summary"):
            table.add_column(column)
        for spec in sorted(registry.specs[kind], key=lambda s: (s.name, s.plugin)):
            aliases = f" ({', '.join(spec.aliases)})" if spec.aliases else ""
            table.add_row(spec.name + aliases, f"{spec.plugin} {spec.version}", spec.summary)
        console.print(table)
        console.print()
    report_plugin_failures(registry)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from rlplug import recipe as recipes
    from rlplug.registry import get_registry

    report_plugin_failures(get_registry())
    recipe = recipes.load(args.recipe, args.overrides)
    from rlplug.trainer import Run, default_run_dir  # heavy imports only once the recipe is known to be good

    run_dir = args.out or default_run_dir(args.recipe)
    try:
        run = Run.build(recipe, run_dir)
    except UserError as error:
        raise error.located(file=str(args.recipe)) from None
    summary = run.train()
    print(f"run directory: {run_dir}")
    return 0 if summary.get("status") == "finished" else 1
