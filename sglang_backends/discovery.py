"""Discovery: which plugins are installed, read from package metadata.

Names, targets and providing distributions come from
:func:`importlib.metadata.entry_points` on every call. stevedore's on-disk
entry-point cache is never consulted: it can serve a stale list for minutes
after a reinstall, drops the distribution of each entry point, folds two
providers with the same target into one and fails on a damaged cache file.
Nothing here imports plugin code.
"""

from __future__ import annotations

import enum
import importlib.metadata
import logging
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from sglang_backends.contract import RESERVED_SERVE_BACKEND_NAMES, SERVE_BACKENDS_GROUP

__all__ = [
    "PluginEntryPoint",
    "PluginRecord",
    "PluginStatus",
    "discover",
    "inventory",
    "normalize_distribution",
    "split_qualified_name",
    "warn_unknown_selection",
]


LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginEntryPoint:
    """One installed ``sglang.serve_backends`` entry point.

    :param name: the backend name (the entry point's name).
    :param target: the entry point's value, ``module:attr``.
    :param distribution: the providing distribution's name, if known.
    :param version: that distribution's version, if known.
    :param entry_point: the entry point itself, handed to stevedore to load.
    """

    name: str
    target: str
    distribution: str | None
    version: str | None
    entry_point: importlib.metadata.EntryPoint

    @property
    def provider(self) -> str:
        """The distribution name, or the target when there is none."""
        return self.distribution or self.target


def _from_entry_point(entry_point: importlib.metadata.EntryPoint) -> PluginEntryPoint:
    dist = getattr(entry_point, "dist", None)
    name = getattr(dist, "name", None) if dist is not None else None
    version = getattr(dist, "version", None) if dist is not None else None
    return PluginEntryPoint(
        name=entry_point.name,
        target=entry_point.value,
        distribution=name,
        version=version,
        entry_point=entry_point,
    )


def discover(group: str = SERVE_BACKENDS_GROUP) -> dict[str, tuple[PluginEntryPoint, ...]]:
    """Return the installed entry points of *group*, by backend name.

    Several distributions registering one name all appear, sorted by
    provider, whether or not their targets differ. Reads what is installed
    now; nothing is imported.
    """
    found: dict[str, list[PluginEntryPoint]] = {}
    for entry_point in _entry_points(group):
        found.setdefault(entry_point.name, []).append(_from_entry_point(entry_point))
    return {
        name: tuple(sorted(entries, key=lambda e: e.provider)) for name, entries in found.items()
    }


def _entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    """The entry points of *group*, read past distributions whose metadata is unreadable.

    :func:`importlib.metadata.entry_points` fails as a whole when any one
    installed distribution has a malformed ``entry_points.txt``; only then
    are distributions read one by one, the broken ones skipped with a
    warning naming them.
    """
    try:
        return list(importlib.metadata.entry_points(group=group))
    except Exception:  # noqa: BLE001 - fall back to reading each distribution
        pass
    found: list[importlib.metadata.EntryPoint] = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        name = None
        try:
            name = dist.metadata["Name"]
            key = normalize_distribution(name or "")
            if key in seen:  # shadowed by an earlier sys.path entry, as entry_points() does
                continue
            seen.add(key)
            found.extend(dist.entry_points.select(group=group))
        except Exception as exc:  # noqa: BLE001 - one broken distribution must not hide all
            LOG.warning(
                "Ignoring the entry points of distribution %s: its metadata is unreadable (%s)",
                name or "(unnamed)",
                " ".join(str(exc).split()) or type(exc).__name__,
            )
    return found


def normalize_distribution(name: str) -> str:
    """Normalize a distribution name as packaging tools compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_qualified_name(name: str) -> tuple[str | None, str]:
    """Split ``DIST:NAME`` into ``(DIST, NAME)``; a plain name gives ``(None, NAME)``."""
    dist, sep, backend = name.rpartition(":")
    if not sep or not dist:
        return None, name
    return dist, backend


class PluginStatus(str, enum.Enum):
    """Why a plugin may or may not be used."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    DUPLICATE = "duplicate"
    CONFLICT = "conflicts with a built-in"


@dataclass(frozen=True)
class PluginRecord:
    """An installed plugin entry point and its status under a selection."""

    plugin: PluginEntryPoint
    status: PluginStatus


def is_allowed(name: str, enabled: Collection[str] | None, disabled: Collection[str]) -> bool:
    """Whether the enabled/disabled lists let plugin *name* be used."""
    if name in disabled:
        return False
    return enabled is None or name in enabled


def inventory(
    discovered: Mapping[str, Iterable[PluginEntryPoint]],
    builtin_names: Collection[str],
    *,
    enabled: Collection[str] | None = None,
    disabled: Collection[str] = (),
) -> list[PluginRecord]:
    """Classify every discovered entry point, sorted by name then provider.

    A plugin outside the enabled/disabled selection is ``DISABLED`` whatever
    else is wrong with it, since it will never be loaded; otherwise a
    reserved or built-in name is a ``CONFLICT`` and a name with several
    providers a ``DUPLICATE``.
    """
    reserved = set(builtin_names) | RESERVED_SERVE_BACKEND_NAMES
    records = []
    for name in sorted(discovered):
        entries = tuple(discovered[name])
        for plugin in entries:
            if not is_allowed(name, enabled, disabled):
                status = PluginStatus.DISABLED
            elif name in reserved:
                status = PluginStatus.CONFLICT
            elif len(entries) > 1:
                status = PluginStatus.DUPLICATE
            else:
                status = PluginStatus.ENABLED
            records.append(PluginRecord(plugin=plugin, status=status))
    return records


def warn_unknown_selection(
    installed: Collection[str],
    builtin_names: Collection[str],
    *,
    enabled: Collection[str] | None,
    disabled: Collection[str],
    origins: Mapping[str, str] | None = None,
) -> list[str]:
    """Warn about names in the enabled/disabled lists that nothing installed provides.

    A typo in a list must not pass silently. Each warning goes to the
    ``sglang_backends.registry`` logger and, when *origins* maps ``"enabled"``
    or ``"disabled"`` to where that list was set (an option in a file, a
    command-line flag), says so.

    :returns: the unknown names, in warning order.
    """
    unknown = []
    for label, names in (("enabled", enabled or ()), ("disabled", disabled)):
        for name in sorted(names):
            if name in installed or name in builtin_names:
                continue
            unknown.append(name)
            origin = (origins or {}).get(label)
            _SELECTION_LOG.warning(
                "Serve backend %r in the %s list is not installed; installed plugins: %s%s",
                name,
                label,
                ", ".join(sorted(installed)) or "none",
                f" (check {origin})" if origin else "",
            )
    return unknown


_SELECTION_LOG = logging.getLogger("sglang_backends.registry")
