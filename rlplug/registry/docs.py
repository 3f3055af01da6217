"""What a component says about itself, for ``rlplug show`` and ``rlplug init``: its summary and prose, and a
description of each parameter.

Descriptions come from the component's own source, nearest first: the ``#:`` comment above a parameter of
the factory's signature (or above the field of the config dataclass it is built from, its bases included),
then the factory's docstring: a Google ``Args:`` section, a NumPy ``Parameters`` section or Sphinx
``:param x:`` fields (read by ``docstring_parser``), or bullets ``- ``x``: text`` naming a parameter.
Only the standard library and ``docstring_parser`` are imported: ``rlplug show`` loads no torch.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import textwrap
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlplug.registry.schema import CONTEXT_NAMES, Schema, type_name


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
        return "unset" if self.default is None else inline_toml(self.default)

    def as_json(self) -> dict[str, Any]:
        data = {"name": self.name, "type": self.type, "constraints": self.constraints or None,
                "required": self.required, "description": self.description}
        if not self.required:
            data["default"] = plain_data(self.default)
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
                "aliases": list(spec.aliases),
                "context": [{"name": k, "description": v} for k, v in self.context.items()],
                "parameters": [p.as_json() for p in self.params]}


def describe(spec) -> ComponentDoc:
    """Everything ``show`` prints about ``spec``: summary, prose, and each parameter with its description."""
    schema = spec.schema
    factory = _unwrap(spec.factory)
    summary, body, described = split_docstring(inspect.getdoc(factory) or "", list(schema.params))
    comments = signature_comments(factory)
    config = getattr(factory, "config_class", None) or (factory if dataclasses.is_dataclass(factory) else None)
    if config is not None:
        comments = {**comments, **field_comments(config)}
    params = [ParamDoc(name, param.annotation, None if param.required else param.default, param.required,
                       tidy(comments.get(name) or described.get(name) or nested_note(param.annotation)))
              for name, param in schema.params.items()]
    params += own_key_docs(spec.kind)
    context = {name: CONTEXT_NAMES[name] for name in CONTEXT_NAMES if name in schema.context}
    return ComponentDoc(spec, summary_of(spec, summary), tidy_block(body), params, context)


def own_key_docs(kind: str) -> list[ParamDoc]:
    """The documented keys rlplug reads itself from every table of ``kind`` (an intrinsic reward's ``coef``,
    ``schedule``, ``decay``): fields of the kind's component class with a ``#:`` comment."""
    from rlplug.registry.components import COMPONENT_TYPES

    component = COMPONENT_TYPES.get(kind)
    if component is None:
        return []
    comments, defaults = field_comments(component), {f.name: f.default for f in dataclasses.fields(component)}
    return [ParamDoc(name, annotation, defaults.get(name), False, tidy(comments[name]))
            for name, annotation in component.own_keys.items() if name in comments]


def summary_of(spec, paragraph: str | None = None) -> str:
    """``spec``'s summary as prose: the docstring's whole first paragraph (``paragraph``, else read) where
    the plugin gave none, since the registry keeps only the docstring's first line, which may stop mid-sentence."""
    doc = inspect.getdoc(_unwrap(spec.factory)) or ""
    first_line = doc.strip().splitlines()[0] if doc.strip() else ""
    if spec.summary and spec.summary != first_line:  # given at registration: the plugin's own words
        return tidy(spec.summary)
    if paragraph is None:
        paragraph = inspect.cleandoc(doc).partition("\n\n")[0] if doc else ""
    return tidy(paragraph)


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (up to a full stop followed by a capital), for one-line listings."""
    match = re.search(r"(?<=[.!?])\s+(?=[A-Z])", text)
    return text[:match.start()] if match else text


def settings_docs(cls: type, values: Any) -> list[tuple[ParamDoc, Any]]:
    """Each field of a settings dataclass (``[run]``, ``[eval]``) with its ``#:`` comment and its value."""
    comments = field_comments(cls)
    return [(ParamDoc(p.name, p.annotation, p.default, p.required, tidy(comments.get(p.name, ""))),
             getattr(values, p.name)) for p in Schema.of(cls).params.values()]


def _unwrap(factory: Callable) -> Callable:
    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory


def nested_note(annotation: Any) -> str:
    """The description of a nested component parameter whose source says nothing about it."""
    kind = component_kind(annotation)
    return f"a nested {kind}: its name, or a table with 'use' and its parameters" if kind else ""


# -- '#:' comments --------------------------------------------------------------------------------------------

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
        if klass is not object:
            found.update(_own_field_comments(klass))
    return found


@functools.cache
def _own_field_comments(klass: type) -> dict[str, str]:
    """One class's own ``#:`` comments, read once: ``inspect.getsource`` parses the class's whole module each
    time (typing's, for every protocol's ``Protocol`` and ``Generic`` bases)."""
    try:
        source = inspect.getsource(klass)
    except Exception:  # no source (built in, frozen, __main__ in a REPL): documentation is best effort
        return {}
    return comments_in(_class_body(source))


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
    skip: set[int] = set()
    for child in node.body:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
            skip.update(range(first, (child.end_lineno or child.lineno) + 1))
    return [line for number, line in enumerate(lines, 1) if number not in skip]


def signature_comments(factory: Callable) -> dict[str, str]:
    """``#:`` comments above the parameters of a function's signature (the lines from ``def`` to its body)."""
    function = factory if inspect.isroutine(factory) else getattr(factory, "__init__", None)
    try:
        source = textwrap.dedent(inspect.getsource(function))  # type: ignore[arg-type]  # None: caught below
        tree = ast.parse(source)
    except Exception:  # no source, or none Python can parse on its own: documentation is best effort
        return {}
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None or not node.body:
        return {}
    lines = source.splitlines()
    return comments_in(lines[node.lineno - 1:node.body[0].lineno - 1])  # from `def` to the docstring or body


# -- docstrings -------------------------------------------------------------------------------------------

_BULLET = re.compile(r"^\s*[-*+]\s+`{0,2}(\w+)`{0,2}\s*:\s*(.*)$")


def split_docstring(doc: str, names: list[str]) -> tuple[str, str, dict[str, str]]:
    """``(summary, rest, {parameter: description})`` from a docstring: parameter sections (Google, NumPy,
    Sphinx) through ``docstring_parser``, and bullets ``- ``name``: text`` naming a parameter, are taken out
    of the rest."""
    import docstring_parser

    first, _, rest = inspect.cleandoc(doc).partition("\n\n") if doc else ("", "", "")
    summary = " ".join(first.split())
    parsed = docstring_parser.parse(rest)
    described = {p.arg_name.lstrip("*"): " ".join((p.description or "").split()) for p in parsed.params}
    joint = "\n\n" if parsed.blank_after_short_description else "\n"
    rest = joint.join(part for part in (parsed.short_description, parsed.long_description) if part)
    for meta in parsed.meta:  # the other sections (Notes, Returns...) stay prose
        if not isinstance(meta, docstring_parser.DocstringParam) and meta.description:
            rest += f"\n\n{meta.args[0].capitalize()}: {meta.description}"
    body: list[str] = []
    lines = rest.splitlines()
    i = 0
    while i < len(lines):
        bullet = _BULLET.match(lines[i])
        if bullet and bullet.group(1) in names:
            indent = len(lines[i]) - len(lines[i].lstrip())
            text, i = bullet.group(2), i + 1
            while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > indent:
                text, i = f"{text} {lines[i].strip()}", i + 1
            described[bullet.group(1)] = text.strip()
            continue
        body.append(lines[i])
        i += 1
    return summary, "\n".join(body).strip("\n"), {k: v for k, v in described.items() if v}


_ROLE = re.compile(r":[\w:]+:`~?([^`]+)`")


def tidy(text: str) -> str:
    """One line of prose: reST roles and double backticks made plain, whitespace collapsed."""
    text = _ROLE.sub(r"`\1`", text or "").replace("``", "`")
    return " ".join(text.split())


def tidy_block(text: str) -> str:
    text = _ROLE.sub(r"`\1`", text or "").replace("``", "`")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# -- annotations ----------------------------------------------------------------------------------------


def component_kind(annotation: Any) -> str | None:
    """The kind of component an annotation asks for (``network`` for ``Network | None``), or None."""
    from rlplug.registry.components import Component

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
    """The bounds an ``Annotated`` type carries, as text: ``>= 1``, ``> 0, <= 1`` (other checks say nothing)."""
    import types

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return ", ".join(filter(None, (constraints_of(a) for a in args)))
    if origin is not typing.Annotated:
        return ""
    parts = []
    for rule in args[1:]:
        if hasattr(rule, "fn"):  # its rule is in its error message; the function's name means nothing to a user
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


# -- values -----------------------------------------------------------------------------------------------


def plain_data(value: Any) -> Any:
    """``value`` as TOML and JSON data, for display (:func:`rlplug.registry.components.as_data`)."""
    from rlplug.registry.components import as_data

    return as_data(value, for_display=True)


def inline_toml(value: Any) -> str:
    """``value`` as a TOML value on one line (tables inline), for display."""
    import tomli_w

    value = plain_data(value)
    if isinstance(value, list):
        return "[" + ", ".join(inline_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{tomli_w.dumps({k: 0}).split(' = ')[0]} = {inline_toml(v)}" for k, v in value.items()]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    return tomli_w.dumps({"v": value})[len("v = "):].strip()
