"""The survey: every installed backend and what each may do under one selection.

One computation, from package metadata only (no plugin is imported), that
the registry loads from and every command and the general help show:
the distributions :mod:`~sglang_backends.discovery` found (each with its
shadowed copies), their ``sglang.serve_backends`` entry points, and each
entry point's :class:`~sglang_backends.selection.PluginStatus`. What else an
operator should see before a failure is metadata too, read from the same
:attr:`Survey.distributions`.

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

from sglang_backends import selection
from sglang_backends.discovery import (
    InstalledDistribution,
    PluginEntryPoint,
    discover,
    distributions,
)
from sglang_backends.errors import (
    DisabledBackendError,
    UnknownBackendError,
    set_in_configuration,
)
from sglang_backends.selection import PluginRecord, PluginStatus

__all__ = ["Survey", "survey"]


class Survey(NamedTuple):
    """Every installed backend and each plugin's status under one selection.

    :param builtins: the built-ins by name, in listing order.
    :param enabled: plugin names that may be used; ``None`` allows all.
    :param disabled: plugin names that may not be used.
    :param distributions: every installed distribution, in :data:`sys.path` order.
    :param discovered: the installed entry points by backend name (each may have
        several providers).
    :param records: every entry point with its status, sorted by name then provider.
    :param available_names: built-in names in their given order, then the usable
        plugin names sorted: what ``--model-type`` may be given besides ``auto``.
    """

    builtins: Mapping[str, Any]
    enabled: frozenset[str] | None
    disabled: frozenset[str]
    distributions: tuple[InstalledDistribution, ...]
    discovered: Mapping[str, tuple[PluginEntryPoint, ...]]
    records: tuple[PluginRecord, ...]
    available_names: tuple[str, ...]

    @property
    def installed(self) -> Collection[str]:
        """The installed plugin names, usable or not."""
        return self.discovered.keys()

    @property
    def usable_names(self) -> tuple[str, ...]:
        """The plugin names ``serve`` may be given, sorted (built-ins apart)."""
        return self.available_names[len(self.builtins) :]

    @property
    def conflicts(self) -> list[PluginEntryPoint]:
        """The usable plugins claiming a reserved or built-in name."""
        return [r.plugin for r in self.records if r.status is PluginStatus.CONFLICT]

    def designated(self, name: str) -> list[PluginRecord]:
        """The records ``NAME`` or ``DIST:NAME`` *name* designates."""
        return [r for r in self.records if selection.designates(name, r.plugin)]

    def choose(self, name: str, origins: Mapping[str, str] | None = None) -> PluginEntryPoint:
        """The one usable plugin *name* designates (:func:`.selection.choose`).

        :param origins: where the enabled and disabled lists were set, for the errors.
        """
        return selection.choose(
            name,
            self.discovered,
            self.builtins,
            self.available_names,
            enabled=self.enabled,
            disabled=self.disabled,
            origins=origins,
        )

    def by_name(
        self,
        name: str,
        *,
        set_in: str | None = None,
        origins: Mapping[str, str] | None = None,
    ) -> PluginEntryPoint | None:
        """The plugin ``serve --model-type NAME`` would load (``None`` for a built-in), or
        serve's error, imported nothing.

        :param set_in: where configuration set *name*, which the error then says.
        :raises UnknownBackendError, DisabledBackendError, BackendConflictError: as serve's.
        """
        if name in self.builtins:
            return None
        try:
            return self.choose(name, origins)
        except (UnknownBackendError, DisabledBackendError) as exc:
            if set_in is None:
                raise
            raise set_in_configuration(exc, set_in) from None

    def warn_unknown(
        self, origins: Mapping[str, str] | None = None, *, preferred: Collection[str] = ()
    ) -> dict[str, list[str]]:
        """Warn about listed names (*preferred* too) that select no installed plugin, and
        return them by list; see :func:`~sglang_backends.selection.warn_unknown_selection`.
        """
        return selection.warn_unknown_selection(
            self.installed,
            self.builtins,
            enabled=self.enabled,
            disabled=self.disabled,
            preferred=preferred,
            origins=origins,
        )


def survey(
    builtins: Mapping[str, Any],
    *,
    enabled: Iterable[str] | None = None,
    disabled: Iterable[str] = (),
    installed: Iterable[InstalledDistribution] | None = None,
) -> Survey:
    """Every installed backend with its status under *enabled*/*disabled*; imports no plugin.

    :param installed: the distributions to read (a command's, read for its formatters
        too), :func:`~sglang_backends.discovery.distributions` by default.
    """
    allowed = None if enabled is None else frozenset(enabled)
    refused = frozenset(disabled)
    installed = tuple(distributions() if installed is None else installed)
    discovered = discover(installed=installed)
    records = tuple(selection.inventory(discovered, builtins, enabled=allowed, disabled=refused))
    available = (*builtins, *selection.usable_names(records))
    return Survey(builtins, allowed, refused, installed, discovered, records, available)
