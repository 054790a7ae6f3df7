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

import functools
import importlib.metadata
import logging
import os
import re
import stat
from typing import NamedTuple

from sglang_backends.errors import describe_typed
from sglang_backends.names import SERVE_BACKENDS_GROUP

__all__ = [
    "PluginEntryPoint",
    "discover",
    "has_metadata",
    "is_regular_file",
    "normalize_distribution",
    "split_qualified_name",
]


LOG = logging.getLogger(__name__)


class PluginEntryPoint(NamedTuple):
    """One installed ``sglang.serve_backends`` entry point.

    :param name: the backend name (the entry point's name).
    :param target: the entry point's value, ``module:attr``.
    :param distribution: the providing distribution's name, if known; read
        from its ``METADATA``, or from its ``*.dist-info`` directory's name
        when that cannot be read (see *problem*).
    :param version: that distribution's version, if known.
    :param entry_point: the entry point itself, handed to stevedore to load.
    :param problem: why the distribution's metadata was not read
        (``metadata unreadable: PATH``), or ``None``.
    """

    name: str
    target: str
    distribution: str | None
    version: str | None
    entry_point: importlib.metadata.EntryPoint
    problem: str | None = None

    @property
    def distribution_label(self) -> str | None:
        """The distribution as shown to people: its name, with *problem* if any."""
        if self.distribution and self.problem:
            return f"{self.distribution} ({self.problem})"
        return self.distribution

    @property
    def provider(self) -> str:
        """:attr:`distribution_label`, or the target when the distribution is unknown."""
        return self.distribution_label or self.target


def metadata_directory(dist: object) -> str | None:
    """The directory holding *dist*'s metadata (``NAME-VERSION.dist-info``), if it has one.

    :mod:`importlib.metadata` has no public attribute for it
    (:class:`~importlib.metadata.PathDistribution` keeps it in ``_path``); it
    is needed to stat a metadata file before opening it (a FIFO would block
    the read) and to name a distribution whose ``METADATA`` cannot be read.
    """
    path = getattr(dist, "_path", None)
    return None if path is None else str(path)


def is_regular_file(path: str) -> bool:
    """Whether *path* is a regular file: opening a FIFO blocks until a writer comes."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def has_metadata(dist: importlib.metadata.Distribution, filename: str) -> bool | None:
    """Whether *dist* has metadata file *filename*, checked without opening it.

    ``None`` when *dist* keeps no metadata directory (it cannot be checked).

    :raises OSError: it exists but is not a regular file (a FIFO, a device).
    """
    directory = metadata_directory(dist)
    if directory is None:
        return None
    path = os.path.join(directory, filename)
    if not os.path.lexists(path):
        return False
    if not is_regular_file(path):
        raise OSError(f"{path} is not a regular file")
    return True


def read_metadata(dist: importlib.metadata.Distribution, filename: str) -> str | None:
    """*dist*'s metadata file *filename*, opened only if regular; ``None`` when it has none.

    :raises OSError: it exists but is not a regular file, or cannot be read.
    :raises UnicodeDecodeError: it is not UTF-8.
    """
    if has_metadata(dist, filename) is False:
        return None
    return dist.read_text(filename)


def _identity(dist: importlib.metadata.Distribution) -> tuple[str, str | None]:
    """*dist*'s name and version; raises when its ``METADATA`` is missing or unreadable."""
    # Only the two header fields are needed: read them from the header block
    # rather than parse the whole file (a long description included) with
    # the email parser, as ``dist.metadata`` would, for every plugin listed.
    text = read_metadata(dist, "METADATA") or read_metadata(dist, "PKG-INFO")
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


def _directory_name(directory: str | None) -> str | None:
    """The distribution name a ``NAME-VERSION.dist-info`` (or ``.egg-info``) directory bears."""
    if directory is None:
        return None
    stem = os.path.basename(directory.rstrip(os.sep))
    for suffix in (".dist-info", ".egg-info"):
        stem = stem.removesuffix(suffix)
    return stem.partition("-")[0] or None


@functools.cache
def _warn_once(message: str, *args: object) -> None:
    """Log a WARNING about a distribution once per process, however many groups are read."""
    LOG.warning(message, *args)


def discover(group: str = SERVE_BACKENDS_GROUP) -> dict[str, tuple[PluginEntryPoint, ...]]:
    """Return the installed entry points of *group*, by backend name, each sorted by provider.

    Every entry point :func:`importlib.metadata.entry_points` would give, with
    the same shadowing; nothing is imported, and only regular metadata files
    are opened. A distribution whose ``METADATA`` cannot be used still
    contributes its entry points under its ``*.dist-info`` directory's name
    (:attr:`PluginEntryPoint.problem`); one whose ``entry_points.txt`` cannot
    be read is skipped. Each case logs one WARNING naming the path.
    """
    found: dict[str, list[PluginEntryPoint]] = {}
    for plugin in _plugins(group):
        found.setdefault(plugin.name, []).append(plugin)
    return {
        name: tuple(sorted(entries, key=lambda e: e.provider)) for name, entries in found.items()
    }


def _plugins(group: str) -> list[PluginEntryPoint]:
    """The entry points of *group*, in ``entry_points()``'s order, each file read once.

    Not :func:`importlib.metadata.entry_points` itself: it opens every
    ``entry_points.txt`` unchecked (a FIFO blocks it) and fails as a whole on
    one malformed file.
    """
    plugins: list[PluginEntryPoint] = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        directory = metadata_directory(dist)
        stem_name = _directory_name(directory)
        if stem_name is not None:
            # Shadowed by an earlier sys.path entry, as entry_points() decides (by directory name).
            key = normalize_distribution(stem_name).replace("-", "_")
            if key in seen:
                continue
            seen.add(key)
        try:
            if has_metadata(dist, "entry_points.txt") is False:
                continue
            selected = list(dist.entry_points.select(group=group))
        except Exception as exc:  # noqa: BLE001 - one broken distribution must not hide all
            _warn_once(
                "Ignoring the distribution at %s: its metadata is unreadable (%s)",
                directory or repr(dist),
                describe_typed(exc),
            )
            continue
        if not selected:
            continue
        problem = None
        name: str | None
        try:
            name, version = _identity(dist)
        except Exception as exc:  # noqa: BLE001 - its entry points are still served
            # As importlib.metadata.entry_points() (and so `sglang serve`) still gives them.
            name, version = stem_name, None
            problem = f"metadata unreadable: {directory}" if directory else None
            _warn_once(
                "Using the entry points of the distribution at %s under the name %r: "
                "its METADATA is unreadable (%s)",
                directory or repr(dist),
                name,
                describe_typed(exc),
            )
        plugins.extend(
            PluginEntryPoint(ep.name, ep.value, name, version, ep, problem) for ep in selected
        )
    return plugins


def normalize_distribution(name: str) -> str:
    """Normalize a distribution name as packaging tools compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_qualified_name(name: str) -> tuple[str | None, str]:
    """Split ``DIST:NAME`` into ``(DIST, NAME)``; a plain name gives ``(None, NAME)``."""
    dist, _, backend = name.rpartition(":")
    if not dist:  # no colon, or nothing before it
        return None, name
    return dist, backend
