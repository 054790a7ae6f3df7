"""Discovery: which plugins are installed, read from package metadata.

Names, targets and providing distributions come from
:func:`importlib.metadata.entry_points` on every call. stevedore's on-disk
entry-point cache is never consulted: it can serve a stale list for minutes
after a reinstall, drops the distribution of each entry point, folds two
providers with the same target into one and fails on a damaged cache file.
Nothing here imports plugin code. Which of the discovered plugins may be
used is decided in :mod:`sglang_backends.selection`.

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
from dataclasses import dataclass

from sglang_backends.contract import SERVE_BACKENDS_GROUP

__all__ = [
    "PluginEntryPoint",
    "discover",
    "normalize_distribution",
    "split_qualified_name",
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


def _readable(dist: importlib.metadata.Distribution) -> tuple[str, str | None]:
    """*dist*'s name and version; raises when its ``METADATA`` is missing or unreadable."""
    # Only the two header fields are needed: read them from the header block
    # rather than parse the whole file (a long description included) with
    # the email parser, as ``dist.metadata`` would, for every plugin listed.
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if text is None:
        raise ValueError("it has no METADATA")
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            break
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version"):
            fields.setdefault(key, value.strip())
    if not fields.get("Name"):
        raise ValueError("its METADATA names no distribution")
    return fields["Name"], fields.get("Version")


def _location(dist: object) -> str:
    """Where *dist*'s metadata lives, for warnings.

    :mod:`importlib.metadata` has no public attribute for a distribution's
    metadata directory; :class:`~importlib.metadata.PathDistribution` keeps
    it in ``_path``. Used only to word a warning, with a fallback.
    """
    path = getattr(dist, "_path", None)
    return str(path) if path is not None else repr(dist)


def _warn_unreadable(dist: object, exc: BaseException) -> None:
    LOG.warning(
        "Ignoring the distribution at %s: its metadata is unreadable (%s: %s)",
        _location(dist),
        type(exc).__name__,
        " ".join(str(exc).split()),
    )


def discover(group: str = SERVE_BACKENDS_GROUP) -> dict[str, tuple[PluginEntryPoint, ...]]:
    """Return the installed entry points of *group*, by backend name.

    Several distributions registering one name all appear, sorted by
    provider, whether or not their targets differ. Reads what is installed
    now; nothing is imported. A distribution whose metadata cannot be read
    (not UTF-8, no ``METADATA``, a malformed ``entry_points.txt``) is
    skipped with one WARNING naming its path; the others are still found.
    """
    found: dict[str, list[PluginEntryPoint]] = {}
    for plugin in _plugins(group):
        found.setdefault(plugin.name, []).append(plugin)
    return {
        name: tuple(sorted(entries, key=lambda e: e.provider)) for name, entries in found.items()
    }


def _plugins(group: str) -> list[PluginEntryPoint]:
    """The entry points of *group* with their distributions, past unreadable metadata.

    :func:`importlib.metadata.entry_points` is the fast path; it fails as a
    whole when any installed distribution has a malformed
    ``entry_points.txt``, and only then are distributions read one by one.
    """
    try:
        entry_points = list(importlib.metadata.entry_points(group=group))
    except Exception:  # noqa: BLE001 - fall back to reading each distribution
        return _plugins_one_by_one(group)
    plugins: list[PluginEntryPoint] = []
    identity: dict[int, tuple[str, str | None] | None] = {}  # id(dist) -> (name, version)
    for entry_point in entry_points:
        dist = entry_point.dist
        if dist is None:
            plugins.append(_plugin(entry_point, None, None))
            continue
        if id(dist) not in identity:
            try:
                identity[id(dist)] = _readable(dist)
            except Exception as exc:  # noqa: BLE001 - one broken distribution must not hide all
                identity[id(dist)] = None
                _warn_unreadable(dist, exc)
        known = identity[id(dist)]
        if known is not None:
            plugins.append(_plugin(entry_point, *known))
    return plugins


def _plugins_one_by_one(group: str) -> list[PluginEntryPoint]:
    plugins: list[PluginEntryPoint] = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        try:
            name, version = _readable(dist)
            key = normalize_distribution(name)
            if key in seen:  # shadowed by an earlier sys.path entry, as entry_points() does
                continue
            seen.add(key)
            plugins.extend(
                _plugin(ep, name, version) for ep in dist.entry_points.select(group=group)
            )
        except Exception as exc:  # noqa: BLE001 - one broken distribution must not hide all
            _warn_unreadable(dist, exc)
    return plugins


def _plugin(
    entry_point: importlib.metadata.EntryPoint, distribution: str | None, version: str | None
) -> PluginEntryPoint:
    return PluginEntryPoint(
        name=entry_point.name,
        target=entry_point.value,
        distribution=distribution,
        version=version,
        entry_point=entry_point,
    )


def normalize_distribution(name: str) -> str:
    """Normalize a distribution name as packaging tools compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_qualified_name(name: str) -> tuple[str | None, str]:
    """Split ``DIST:NAME`` into ``(DIST, NAME)``; a plain name gives ``(None, NAME)``."""
    dist, sep, backend = name.rpartition(":")
    if not sep or not dist:
        return None, name
    return dist, backend
