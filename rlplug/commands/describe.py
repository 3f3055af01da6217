"""``rlplug show`` (everything about one component) and ``rlplug init`` (a complete, commented recipe).

Both read what a component declares and nothing else: its factory's signature (the schema), its docstring
(summary, prose, and an ``Args:`` / NumPy ``Parameters`` / ``:param x:`` section, or ``- ``x``: ...``
bullets), ``#:`` comments above the parameters of a factory's signature, and, for components configured by
a dataclass (the built-in algorithms, :func:`rlplug.algorithms.config.factory_for`), the ``#:`` comment
above each field of that class and its bases. ``init`` builds its recipe through the same validation as
``rlplug run`` (:func:`rlplug.recipe.validate`), so every default it writes is the one a run would use.

Only the standard library is imported at module level: ``rlplug.cli`` imports this module for every command.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import math
import re
import sys
import textwrap
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# --- the command line ----------------------------------------------------------------------------------


def add_commands(subparsers) -> None:
    """Adds ``show`` and ``init``."""
    show = subparsers.add_parser(
        "show", help="describe one component: summary, plugin, parameters with types, defaults and descriptions",
        description="Describe one component. NAME is a component name or alias (gae), KIND:NAME "
                    "(algorithm:ppo) where a name stands in several kinds, or plugin:name (rlplug:mlp).")
    show.add_argument("name", metavar="NAME", help="NAME, KIND:NAME or PLUGIN:NAME (KIND:PLUGIN:NAME also works)")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(handler=cmd_show)

    init = subparsers.add_parser(
        "init", help="print a complete, commented recipe with every default filled in",
        description="Print (to stdout) a recipe for ALGORITHM on ENV with every key at its default, each with "
                    "a comment giving its type and meaning. It runs as it is: "
                    "python -m rlplug init ppo --env CartPole-v1 > my.toml && python -m rlplug run my.toml")
    init.add_argument("algorithm", metavar="ALGORITHM", help="an algorithm name (python -m rlplug list)")
    init.add_argument("--env", required=True, metavar="ENV",
                      help="a gymnasium id (CartPole-v1), or the name of a registered env component (corridor)")
    init.add_argument("--network", metavar="NETWORK",
                      help="the network for every network the algorithm takes (policy, critic); "
                           "default: the algorithm's own defaults")
    init.set_defaults(handler=cmd_init)


def cmd_show(args: argparse.Namespace) -> int:
    from rlplug.cli import report_plugin_failures
    from rlplug.registry import get_registry

    registry = get_registry()
    spec = find_component(registry, args.name)
    doc = describe(spec)
    if args.json:
        print(json.dumps(doc.as_json(), indent=2, default=repr))
    else:
        from rich.console import Console

        console = Console(highlight=False)
        if console.is_terminal:
            print_rich(doc, console)
        else:
            sys.stdout.write(plain_text(doc))
    report_plugin_failures(registry)
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from rlplug.cli import report_plugin_failures
    from rlplug.registry import get_registry

    registry = get_registry()
    report_plugin_failures(registry)
    sys.stdout.write(init_recipe(args.algorithm, args.env, network=args.network, registry=registry))
    return 0


# --- finding the component ------------------------------------------------------------------------------


def find_component(registry, text: str):
    """The component ``text`` names: ``name``, ``alias``, ``plugin:name``, ``KIND:name`` or ``KIND:plugin:name``.

    A bare name found in several kinds is a :class:`UserError` listing ``KIND:NAME`` for each; an unknown
    one is :meth:`Registry.lookup`'s own message for the kind with the closest name ("did you mean").
    """
    import difflib

    from rlplug.errors import ComponentError, UserError
    from rlplug.registry.registry import KINDS, kind_of
    from rlplug.suggest import did_you_mean

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
    failed = [p for p in registry.failures() if plugin and p.name == plugin]
    if failed:
        registry.lookup(KINDS[0], text)  # raises: "needs plugin '...', which failed to load"
    everything = [n for kind in KINDS for n in registry.names(kind)]
    raise UserError(f"no component named '{text}'{did_you_mean(bare, everything)}; "
                    f"python -m rlplug list shows every installed component")


def _ambiguous_kind(error) -> str:
    match = re.search(r"register (\w+) '", error.message)
    return match.group(1) if match else "KIND"


# --- what a component says about itself ------------------------------------------------------------------


@dataclass
class ParamDoc:
    """One recipe key of a component, as ``show`` and ``init`` present it."""

    name: str
    annotation: Any
    default: Any
    required: bool
    description: str = ""

    @property
    def type(self) -> str:
        from rlplug.registry.params import type_name

        return type_name(self.annotation)

    @property
    def constraints(self) -> str:
        return constraints_of(self.annotation)

    @property
    def type_text(self) -> str:
        return f"{self.type} ({self.constraints})" if self.constraints else self.type

    @property
    def default_text(self) -> str:
        if self.required:
            return "required"
        if self.default is None:
            return "unset"
        try:
            return toml_value(self.default)
        except TypeError:  # not a TOML value (a plugin's object default): show what Python shows
            return repr(self.default)

    def as_json(self) -> dict[str, Any]:
        data = {"name": self.name, "type": self.type, "constraints": self.constraints or None,
                "required": self.required, "description": self.description}
        if not self.required:
            data["default"] = jsonable(self.default)
        return data


@dataclass
class ComponentDoc:
    spec: Any
    summary: str
    body: str
    params: list[ParamDoc]
    context: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        spec = self.spec
        return {"kind": spec.kind, "name": spec.name, "qualified_name": spec.qualified_name, "plugin": spec.plugin,
                "version": spec.version, "summary": self.summary, "description": self.body,
                "aliases": list(spec.aliases), "context": [{"name": k, "description": v} for k, v in self.context.items()],
                "parameters": [p.as_json() for p in self.params]}


def describe(spec) -> ComponentDoc:
    """Everything ``show`` prints about ``spec``: summary, prose, and each parameter with its description."""
    from rlplug.registry.params import CONTEXT_NAMES

    schema = spec.schema
    names = list(schema.params)
    factory = _unwrap(spec.factory)
    docstring = inspect.getdoc(factory) or ""
    summary, body, described = split_docstring(docstring, names)
    comments = signature_comments(factory)
    config = config_class_of(factory, names)
    if config is not None:
        comments = {**comments, **field_comments(config)}
    params = []
    for name, param in schema.params.items():
        text = comments.get(name) or described.get(name) or _fallback(spec, name, param.annotation)
        params.append(ParamDoc(name, param.annotation, None if param.required else param.default, param.required,
                               tidy(text)))
    context = {name: CONTEXT_NAMES[name] for name in CONTEXT_NAMES if name in schema.context}
    return ComponentDoc(spec, tidy(spec.summary or summary), tidy_block(body), params, context)


def _unwrap(factory: Callable) -> Callable:
    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory


def config_class_of(factory: Callable, names: list[str]) -> type | None:
    """The dataclass a factory is configured by: the factory itself, or one its closure holds whose fields
    include every parameter (``factory_for`` closes over ``config_class``)."""
    if isinstance(factory, type) and dataclasses.is_dataclass(factory):
        return factory
    for cell in getattr(factory, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, type) and dataclasses.is_dataclass(value):
            if set(names) <= {f.name for f in dataclasses.fields(value)}:
                return value
    return None


#: A ``#:`` documentation comment (Sphinx autodoc's convention), on its own line or after the code.
_DOC_COMMENT = re.compile(r"^\s*#:\s?(.*)$")
_TRAILING_DOC_COMMENT = re.compile(r"#:\s?(.*)$")
#: A dataclass field or a signature parameter at the start of a line: ``name: ...``, ``name = ...``, ``name,``.
_DECLARATION = re.compile(r"^\s*\*{0,2}([A-Za-z_]\w*)\s*(?:[:=,)]|$)")


def comments_in(lines: list[str]) -> dict[str, str]:
    """``name -> text`` for each declaration with ``#:`` comment lines right above it (or one after it)."""
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in lines:
        comment = _DOC_COMMENT.match(line)
        if comment:
            pending.append(comment.group(1).strip())
            continue
        declaration = _DECLARATION.match(line)
        if declaration:
            trailing = _TRAILING_DOC_COMMENT.search(line)
            text = " ".join(pending) or (trailing.group(1).strip() if trailing else "")
            if text:
                found[declaration.group(1)] = text
        pending = []
    return found


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment above each field of ``cls`` and of its bases (the nearest class's wins)."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        try:
            source = inspect.getsource(klass)
        except Exception:  # no source (built in, frozen, __main__ in a REPL): documentation is best effort
            continue
        found.update(comments_in(_class_body(source)))
    return found


def _class_body(source: str) -> list[str]:
    """The lines of a class's own body, without nested classes or functions (their locals are no fields)."""
    lines = textwrap.dedent(source).splitlines()
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return lines
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.ClassDef):
        return lines
    skip = set()
    for child in node.body:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
            skip.update(range(first, (child.end_lineno or child.lineno) + 1))
    return [line for number, line in enumerate(lines, 1) if number not in skip]


def signature_comments(factory: Callable) -> dict[str, str]:
    """``#:`` comments above the parameters of a function's signature (the lines from ``def`` to its body)."""
    function = factory if inspect.isroutine(factory) else getattr(factory, "__init__", None)
    try:
        source = textwrap.dedent(inspect.getsource(function))
        tree = ast.parse(source)
    except Exception:  # no source, or none Python can parse on its own: documentation is best effort
        return {}
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None or not node.body:
        return {}
    lines = source.splitlines()
    return comments_in(lines[node.lineno - 1:node.body[0].lineno - 1])  # from `def` to the docstring or body


_GOOGLE_HEADERS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
                   "other parameters", "other params"}
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?::\s*.*)?$")
_SPHINX_PARAM = re.compile(r"^:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:\s*(.*)$")
_SPHINX_OTHER = re.compile(r"^:(?:type|rtype|returns?|raises?|yields?|except|exception)\b[^:]*:")
_BULLET = re.compile(r"^[-*+]\s+`{0,2}(\w+)`{0,2}\s*:\s*(.*)$")


def split_docstring(doc: str, names: list[str]) -> tuple[str, str, dict[str, str]]:
    """``(summary, rest, {parameter: description})`` from a docstring.

    Parameter descriptions come from a Google ``Args:`` section, a NumPy ``Parameters`` section, Sphinx
    ``:param name:`` fields, or bullets ``- ``name``: text`` naming a parameter; they are taken out of the rest.
    """
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    i, summary = 0, []
    while i < len(lines) and lines[i].strip():
        summary.append(lines[i].strip())
        i += 1
    described: dict[str, str] = {}
    body: list[str] = []
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        indent = _indent(line)
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if stripped.lower() in ("parameters", "other parameters") and following and set(following) == {"-"}:
            i = _numpy_section(lines, i + 2, indent, described)
            continue
        if stripped.endswith(":") and stripped[:-1].strip().lower() in _GOOGLE_HEADERS:
            i = _google_section(lines, i + 1, indent, described)
            continue
        sphinx = _SPHINX_PARAM.match(stripped)
        bullet = _BULLET.match(stripped)
        if sphinx or (bullet and bullet.group(1) in names):
            match = sphinx or bullet
            i, text = _continued(lines, i + 1, indent, match.group(2))
            described[match.group(1)] = text
            continue
        if _SPHINX_OTHER.match(stripped):
            i, _ = _continued(lines, i + 1, indent, "")
            continue
        body.append(line)
        i += 1
    return " ".join(summary), "\n".join(body).strip("\n"), {k: v for k, v in described.items() if v}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _continued(lines: list[str], i: int, indent: int, text: str) -> tuple[int, str]:
    """Append the lines indented deeper than ``indent`` (a description's continuation) to ``text``."""
    while i < len(lines) and lines[i].strip() and _indent(lines[i]) > indent:
        text = f"{text} {lines[i].strip()}"
        i += 1
    return i, text.strip()


def _google_section(lines: list[str], i: int, header_indent: int, out: dict[str, str]) -> int:
    entry_indent, current = None, None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        indent = _indent(line)
        if indent <= header_indent:
            break
        if entry_indent is None or indent <= entry_indent:
            entry_indent = indent
            match = _GOOGLE_ENTRY.match(line.strip())
            current = match.group(1) if match else None
            if current:
                out[current] = match.group(2).strip()
        elif current:
            out[current] = f"{out[current]} {line.strip()}".strip()
        i += 1
    return i


def _numpy_section(lines: list[str], i: int, header_indent: int, out: dict[str, str]) -> int:
    current = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        underline = lines[i + 1].strip() if i + 1 < len(lines) else ""
        indent = _indent(line)
        if indent <= header_indent and underline and set(underline) <= set("-="):
            break  # the next section
        if indent <= header_indent:
            match = _NUMPY_ENTRY.match(line.strip())
            if not match:
                break
            current = match.group(1)
            out.setdefault(current, "")
        elif current:
            out[current] = f"{out[current]} {line.strip()}".strip()
        i += 1
    return i


_ROLE = re.compile(r":[\w:]+:`~?([^`]+)`")


def tidy(text: str) -> str:
    """One line of prose: reST roles and double backticks made plain, whitespace collapsed."""
    text = _ROLE.sub(r"`\1`", text or "").replace("``", "`")
    return " ".join(text.split())


def tidy_block(text: str) -> str:
    text = _ROLE.sub(r"`\1`", text or "").replace("``", "`")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


#: What built-in recipe settings and component parameters mean, for those whose source documents them nowhere
#: (no ``#:`` comment, no docstring entry). Whatever the source says wins: a ``#:`` comment added to
#: ``rlplug/recipe.py``, ``rlplug/algorithms/config.py`` or a plugin factory makes its entry here unused.
BUILTIN_NOTES: dict[str, dict[str, str]] = {
    "logger": {
        "every_seconds": 'seconds between plain progress lines when the output is no terminal',
        "live": 'a live progress bar (unset: only on a terminal)',
        "filename": "the file's name in the run directory",
    },
}


def _fallback(spec, name: str, annotation: Any) -> str:
    """A description where the component's source gives none."""
    from rlplug.registry.manager import BUILTIN_PLUGIN

    notes = BUILTIN_NOTES.get(spec.kind, {}) if spec.plugin == BUILTIN_PLUGIN else {}
    if name in notes:
        return notes[name]
    kind = component_kind(annotation)
    if kind:
        return f"a nested {kind}: its name, or a table with 'use' and its parameters"
    return ""


def component_kind(annotation: Any) -> str | None:
    """The kind of component an annotation asks for (``network`` for ``Network | None``), or None."""
    from rlplug.components import Component

    for option in _options(annotation):
        if isinstance(option, type) and issubclass(option, Component):
            return option.kind
    return None


def _options(annotation: Any) -> list[Any]:
    """The plain types an annotation stands for: Annotated unwrapped, unions flattened."""
    import types

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _options(args[0])
    if origin in (typing.Union, types.UnionType):
        return [o for a in args for o in _options(a)]
    return [annotation]


def constraints_of(annotation: Any) -> str:
    """The checks an ``Annotated`` type carries, as text: ``>= 1``, ``> 0, <= 1``, ``checked by fn``."""
    import types

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return ", ".join(filter(None, (constraints_of(a) for a in args)))
    if origin is not typing.Annotated:
        return ""
    parts = []
    for rule in args[1:]:
        if hasattr(rule, "fn"):
            parts.append(f"checked by {getattr(rule.fn, '__name__', 'a function')}")
            continue
        for attr, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            bound = getattr(rule, attr, None)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool):
                parts.append(f"{symbol} {_number(bound)}")
    return ", ".join(parts)


def _number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return str(value)


# --- show: rendering --------------------------------------------------------------------------------------


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


# --- values as TOML ------------------------------------------------------------------------------------


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else toml_string(key)


def toml_string(text: str) -> str:
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """``value`` as a TOML value on one line (tables inline); None-valued table entries are left out."""
    from rlplug.components import Component

    if isinstance(value, Component):
        value = value.resolved()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = [f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as TOML")


def jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


# --- init --------------------------------------------------------------------------------------------------


def init_recipe(algorithm: str, env: str, *, network: str | None = None, registry=None) -> str:
    """A complete recipe for ``algorithm`` on ``env`` with every default written out and commented.

    Built as ``{"use": name}`` tables and validated exactly as ``rlplug run`` validates a recipe; the text
    is parsed and validated once more before it is returned, so what comes out runs as it is.
    """
    import tomllib

    from rlplug import __version__
    from rlplug.components import Env
    from rlplug.errors import ComponentError, UserError
    from rlplug.recipe import EvalSettings, RunSettings, validate
    from rlplug.registry import get_registry, resolve

    registry = registry or get_registry()
    algorithm_spec = registry.lookup("algorithm", algorithm)
    try:
        registry.lookup("env", env)
        env_table: dict[str, Any] = {"use": env}  # a registered env component, e.g. a plugin's
    except ComponentError:
        env_table = {"use": "gym", "id": env}
    try:
        resolve(Env, env_table, registry=registry)
    except UserError as error:
        raise UserError(f"--env {env}: {error.message}") from None
    algorithm_table: dict[str, Any] = {"use": algorithm}
    if network is not None:
        try:
            registry.lookup("network", network)
        except UserError as error:
            raise UserError(f"--network: {error.message}") from None
        for name, param in algorithm_spec.schema.params.items():
            if component_kind(param.annotation) == "network" and param.default is not None:
                algorithm_table[name] = {"use": network}
    missing = [name for name, param in algorithm_spec.schema.params.items() if param.required]
    if missing:
        raise UserError(f"algorithm '{algorithm_spec.name}' has keys without defaults ({', '.join(missing)}); "
                        f"python -m rlplug show algorithm:{algorithm_spec.name} says what they take")
    recipe = validate({"env": env_table, "algorithm": algorithm_table}, file=f"init {algorithm} --env {env}")

    command = f"python -m rlplug init {algorithm} --env {env}" + (f" --network {network}" if network else "")
    writer = _RecipeWriter(registry)
    writer.comment(f"{algorithm_spec.name} on {env}: a recipe with every key at its default (rlplug {__version__}).")
    writer.comment(f"Written by: {command}")
    writer.comment("Run it with: python -m rlplug run THIS_FILE.toml [--out DIR] [--set KEY=VALUE ...]")
    writer.comment("Above each key: its type (and bounds), then what it does. A key that is unset by default is")
    writer.comment("shown commented out (TOML has no null): leaving it out keeps it unset.")
    writer.comment("python -m rlplug show NAME describes any component; python -m rlplug list shows them all.")
    writer.blank()
    writer.settings("run", recipe.run, RunSettings, "how long to train, seeds, device and checkpoints")
    writer.settings("eval", recipe.eval, EvalSettings, "evaluation during and at the end of training")
    writer.component("env", recipe.env, role="the environment")
    writer.component("algorithm", recipe.algorithm, role="the algorithm; its nested components follow its keys")
    writer.component("runner", recipe.runner, role="where experience is collected: 'local' (this process) or "
                     "'ray' (workers; pip install \"rlplug[ray]\")")
    for logger in recipe.loggers:
        writer.component("loggers", logger, role="one logger (one [[loggers]] table each)", array=True)
    text = writer.text()

    # What comes out must run as it is and mean the same recipe; anything else is a bug in this module.
    if validate(tomllib.loads(text), file="<init>").resolved() != recipe.resolved():
        raise RuntimeError("rlplug init wrote a recipe that reads back differently; please report it")
    return text


class _RecipeWriter:
    """TOML text with a comment line (type, description) above every key, tables after their parent's keys."""

    def __init__(self, registry, width: int = 100):
        self.registry, self.width, self.lines = registry, width, []

    def text(self) -> str:
        return "\n".join(self.lines).rstrip("\n") + "\n"

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    def comment(self, text: str) -> None:
        for line in textwrap.wrap(text, self.width - 2, break_long_words=False, break_on_hyphens=False) or [""]:
            self.lines.append(f"# {line}".rstrip())

    def key(self, param: ParamDoc, value: Any) -> None:
        about = param.type_text + (f": {param.description}" if param.description else "")
        self.comment(about)
        if value is None:
            self.lines.append(f"# {toml_key(param.name)} =   (unset by default; TOML has no null, so the key is left out)")
            return
        try:
            self.lines.append(f"{toml_key(param.name)} = {toml_value(value)}")
        except TypeError:  # a plugin default TOML cannot spell: leaving the key out keeps that default
            self.lines.append(f"# {toml_key(param.name)} =   (default {type(value).__name__}, not expressible in "
                              f"TOML, so the key is left out)")

    def settings(self, name: str, values: Any, cls: type, about: str) -> None:
        from rlplug.registry.params import Schema

        comments = field_comments(cls)
        self.blank()
        self.comment(f"[{name}]: {about}")
        self.lines.append(f"[{name}]")
        for param in Schema.of(cls).params.values():
            text = comments.get(param.name) or BUILTIN_NOTES["settings"].get(param.name, "")
            doc = ParamDoc(param.name, param.annotation, param.default, param.required, tidy(text))
            self.key(doc, getattr(values, param.name))

    def component(self, header: str, component: Any, *, role: str, array: bool = False,
                  about: ParamDoc | None = None) -> None:
        from rlplug.components import Component

        spec = component.spec
        doc = describe(spec)
        self.blank()
        if about is not None:
            self.comment(f"{about.name} ({about.type_text})" + (f": {about.description}" if about.description else ""))
        else:
            self.comment(f"[{'[' if array else ''}{header}{']' if array else ''}]: {role}")
        self.lines.append(f"[[{header}]]" if array else f"[{header}]")
        self.comment(f"{spec.kind} '{spec.name}' from plugin {spec.plugin} {spec.version}"
                     + (f": {doc.summary}" if doc.summary else ""))
        self.lines.append(f"use = {toml_string(self._use_name(spec))}")
        nested = []
        for param in doc.params:
            value = component.params.get(param.name)
            if isinstance(value, Component):
                nested.append((param, value))
                continue
            self.key(param, value)
        for param, value in nested:
            self.component(f"{header}.{toml_key(param.name)}", value, role=param.name, about=param)

    def _use_name(self, spec) -> str:
        """The bare name where it is unambiguous, else the qualified one."""
        try:
            if self.registry.lookup(spec.kind, spec.name) is spec:
                return spec.name
        except Exception:  # ambiguous between plugins
            pass
        return spec.qualified_name
