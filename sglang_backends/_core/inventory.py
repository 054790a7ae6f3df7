"""The inventory: every installed backend, what each may do under one selection, and the
warnings it gives the operator.

Each command takes it once, with :func:`take_inventory`, from package metadata
only (no plugin is imported): the distributions
:mod:`~sglang_backends._core.discovery` found (each with its shadowed copies), their
``sglang.serve_backends`` entry points, and each entry point's
:class:`~sglang_backends._core.selection.PluginStatus`. ``list``, ``show``,
``check``, ``detect``, ``serve`` and its general help read that one
:class:`Inventory`; a registry a command builds takes it too
(``ServeBackendRegistry(inventory=...)``), so nothing is read or said twice.
What else an operator should see before a failure is metadata too, read from
the same :attr:`Inventory.distributions`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

from sglang_backends._core import selection
from sglang_backends._core.discovery import (
    Discovered,
    InstalledDistribution,
    PluginEntryPoint,
    discover,
    distributions,
)
from sglang_backends._core.names import AUTO
from sglang_backends._core.selection import PluginRecord, PluginStatus
from sglang_backends._core.settings import Settings
from sglang_backends.errors import (
    DisabledBackendError,
    ServeBackendError,
    UnknownBackendError,
    set_in_configuration,
)

LOG = logging.getLogger(__name__)


class Inventory(NamedTuple):
    """Every installed backend and each plugin's status under one selection.

    :param builtins: the built-ins by name, in listing order.
    :param enabled: plugin names that may be used; ``None`` allows all.
    :param disabled: plugin names that may not be used.
    :param origins: where the enabled, disabled and preferred lists were set, for messages
        (:meth:`~sglang_backends._core.settings.Settings.list_origins`).
    :param distributions: every installed distribution, in :data:`sys.path` order.
    :param discovered: the installed entry points by backend name (each may have
        several providers).
    :param records: every entry point with its status, sorted by name then provider.
    :param available_names: built-in names in their given order, then the usable
        plugin names sorted: what ``--model-type`` may be given besides ``auto``.
    :param not_installed: by list (``enabled``, ``disabled``, ``preferred``), the names
        in it that no installed plugin has, sorted, as the operator was warned.
    """

    builtins: Mapping[str, Any]
    enabled: frozenset[str] | None
    disabled: frozenset[str]
    origins: Mapping[str, str]
    distributions: tuple[InstalledDistribution, ...]
    discovered: Discovered
    records: tuple[PluginRecord, ...]
    available_names: tuple[str, ...]
    not_installed: Mapping[str, list[str]]

    @property
    def installed(self) -> Collection[str]:
        """The installed plugin names, usable or not."""
        return self.discovered.keys()

    @property
    def conflicts(self) -> list[PluginEntryPoint]:
        """The usable plugins claiming a reserved or built-in name."""
        return [r.plugin for r in self.records if r.status is PluginStatus.CONFLICT]

    def designated(self, name: str) -> list[PluginRecord]:
        """The records ``NAME`` or ``DIST:NAME`` *name* designates, whatever their status."""
        return [r for r in self.records if selection.designates(name, r.plugin)]

    def by_name(self, name: str, *, set_in: str | None = None) -> PluginEntryPoint | None:
        """The plugin ``serve --model-type NAME`` would load (``None`` for a built-in,
        else :func:`.selection.choose`'s), or serve's error; imports nothing.

        :param set_in: where configuration set *name*, which the error then says.
        :raises UnknownBackendError, DisabledBackendError, BackendConflictError: as serve's.
        """
        try:
            return None if name in self.builtins else selection.choose(name, self)
        except (UnknownBackendError, DisabledBackendError) as exc:
            raise set_in_configuration(exc, set_in) from None


def take_inventory(
    settings: Settings,
    builtins: Mapping[str, Any],
    *,
    installed: Iterable[InstalledDistribution] | None = None,
    warn_conflicts: bool = False,
    warn_model_type: bool = False,
) -> Inventory:
    """The inventory under *settings*' selection; imports no plugin. Warns the operator once
    per command, since each command calls this once, of each slip it shows:

    - a name in the enabled, disabled or preferred list that no installed plugin has, or a
      built-in's name in the enabled or disabled list (always;
      :func:`~sglang_backends._core.selection.warn_unknown_selection` words them);
    - with *warn_conflicts*, each usable plugin claiming a built-in or reserved name: for
      a command that only lists it (``list``, the general help). Where a registry is
      built (``serve``, ``show``, ``detect``), its refusal says so, and ``check`` makes
      it the plugin's error: a warning too would say it twice;
    - with *warn_model_type*, a configured ``model_type`` that ``serve`` would refuse, in
      serve's words: for the operator commands (``serve`` refuses it itself).

    The lists and built-ins are taken as checked: by their typed options, or by the
    registry (:func:`~sglang_backends._core.selection.check_lists`) when given directly.

    :param installed: the distributions to read (a command's, read for its formatters
        too), :func:`~sglang_backends._core.discovery.distributions` by default.
    """
    # Sets: each of thousands of entry points is looked up in them.
    enabled = None if settings.enabled is None else frozenset(settings.enabled)
    disabled = frozenset(settings.disabled)
    origins = settings.list_origins()
    installed = tuple(distributions() if installed is None else installed)
    discovered = discover(installed=installed)
    records = tuple(selection.classify(discovered, builtins, enabled=enabled, disabled=disabled))
    not_installed = selection.warn_unknown_selection(settings, discovered.keys(), builtins, origins)
    usable = sorted({r.name for r in records if r.status.usable})
    inventory = Inventory(
        builtins,
        enabled,
        disabled,
        origins,
        installed,
        discovered,
        records,
        (*builtins, *usable),
        not_installed,
    )
    if warn_conflicts:
        for plugin in inventory.conflicts:
            LOG.warning("%s", selection.conflict_warning(plugin))
    if warn_model_type:
        for problem in model_type_problems(settings, inventory):
            LOG.warning("%s", problem)
    return inventory


def model_type_problems(
    settings: Settings, inventory: Inventory, *, serve: bool = False
) -> list[str]:
    """Why ``serve`` would refuse the configured ``model_type`` (one line), or nothing: as
    the operator commands say it, or with *serve* as serve does (where configuration set
    it). A list, which follows a configuration's other problems.
    """
    model_type = settings.model_type
    if model_type == AUTO:
        return []
    try:
        inventory.by_name(model_type, set_in=settings.set_in("model_type") if serve else None)
    except ServeBackendError as exc:
        if serve:
            return [str(exc)]
        where = settings.describe("model_type")
        return [f"model_type {model_type!r} ({where}) would make serve fail: {exc}"]
    return []
