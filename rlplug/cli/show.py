"""``rlplug show NAME``: everything about one component (summary, plugin, every parameter with its type,
bounds, default and description, from :mod:`rlplug.registry.docs`). Only the standard library and rich are
imported: ``rlplug`` imports this module for every command."""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap

from rlplug.registry.docs import ComponentDoc, describe


def add_commands(subparsers) -> None:
    """Adds ``show``."""
    show = subparsers.add_parser(
        "show", help="describe one component: summary, plugin, parameters with types, defaults and descriptions; "
                     "or a dataset's size, returns and env",
        description="Describe one component. NAME is a component name or alias (gae), KIND:NAME "
                    "(algorithm:ppo) where a name stands in several kinds, or plugin:name (rlplug:mlp). A directory "
                    "holding a Minari dataset (the --out of rlplug record) is described instead: its size, its "
                    "episodes' returns, its env and how its actions were chosen.")
    show.add_argument("name", metavar="NAME", help="NAME, KIND:NAME or PLUGIN:NAME (KIND:PLUGIN:NAME also works), "
                                                   "or a dataset's directory")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(handler=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rlplug.registry import get_registry

    folder = Path(args.name) if args.name else None
    if folder is not None and folder.is_dir() and any((folder / name).is_file() for name in DATASET_FILES):
        return show_dataset(folder, as_json=args.json)
    registry = get_registry()
    spec = find_component(registry, args.name)
    doc = describe(spec)
    if args.json:
        print(json.dumps(doc.as_json(), indent=2))
    else:
        from rich.console import Console

        console = Console(highlight=False)
        if console.is_terminal:
            print_rich(doc, console)
        else:
            sys.stdout.write(plain_text(doc))
    registry.report_failures()
    return 0


#: what makes a directory a Minari dataset for ``show``: its metadata, in minari's layout or in the folder itself
DATASET_FILES = ("data/metadata.json", "metadata.json")


def show_dataset(path, *, as_json: bool) -> int:
    """A dataset's size, returns and env (:class:`rlplug.plugins.datasets.minari_format.MinariData`)."""
    from rlplug.errors import UserError
    from rlplug.plugins.datasets.minari_format import MinariData

    try:
        import minari  # noqa: F401
    except ImportError:
        raise UserError(f"{path}: reading a Minari dataset needs minari: pip install \"rlplug[offline]\"") from None
    try:
        facts = MinariData(path, "").describe()
    except UserError as error:
        raise UserError(error.message) from None
    facts = {"path": str(path), **facts}
    if as_json:
        print(json.dumps(facts, indent=2))
        return 0
    behaviour = json.loads(facts["behaviour"]) if isinstance(facts.get("behaviour"), str) else None
    lines = [f"dataset: {path} (Minari id {facts['dataset_id']})",
             f"env: {facts['env'] or 'not named'}",
             f"size: {facts['episodes']} episodes, {facts['steps']} steps",
             f"return: mean {facts['return_mean']:.6g}, std {facts['return_std']:.4g}, min {facts['return_min']:.6g}, "
             f"max {facts['return_max']:.6g}",
             f"observations: {space(facts['observation_space'])}", f"actions: {space(facts['action_space'])}"]
    if facts.get("algorithm"):
        lines.append(f"recorded by: {facts['algorithm']}")
    if behaviour:
        lines.append("behaviour: " + ", ".join(f"{key} {value}" for key, value in behaviour.items()))
    print("\n".join(lines))
    return 0


def space(serialised) -> str:
    """A gymnasium space as minari serialises it (JSON), in a few words."""
    try:
        data = json.loads(serialised)
    except (TypeError, ValueError):
        return str(serialised)
    if data.get("type") == "Discrete":
        return f"Discrete({data.get('n')})"
    if data.get("type") == "Box":
        return f"Box of shape {data.get('shape')}, {data.get('dtype')}"
    return str(data.get("type", serialised))


# --- finding the component ------------------------------------------------------------------------------


def find_component(registry, text: str):
    """The component ``text`` names: ``name``, ``alias``, ``plugin:name``, ``KIND:name`` or ``KIND:plugin:name``.

    A bare name found in several kinds is a :class:`UserError` listing ``KIND:NAME`` for each; an unknown
    one is :meth:`Registry.lookup`'s own message for the kind with the closest name ("did you mean").
    """
    import difflib

    from rlplug.errors import ComponentError, UserError, did_you_mean
    from rlplug.registry.registry import KINDS, kind_of

    if not text or not text.strip():
        raise UserError("show needs a component name, e.g. python -m rlplug show gae")
    head, sep, rest = text.partition(":")
    if sep:
        try:
            kind = kind_of(head)
        except ComponentError:
            kind = None  # not a kind: a plugin name, as in rlplug:mlp
        if kind is not None:
            if not rest:
                raise UserError(f"'{text}': name the {kind} after the colon, e.g. {kind}:"
                                f"{(registry.names(kind) or ['NAME'])[0]}")
            return registry.lookup(kind, rest)
    found, ambiguous = [], []
    for kind in KINDS:
        try:
            found.append(registry.lookup(kind, text))
        except ComponentError as error:
            if error.message.startswith(f"'{text}' is ambiguous"):  # several plugins register it in this kind
                ambiguous.append(error)
    if len(found) == 1 and not ambiguous:
        return found[0]
    if found or ambiguous:
        if not found and len(ambiguous) == 1:
            raise ambiguous[0]  # two plugins, one kind: lookup's message already says to qualify the name
        kinds = [s.kind for s in found] + [_ambiguous_kind(e) for e in ambiguous]
        options = ", ".join(f"{k}:{text}" for k in sorted(set(kinds), key=KINDS.index))
        raise UserError(f"'{text}' names components of several kinds; ask for one as KIND:NAME: {options}")
    # Unknown everywhere: let lookup explain, in the kind whose names come closest.
    _, _, bare = text.rpartition(":")
    best_kind, best_score = None, 0.0
    for kind in KINDS:
        for spec in registry.specs[kind]:
            for candidate in (spec.name, *spec.aliases, spec.qualified_name):
                score = difflib.SequenceMatcher(None, text if ":" in candidate else bare, candidate).ratio()
                if score > best_score:
                    best_kind, best_score = kind, score
    if best_kind is not None and best_score >= 0.6:
        registry.lookup(best_kind, text)  # raises, with its "did you mean"
    plugin = text.rpartition(":")[0]
    for record in registry.failures():  # a failed plugin that would have provided it
        kind = next((k for k, name in record.names if name == bare and plugin in ("", record.name)), None)
        if kind is not None or (plugin and record.name == plugin):
            registry.lookup(kind or KINDS[0], text)  # raises: "needs plugin '...', which failed to load"
    everything = [n for kind in KINDS for n in registry.names(kind)]
    raise UserError(f"no component named '{text}'{did_you_mean(bare, everything)}; "
                    f"python -m rlplug list shows every installed component")


def _ambiguous_kind(error) -> str:
    match = re.search(r"register (\w+) '", error.message)
    return match.group(1) if match else "KIND"


# --- rendering ---------------------------------------------------------------------------------------


def _provider(spec) -> str:
    return f"plugin {spec.plugin} {spec.version} (qualified name {spec.qualified_name})"


def plain_text(doc: ComponentDoc, width: int = 100) -> str:
    """``show``'s output where stdout is no terminal: plain, aligned, wrapped, one parameter per block."""
    spec = doc.spec
    out = [f"{spec.name} ({spec.kind})"]
    if doc.summary:
        out += textwrap.wrap(doc.summary, width)
    out.append("")
    out.append(f"provided by: {_provider(spec)}")
    out.append(f"aliases:     {', '.join(spec.aliases) or 'none'}")
    if doc.context:
        out.append("context:     (filled in by rlplug, never set in a recipe)")
        out += [f"  {name}: {text}" for name, text in doc.context.items()]
    else:
        out.append("context:     none")
    if doc.body:
        out.append("")
        out += doc.body.splitlines()
    out.append("")
    if not doc.params:
        out.append("parameters: none")
    else:
        out.append("parameters (recipe keys):")
        name_width = max(len(p.name) for p in doc.params)
        type_width = min(40, max(len(p.type_text) for p in doc.params))
        for p in doc.params:
            out.append(f"  {p.name:<{name_width}}  {p.type_text:<{type_width}}  default: {p.default_text}")
            if p.description:
                out += textwrap.wrap(p.description, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(out) + "\n"


def print_rich(doc: ComponentDoc, console) -> None:
    from rich.table import Table
    from rich.text import Text

    spec = doc.spec
    title = Text(spec.name, style="bold")
    title.append(f"  {spec.kind}", style="cyan")
    console.print(title)
    if doc.summary:
        console.print(Text(doc.summary))
    console.print()
    facts = Table(show_header=False, box=None, pad_edge=False)
    facts.add_column(style="dim")
    facts.add_column()
    facts.add_row("provided by", Text(_provider(spec)))
    facts.add_row("aliases", Text(", ".join(spec.aliases) or "none"))
    facts.add_row("context", Text("(filled in by rlplug, never set in a recipe)" if doc.context else "none"))
    for name, text in doc.context.items():
        facts.add_row("", Text(f"{name}: {text}"))
    console.print(facts)
    if doc.body:
        console.print()
        console.print(Text(doc.body))
    console.print()
    table = Table(title="parameters (recipe keys)", title_justify="left", show_edge=False, pad_edge=False)
    for column in ("name", "type", "default", "description"):
        table.add_column(column, overflow="fold")
    for p in doc.params:
        table.add_row(Text(p.name, style="bold"), Text(p.type_text), Text(p.default_text), Text(p.description))
    if doc.params:
        console.print(table)
    else:
        console.print("parameters: none")
