"""``rlplug list``: every installed component by kind, with the plugin (and version) providing it."""

from __future__ import annotations

import argparse
import json


def add_commands(subparsers) -> None:
    """Adds ``list``."""
    listing = subparsers.add_parser("list", help="show every installed component, grouped by kind")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(handler=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    from rlplug.errors import plural
    from rlplug.registry import get_registry
    from rlplug.registry.docs import first_sentence, summary_of
    from rlplug.registry.registry import KINDS

    registry = get_registry()
    if args.json:
        data = {
            "components": {
                kind: [{"name": s.name, "qualified_name": s.qualified_name, "plugin": s.plugin,
                        "version": s.version, "summary": summary_of(s), "aliases": list(s.aliases),
                        "parameters": parameters(s)} for s in registry.specs[kind]]
                for kind in KINDS
            },
            "plugins": [{"name": p.name, "version": p.version, "source": p.source, "components": p.components,
                         "error": p.error} for p in registry.plugins],
        }
        print(json.dumps(data, indent=2))
        registry.report_failures()
        return 0

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    for kind in KINDS:
        table = Table(title=plural(kind), title_justify="left", show_edge=False, pad_edge=False)
        for column in ("name", "plugin", "summary"):
            table.add_column(column)
        for spec in sorted(registry.specs[kind], key=lambda s: (s.name, s.plugin)):
            aliases = f" ({', '.join(spec.aliases)})" if spec.aliases else ""
            # Text, not markup: a summary's "[64, 64]" is text, not a rich style. Its first whole sentence (the
            # registry keeps the docstring's first line, which may stop mid-sentence), code quotes dropped
            summary = first_sentence(summary_of(spec)).replace("`", "")
            table.add_row(Text(spec.name + aliases), Text(f"{spec.plugin} {spec.version}"), Text(summary))
        console.print(table)
        console.print()
    registry.report_failures()
    return 0


def parameters(spec) -> list[dict]:
    """Each parameter's name, type and default (as JSON data: ``[64, 64]``, not a Python repr)."""
    from rlplug.registry.docs import plain_data
    from rlplug.registry.schema import type_name

    return [{"name": p.name, "type": type_name(p.annotation),
             **({} if p.required else {"default": plain_data(p.default)})}
            for p in spec.schema.params.values()]
