"""The plugin guide's contract sections, written from the protocols (:mod:`rlplug.registry.protocols`), so that
what the guide tells a plugin author and what rlplug checks have one source.

Each section sits in docs/writing-plugins.md between ``<!-- contract:KIND -->`` and ``<!-- /contract:KIND -->``
and lists the protocol's members, required then optional, each with its signature and docstring.
``python -m rlplug.registry.guide docs/writing-plugins.md`` rewrites them after a protocol changes (``--check``:
exit 1 where the file differs); the suite checks that the file is what this module writes."""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

from rlplug.registry import protocols
from rlplug.registry.callbacks import CallbackRun
from rlplug.registry.conformance import members
from rlplug.registry.docs import field_comments, tidy

#: each section's name in the guide -> the protocol it is written from: every kind, what a runner's and an
#: algorithm's optional members hand back, and what a callback is handed
SECTIONS: dict[str, type] = {**protocols.PROTOCOLS, "collector": protocols.Collector,
                             "batched_update": protocols.BatchedUpdate, "live_parameters": protocols.LiveParameters,
                             "data_parallel": protocols.DataParallel, "replay_storage": protocols.ReplayStorage,
                             "callback_run": CallbackRun}

_SECTION = re.compile(r"(<!-- contract:(?P<kind>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /contract:(?P=kind) -->)", re.S)


def signature(name: str, function: Callable) -> str:
    """``name(parameter: type = default, ...) -> type`` as the protocol declares it, ``self`` left out."""
    shown = []
    for parameter in list(inspect.signature(function).parameters.values())[1:]:
        text = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(parameter.kind.name, "") + parameter.name
        if parameter.annotation is not inspect.Parameter.empty:
            text += f": {parameter.annotation}"
        if parameter.default is not inspect.Parameter.empty:
            text += f" = {parameter.default!r}"
        shown.append(text)
    returned = inspect.signature(function).return_annotation
    return f"{name}({', '.join(shown)})" + ("" if returned is inspect.Signature.empty else f" -> {returned}")


def member_lines(protocol: type) -> tuple[list[str], list[str]]:
    """The markdown bullet of each required and each optional member of ``protocol``, in declaration order."""
    required: list[str] = []
    optional: list[str] = []
    comments = field_comments(protocol)
    annotations = {name: hint for klass in reversed(protocol.__mro__) for name, hint in
                   getattr(klass, "__annotations__", {}).items()}
    for name, needed in members(protocol).items():
        value = inspect.getattr_static(protocol, name, None)
        if isinstance(value, property) and value.fget is not None:
            shown = f"{name}: {inspect.signature(value.fget).return_annotation}"
            doc, note = inspect.getdoc(value.fget) or "", " (an attribute or a property)"
        elif callable(value):
            shown, doc, note = signature(name, value), inspect.getdoc(value) or "", ""
        else:
            shown, doc, note = f"{name}: {annotations[name]}", comments.get(name, ""), " (an attribute)"
        (required if needed else optional).append(f"- `{shown}`{note}: {tidy(doc)}")
    return required, optional


def section(kind: str) -> str:
    """The generated text of ``kind``'s section (without its markers)."""
    protocol = SECTIONS[kind]
    required, optional = member_lines(protocol)
    lines = [f"`{protocol.__module__}.{protocol.__qualname__}`: {tidy(inspect.getdoc(protocol) or '')}", ""]
    if required:
        lines += ["Required:", "", *required, ""]
    if optional:
        lines += ["Optional (used where the object has it):", "", *optional, ""]
    return "\n".join(lines)


def render(text: str) -> str:
    """``text`` with every contract section written again from its protocol; ``ValueError`` for a section
    naming no protocol or a protocol with no section (the guide and :data:`SECTIONS` out of step)."""
    found: list[str] = []

    def write(match: re.Match) -> str:
        kind = match.group("kind")
        if kind not in SECTIONS:
            raise ValueError(f"the guide has a contract section '{kind}', which names no protocol")
        found.append(kind)
        return match.group(1) + section(kind) + match.group(4)

    written = _SECTION.sub(write, text)
    missing = [kind for kind in SECTIONS if kind not in found]
    if missing:
        raise ValueError(f"the guide has no contract section for {', '.join(missing)}")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlplug.registry.guide", description=__doc__.splitlines()[0])
    parser.add_argument("guide", type=Path, help="the plugin guide, docs/writing-plugins.md")
    parser.add_argument("--check", action="store_true", help="exit 1 where the file differs, writing nothing")
    args = parser.parse_args(argv)
    text = args.guide.read_text()
    written = render(text)
    if args.check:
        return int(written != text)
    args.guide.write_text(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
