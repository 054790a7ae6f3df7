"""Loading: stevedore managers fed the entry points discovery chose.

stevedore's managers do the importing; they are handed exactly the entry
points the registry selected (by overriding ``list_entry_points()``), so they
never read stevedore's on-disk entry-point cache and never import a plugin
that was not asked for. Load failures are reported through a callback, never
swallowed by stevedore's logger.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from typing import Any

from stevedore import DriverManager, NamedExtensionManager

from sglang_backends.contract import SERVE_BACKENDS_GROUP
from sglang_backends.discovery import PluginEntryPoint

__all__ = ["LoadFailure", "load_many", "load_one"]

#: ``(plugin, exception)`` for each entry point that failed to import.
LoadFailure = tuple[PluginEntryPoint, BaseException]


class _GuardedLoadMixin:
    """Make a plugin's misbehaviour at import an ordinary load failure.

    A malformed target is refused with a readable cause before anything is
    imported; ``sys.exit()`` and a failed ``assert`` at import (which
    stevedore lets through) become :class:`RuntimeError`, so a plugin can
    neither end the host nor escape the failure callback.
    """

    def _load_one_plugin(self, ep: importlib.metadata.EntryPoint, *args: Any) -> Any:
        if ep.pattern.fullmatch(ep.value) is None:
            raise ValueError(
                f"malformed entry point target {ep.value!r}; expected 'module:attribute'"
            )
        try:
            return super()._load_one_plugin(ep, *args)  # type: ignore[misc]
        except SystemExit as exc:
            raise RuntimeError(f"plugin called sys.exit({exc.code!r}) while loading") from exc
        except AssertionError as exc:
            raise RuntimeError(f"AssertionError: {exc}" if str(exc) else "AssertionError") from exc


class _ChosenDriverManager(_GuardedLoadMixin, DriverManager):
    """A :class:`~stevedore.driver.DriverManager` over one given entry point."""

    def __init__(self, plugin: PluginEntryPoint, **kwargs: Any) -> None:
        self._chosen = [plugin.entry_point]
        super().__init__(SERVE_BACKENDS_GROUP, plugin.name, **kwargs)

    def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
        return list(self._chosen)


class _ChosenNamedManager(_GuardedLoadMixin, NamedExtensionManager):
    """A :class:`~stevedore.named.NamedExtensionManager` over given entry points."""

    def __init__(self, plugins: Sequence[PluginEntryPoint], **kwargs: Any) -> None:
        self._chosen = [plugin.entry_point for plugin in plugins]
        super().__init__(SERVE_BACKENDS_GROUP, [plugin.name for plugin in plugins], **kwargs)

    def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
        return list(self._chosen)


def load_one(plugin: PluginEntryPoint) -> object:
    """Import *plugin*'s target through a ``DriverManager`` and return it.

    The import's own exception propagates (``SystemExit`` from a plugin is
    turned into a ``RuntimeError`` so a plugin cannot end the host).
    """
    manager = _ChosenDriverManager(
        plugin, invoke_on_load=False, on_missing_entrypoints_callback=None
    )
    return manager.driver


def load_many(
    plugins: Sequence[PluginEntryPoint],
    on_failure: Callable[[PluginEntryPoint, BaseException], None],
) -> dict[tuple[str, str], object]:
    """Import several plugins through one ``NamedExtensionManager``.

    Returns each loaded target keyed by ``(name, target)``; a plugin that
    fails to import is passed to *on_failure* and left out.
    """
    by_key = {(plugin.name, plugin.target): plugin for plugin in plugins}

    def failed(_manager: object, entry_point: Any, exc: BaseException) -> None:
        on_failure(by_key[(entry_point.name, entry_point.value)], exc)

    if not plugins:
        return {}
    manager = _ChosenNamedManager(
        plugins,
        invoke_on_load=False,
        on_load_failure_callback=failed,
        on_missing_entrypoints_callback=None,
    )
    return {(ext.name, ext.entry_point.value): ext.plugin for ext in manager.extensions}
