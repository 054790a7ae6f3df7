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


class _NoExitMixin:
    """Turn a plugin's ``sys.exit()`` at import into an ordinary load failure."""

    def _load_one_plugin(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super()._load_one_plugin(*args, **kwargs)  # type: ignore[misc]
        except SystemExit as exc:
            raise RuntimeError(f"plugin called sys.exit({exc.code!r}) while loading") from exc


class _ChosenDriverManager(_NoExitMixin, DriverManager):
    """A :class:`~stevedore.driver.DriverManager` over one given entry point."""

    def __init__(self, plugin: PluginEntryPoint, **kwargs: Any) -> None:
        self._chosen = [plugin.entry_point]
        super().__init__(SERVE_BACKENDS_GROUP, plugin.name, **kwargs)

    def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
        return list(self._chosen)


class _ChosenNamedManager(_NoExitMixin, NamedExtensionManager):
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
