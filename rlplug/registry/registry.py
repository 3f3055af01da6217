"""Component records and name lookup: qualified names, aliases, ambiguity, 'did you mean'."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from rlplug.errors import ComponentError, a, did_you_mean, plural
from rlplug.registry.hookspecs import HOOKS
from rlplug.registry.schema import Schema

KINDS = tuple(HOOKS)


def kind_of(word: str) -> str:
    """Accept ``env`` or ``envs`` (and any case) for a kind; reject anything else clearly."""
    lowered = word.lower()
    singular = next((w for w in (lowered, lowered.removesuffix("s"), lowered.removesuffix("es")) if w in HOOKS),
                    lowered.removesuffix("s"))
    if singular not in HOOKS:
        raise ComponentError(f"unknown component kind '{word}'{did_you_mean(singular, KINDS)} ; kinds: "
                             f"{', '.join(KINDS)}")
    return singular


@dataclass(frozen=True)
class ComponentSpec:
    """One registered component: who provides it, how to build it, what it accepts."""

    kind: str
    name: str
    factory: Callable
    plugin: str
    version: str
    summary: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def qualified_name(self) -> str:
        return f"{self.plugin}:{self.name}"

    @cached_property
    def schema(self) -> Schema:
        return Schema.of(self.factory)


@dataclass
class PluginRecord:
    """A plugin that was found: loaded fine, or failed with a one-line reason."""

    name: str
    version: str
    source: str
    error: str | None = None
    components: int = 0
    #: ``(kind, name)`` of each component it registered or began to register, also when it then failed
    names: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Registry:
    """Every component that loaded, by kind, and every plugin that was tried."""

    specs: dict[str, list[ComponentSpec]] = field(default_factory=lambda: {k: [] for k in KINDS})
    plugins: list[PluginRecord] = field(default_factory=list)

    def add(self, spec: ComponentSpec) -> None:
        self.specs[spec.kind].append(spec)

    def failures(self) -> list[PluginRecord]:
        return [p for p in self.plugins if p.error]

    def report_failures(self) -> None:
        """One warning line on stderr for each plugin that was skipped."""
        for plugin in self.failures():
            print(f"rlplug: warning: plugin '{plugin.name}' ({plugin.source}) was skipped: {plugin.error}",
                  file=sys.stderr)

    def lookup(self, kind: str, name: str) -> ComponentSpec:
        """The one component ``name`` (bare, alias or ``plugin:name``) denotes in ``kind``."""
        kind = kind_of(kind)
        specs = self.specs[kind]
        plugin, _, bare = name.rpartition(":")
        matches = [s for s in specs if (bare == s.name or bare in s.aliases) and plugin in ("", s.plugin)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            options = ", ".join(s.qualified_name for s in matches)
            raise ComponentError(f"'{name}' is ambiguous: several plugins register {kind} '{bare}' ({options}); "
                                 f"write the qualified name, e.g. use = \"{matches[0].qualified_name}\"")
        raise ComponentError(self._not_found(kind, name, bare, plugin))

    def _not_found(self, kind: str, name: str, bare: str, plugin: str) -> str:
        elsewhere = [k for k in KINDS if k != kind and any(bare == s.name or bare in s.aliases for s in self.specs[k])]
        if elsewhere:
            return (f"'{name}' is {a(elsewhere[0])}, not {a(kind)}; {plural(kind)}: "
                    f"{', '.join(self.names(kind)) or 'none'}")
        failed = [p for p in self.failures() if p.name == plugin or (not plugin and (kind, bare) in p.names)]
        if failed:
            return f"'{name}' needs plugin '{failed[0].name}', which failed to load: {failed[0].error}"
        known = self.names(kind) + [s.qualified_name for s in self.specs[kind]]
        message = (f"unknown {kind} '{name}'{did_you_mean(name, known)}; {plural(kind)}: "
                   f"{', '.join(self.names(kind)) or 'none'}")
        if self.failures():
            message += f" (plugins that failed to load: {', '.join(p.name for p in self.failures())})"
        return message

    def names(self, kind: str) -> list[str]:
        return sorted({s.name for s in self.specs[kind_of(kind)]})
