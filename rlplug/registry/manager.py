"""Finding plugins and running their hooks, one plugin at a time so one broken plugin breaks nothing else.

Built-in plugin modules and installed ``rlplug`` entry points go through the same steps: import, register
with pluggy, check hook names, call each hook with a ``register`` callback. A plugin whose step fails is
recorded with a one-line reason and contributes nothing (its partial registrations are dropped), unless
plugins are strict (``--strict-plugins`` or ``RLPLUG_STRICT_PLUGINS=1``), where the failure is raised.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pluggy

from rlplug.errors import PluginError, did_you_mean
from rlplug.registry import hookspecs
from rlplug.registry.hookspecs import HOOKS
from rlplug.registry.registry import ComponentSpec, PluginRecord, Registry
from rlplug.registry.schema import SchemaError

ENTRY_POINT_GROUP = "rlplug"
BUILTIN_PLUGIN = "rlplug"
BUILTIN_MODULES = (
    "rlplug.plugins.envs",
    "rlplug.plugins.networks",
    "rlplug.plugins.estimators",
    "rlplug.plugins.loggers",
    "rlplug.plugins.replay_buffers",
    "rlplug.plugins.noises",
    "rlplug.plugins.preprocessors",
    "rlplug.plugins.runners",
    "rlplug.plugins.losses",
    "rlplug.plugins.transforms",
    "rlplug.plugins.callbacks",
    "rlplug.plugins.intrinsic",
    "rlplug.plugins.datasets",
)
#: packages whose every sub-package (a folder with an ``__init__.py``) is a built-in plugin module too: an
#: algorithm is added by its folder alone, registering itself as a third-party package's would
BUILTIN_FOLDERS = ("rlplug.plugins.algorithms",)

_cache: dict[bool, Registry] = {}


def strict_from_env() -> bool:
    return os.environ.get("RLPLUG_STRICT_PLUGINS", "") not in ("", "0")


def get_registry(*, strict: bool | None = None) -> Registry:
    """The registry of every plugin found in this process (loaded once, then reused)."""
    strict = strict_from_env() if strict is None else strict
    if strict not in _cache:
        _cache[strict] = load_registry(strict=strict)
    return _cache[strict]


def load_registry(*, strict: bool = False) -> Registry:
    manager = pluggy.PluginManager(ENTRY_POINT_GROUP)
    manager.add_hookspecs(hookspecs)
    registry = Registry()
    version = importlib.metadata.version("rlplug") if _installed("rlplug") else "0+unknown"
    for module_name in (*BUILTIN_MODULES, *builtin_folders()):
        record = PluginRecord(BUILTIN_PLUGIN, version, module_name)
        _load_one(manager, registry, record, functools.partial(importlib.import_module, module_name), strict)
    for entry_point in _entry_points():
        dist = entry_point.dist
        record = PluginRecord(entry_point.name, dist.version if dist else "?",
                              f"{dist.metadata['Name'] if dist else '?'} ({entry_point.value})")
        _load_one(manager, registry, record, entry_point.load, strict)
    # Built-ins are several modules of one plugin: list it once.
    builtin = [p for p in registry.plugins if p.name == BUILTIN_PLUGIN and p.source.startswith("rlplug.")]
    if builtin:
        merged = PluginRecord(BUILTIN_PLUGIN, version, "built in", components=sum(p.components for p in builtin),
                              error="; ".join(p.error for p in builtin if p.error) or None)
        registry.plugins = [merged] + [p for p in registry.plugins if p not in builtin]
    return registry


def builtin_folders() -> list[str]:
    """The sub-packages of :data:`BUILTIN_FOLDERS`, found on disk without importing them."""
    found = []
    for package in BUILTIN_FOLDERS:
        spec = importlib.util.find_spec(package)
        locations = spec.submodule_search_locations if spec is not None else None
        found += [f"{package}.{info.name}" for info in pkgutil.iter_modules(locations or []) if info.ispkg]
    return sorted(found)


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    seen, unique = set(), []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = (entry_point.name, entry_point.value)
        if key not in seen:  # one distribution on sys.path twice must not look like a duplicate
            seen.add(key)
            unique.append(entry_point)
    return unique


def _load_one(manager: pluggy.PluginManager, registry: Registry, record: PluginRecord,
              load: Callable[[], Any], strict: bool) -> None:
    registry.plugins.append(record)
    staged: list[ComponentSpec] = []
    try:
        plugin = load()
        _check_hook_names(plugin)
        manager.register(plugin, name=f"{record.name}/{record.source}")
        for kind, hook_name in HOOKS.items():
            for impl in getattr(manager.hook, hook_name).get_hookimpls():
                if impl.plugin is plugin:
                    impl.function(register=_register_callback(kind, record, staged))
    except Exception as error:  # a plugin may fail in any way; none may take the tool down
        record.error = f"{type(error).__name__}: {error}".splitlines()[0]
        if strict:
            raise PluginError(f"plugin '{record.name}' ({record.source}) failed: {record.error}") from error
        return
    for spec in staged:
        registry.add(spec)
    record.components = len(staged)


def _check_hook_names(plugin: ModuleType | object) -> None:
    """Catch ``rlplug_register_env`` and friends: pluggy would silently ignore a misspelled hook."""
    for attr in dir(plugin):
        if not attr.startswith("rlplug_") or not inspect.isroutine(getattr(plugin, attr)):
            continue  # an imported module or a constant named rlplug_* is no hook
        if attr not in HOOKS.values():
            raise PluginError(f"'{attr}' is not an rlplug hook{did_you_mean(attr, HOOKS.values())}")
        if not hasattr(getattr(plugin, attr), "rlplug_impl"):
            raise PluginError(f"'{attr}' is not marked with @rlplug.hookimpl")


def _register_callback(kind: str, record: PluginRecord, staged: list[ComponentSpec]) -> Callable:
    def register(name: str, factory: Callable, *, summary: str | None = None, aliases=()) -> None:
        if not isinstance(name, str) or not name or ":" in name:
            raise PluginError(f"{kind} name must be a non-empty string without ':', got {name!r}")
        record.names.append((kind, name))  # what the plugin would have provided, should it fail from here on
        if not callable(factory):
            raise PluginError(f"{kind} '{name}': factory must be callable, got {type(factory).__name__}")
        if any(s.name == name for s in staged if s.kind == kind):
            raise PluginError(f"{kind} '{name}' registered twice by the same plugin")
        spec = ComponentSpec(kind, name, factory, record.name, record.version,
                             summary or _first_line(inspect.getdoc(factory)), tuple(aliases))
        try:  # the signature read and its defaults checked now: a plugin's schema mistake fails the plugin
            spec.schema.check_defaults(f"{kind} '{name}'")
        except SchemaError as error:
            raise PluginError(f"{kind} '{name}': {error.message}") from None
        staged.append(spec)

    return register


def _first_line(doc: str | None) -> str:
    return doc.strip().splitlines()[0] if doc and doc.strip() else ""
