"""Discovery: which plugins are installed, read from package metadata.

Every distribution :func:`importlib.metadata.distributions` finds takes part:
``*.dist-info`` and ``*.egg-info`` directories, either one inside a zip on
:data:`sys.path`, ``.egg`` directories and zipped eggs, and the distributions
of custom finders (editable installs). Each is read through the
:class:`~importlib.metadata.Distribution` API (``read_text``,
``entry_points``), and one normalized name is one distribution, the first
on the path winning, as :func:`importlib.metadata.entry_points` decides;
later copies are kept as :attr:`InstalledDistribution.shadowed`.
stevedore's on-disk entry-point cache is never consulted: it can serve a
stale list for minutes after a reinstall, drops the distribution of each
entry point, folds two providers with the same target into one and fails
on a damaged cache file. Nothing here imports plugin code. Which of the
discovered plugins may be used is decided in :mod:`sglang_backends._core.selection`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import pathlib
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from importlib.metadata import Distribution, EntryPoint
from typing import NamedTuple

from sglang_backends._core.names import SERVE_BACKENDS_GROUP
from sglang_backends.errors import describe_typed

LOG = logging.getLogger(__name__)


class InstalledDistribution:
    """One installed distribution: the first on :data:`sys.path` of its normalized name.

    :param distribution: what :mod:`importlib.metadata` found; ask it for
        ``requires``, ``files`` or any group's entry points.
    :param shadowed: later copies of the same normalized name, in path order:
        never loaded, as :func:`importlib.metadata.entry_points` ignores them.
    """

    def __init__(self, distribution: Distribution, shadowed: tuple[Distribution, ...] = ()) -> None:
        self.distribution = distribution
        self.shadowed = shadowed

    @property
    def location(self) -> str:
        """Where its metadata lives, for messages."""
        root = _metadata_path(self.distribution)
        return repr(self.distribution) if root is None else str(root).rstrip("/" + os.sep)

    @functools.cached_property
    def all_entry_points(self) -> tuple[EntryPoint, ...]:
        """Its entry points, whatever their group, read as :meth:`entry_points` reads them:
        ``entry_points.txt`` parsed once, as a listing asks the same distributions for
        several groups."""
        found = has_metadata(self.distribution, "entry_points.txt")
        return tuple(self.distribution.entry_points) if found else ()

    def entry_points(self, group: str) -> list[EntryPoint]:
        """Its entry points in *group*, read only from a regular file.

        :raises OSError: ``entry_points.txt`` is not a regular file, or cannot be read.
        :raises ValueError: it is malformed, or not UTF-8.
        """
        return [ep for ep in self.all_entry_points if ep.group == group]


class PluginEntryPoint(NamedTuple):
    """One installed ``sglang.serve_backends`` entry point.

    :param name: the backend name (the entry point's name).
    :param target: the entry point's value, ``module:attr``.
    :param distribution: the providing distribution's name, if known; read
        from its ``METADATA``, or from its metadata directory's name when
        that cannot be read (see *problem*).
    :param version: that distribution's version, if known.
    :param entry_point: the entry point itself, handed to stevedore to load.
    :param problem: why the distribution's metadata was not read
        (``metadata unreadable: PATH``), or ``None``.
    :param installed: the distribution it comes from, with its shadowed copies.
    """

    name: str
    target: str
    distribution: str | None
    version: str | None
    entry_point: EntryPoint
    problem: str | None = None
    installed: InstalledDistribution | None = None

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

    @property
    def release(self) -> str:
        """:attr:`provider` and the version, if known, as messages name them: ``omni-rt 1.2``."""
        return f"{self.provider} {self.version}" if self.version else self.provider


#: Installed entry points by backend name, as :func:`discover` gives them.
Discovered = Mapping[str, tuple[PluginEntryPoint, ...]]


def _metadata_path(dist: Distribution) -> object:
    """The traversable *dist* reads its metadata from (a directory, or a folder in a zip).

    :class:`~importlib.metadata.PathDistribution` keeps it in ``_path`` and
    offers no public name for it; a distribution of another finder may have
    none (``None``). Used only to name a distribution whose ``METADATA``
    cannot be read, and to refuse a FIFO before ``read_text`` opens it.
    """
    return getattr(dist, "_path", None)


def is_regular_file(path: str | os.PathLike[str]) -> bool:
    """Whether *path* is a regular file: opening a FIFO blocks until a writer comes."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


#: A header line, as the email parser behind ``dist.metadata`` tells one: a name of printable
#: ASCII but ``:``, then ``:``.
_HEADER_LINE = re.compile(r"[\041-\071\073-\176]*:")
#: A line and its end, CR or LF alone, as the email parser ends one; found one at a time.
_LINE = re.compile(r"([^\r\n]*)(?:\r\n|\r|\n|$)")


def header_block(text: str) -> Iterator[tuple[str, str]]:
    """The headers of a ``METADATA`` file, ``(lower-cased name, value)``, read as the email
    parser behind ``dist.metadata`` reads them, without parsing the rest of the file: lines
    end at CR or LF alone (not at NEL or a form feed), a line opening with a space or tab
    continues the header before it, and the block ends at a blank line or at a line that is
    no header."""
    headers: list[list[str]] = []
    for line in (match[1] for match in _LINE.finditer(text)):
        if line[:1] in (" ", "\t") and headers:
            headers[-1][1] += "\n" + line
        elif _HEADER_LINE.match(line):
            key, _, value = line.partition(":")
            headers.append([key.lower(), value.lstrip(" \t")])
        else:
            break
    for key, value in headers:
        yield key, value


def has_metadata(dist: Distribution, filename: str) -> bool:
    """Whether *dist* may hold *filename*, without reading it: on disk, whether its metadata
    directory holds it; elsewhere (a zip, another finder) ``True``, ``read_text`` deciding.

    :raises OSError: it exists on disk but is not a regular file (a FIFO would block the read).
    """
    root = _metadata_path(dist)
    if not isinstance(root, pathlib.Path):
        return True
    path = root / filename
    if not os.path.lexists(path):
        return False
    if not is_regular_file(path):
        raise OSError(f"{path} is not a regular file")
    return True


def read_metadata(dist: Distribution, filename: str) -> str | None:
    """``dist.read_text(filename)``, refusing what would block it; ``None`` when it has none.

    :raises OSError: it exists on disk but is not a regular file, or cannot be read.
    :raises UnicodeDecodeError: it is not UTF-8.
    """
    return dist.read_text(filename) if has_metadata(dist, filename) else None


def metadata_text(dist: Distribution) -> str | None:
    """*dist*'s ``METADATA``, else an egg's ``PKG-INFO`` (:func:`read_metadata`), else ``None``.

    :raises OSError, UnicodeDecodeError: as :func:`read_metadata`.
    """
    return read_metadata(dist, "METADATA") or read_metadata(dist, "PKG-INFO")


def _identity(dist: Distribution) -> tuple[str, str | None]:
    """*dist*'s ``Name`` and ``Version``; raises when its ``METADATA`` is missing or unreadable."""
    # Only the two header fields are needed: read them from the header block
    # rather than parse the whole file (a long description included) with
    # the email parser, as ``dist.metadata`` would, for every plugin listed.
    text = metadata_text(dist)
    if text is None:
        raise ValueError("it has no METADATA")
    fields: dict[str, str] = {}
    for key, value in header_block(text):
        fields.setdefault(key, value)
    if not fields.get("name"):
        raise ValueError("its METADATA names no distribution")
    return fields["name"], fields.get("version")


def _key(dist: Distribution) -> str | int:
    """*dist*'s normalized name (PEP 503), as :mod:`importlib.metadata` compares them: its
    directory's, else its ``METADATA``'s; its id if neither, so that it stands alone."""
    # What importlib.metadata reads first, opening no file.
    name = _directory_name(dist)
    if name is None:
        try:
            name = _identity(dist)[0]
        except Exception:  # noqa: BLE001
            # Reported when its entry points are read.
            return id(dist)
    return normalize_distribution(name)


def distributions() -> list[InstalledDistribution]:
    """Every installed distribution in :data:`sys.path` order, one per normalized name.

    A later distribution of a name already seen is one of the first one's
    :attr:`~InstalledDistribution.shadowed`; one whose name cannot be read at
    all stands alone. Reads no file of a ``*.dist-info`` directory.
    """
    found: dict[str | int, list[Distribution]] = {}
    for dist in importlib.metadata.distributions():
        copies = found.setdefault(_key(dist), [])
        # One directory reached through two entries of sys.path (the working directory,
        # and its name in PYTHONPATH) is one copy; only a name seen again is looked at.
        if not copies or not _same_directory(dist, copies):
            copies.append(dist)
    return [InstalledDistribution(first, tuple(shadowed)) for first, *shadowed in found.values()]


def _same_directory(dist: Distribution, copies: list[Distribution]) -> bool:
    """Whether *dist*'s metadata directory is one of *copies*', reached by another path."""
    where = _metadata_path(dist)
    if where is None:
        return False
    real = os.path.realpath(str(where))
    return any(
        os.path.realpath(str(other)) == real
        for other in map(_metadata_path, copies)
        if other is not None
    )


@functools.cache
def _warn_once(message: str, *args: object) -> None:
    """Log a WARNING about a distribution once per process, however many groups are read."""
    LOG.warning(message, *args)


def discover(
    group: str = SERVE_BACKENDS_GROUP, installed: Iterable[InstalledDistribution] | None = None
) -> dict[str, tuple[PluginEntryPoint, ...]]:
    """Return the installed entry points of *group*, by backend name, each sorted by provider.

    Every entry point :func:`importlib.metadata.entry_points` would give, with
    the same shadowing; nothing is imported, and only regular metadata files
    are opened. A distribution whose ``METADATA`` cannot be used still
    contributes its entry points under its metadata directory's name
    (:attr:`PluginEntryPoint.problem`); one whose ``entry_points.txt`` cannot
    be read is skipped. Each case logs one WARNING naming the path.

    :param installed: the distributions to read, :func:`distributions` by default.
    """
    found: dict[str, list[PluginEntryPoint]] = {}
    for dist in distributions() if installed is None else installed:
        for plugin in _plugins(dist, group):
            found.setdefault(plugin.name, []).append(plugin)
    return {name: tuple(sorted(found[name], key=lambda e: e.provider)) for name in found}


def _plugins(installed: InstalledDistribution, group: str) -> list[PluginEntryPoint]:
    """*installed*'s entry points of *group*; each problem with its metadata logged once."""
    try:
        selected = installed.entry_points(group)
    except Exception as exc:  # noqa: BLE001
        # One broken distribution must not hide all.
        _warn_once(
            "Ignoring the entry points of %s: its entry_points.txt cannot be read (%s)",
            _named(installed),
            _malformed_line(installed.distribution) or describe_typed(exc),
        )
        return []
    for other in sorted({ep.group for ep in installed.all_entry_points} - {group}):
        # A typo no host forgives: its plugins are never seen.
        if _spelt(other) == _spelt(group):
            _warn_once(
                "Ignoring the entry points of %s in group %r, which nothing reads; "
                "did you mean %r?",
                _named(installed),
                other,
                group,
            )
    if not selected:
        return []
    problem = None
    name: str | None
    try:
        name, version = _identity(installed.distribution)
    except Exception as exc:  # noqa: BLE001
        # Its entry points are still served, as importlib.metadata.entry_points() (and so
        # `sglang serve`) still gives them.
        name = _directory_name(installed.distribution)
        version = None
        problem = f"metadata unreadable: {installed.location}"
        _warn_once(
            "Using the entry points of the distribution at %s %s: its METADATA is unreadable (%s)",
            installed.location,
            f"under the name {name!r}" if name else "without a name",
            describe_typed(exc),
        )
    return [
        PluginEntryPoint(ep.name, ep.value, name, version, ep, problem, installed)
        for ep in selected
    ]


def _named(installed: InstalledDistribution) -> str:
    """``distribution NAME at PATH``, or ``the distribution at PATH`` when it has no name."""
    try:
        return f"distribution {_identity(installed.distribution)[0]} at {installed.location}"
    except Exception:  # noqa: BLE001
        # Its METADATA is in trouble too.
        return f"the distribution at {installed.location}"


# Cached: a few group names, met in every distribution.
@functools.cache
def _spelt(group: str) -> str:
    """*group* as a typo would not change it: case, separators and a plural ``s`` dropped."""
    return re.sub(r"[-_.\s]+", ".", group.lower()).rstrip("s")


def _malformed_line(dist: Distribution) -> str | None:
    """The first line of *dist*'s ``entry_points.txt`` that is no entry point, as
    :mod:`importlib.metadata` reads the file (a line not blank, no ``#`` comment, no
    ``[group]``, must hold ``=``), or ``None``."""
    try:
        text = read_metadata(dist, "entry_points.txt") or ""
    except Exception:  # noqa: BLE001
        # The caller says why it cannot be read.
        return None
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.strip()
        if entry and not entry.startswith(("#", "[")) and "=" not in entry:
            return f"line {number}, {entry!r}, has no '='"
    return None


def _directory_name(dist: Distribution) -> str | None:
    """The distribution name *dist*'s metadata directory bears (``NAME-VERSION.dist-info``).

    ``None`` for an ``EGG-INFO`` directory, which bears none.
    """
    root = _metadata_path(dist)
    stem, suffix = os.path.splitext(getattr(root, "name", ""))
    if suffix not in (".dist-info", ".egg-info"):
        return None
    return stem.partition("-")[0] or None


#: A valid distribution name (PEP 508): what pip and packaging take, and safe in a shell.
DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def normalize_distribution(name: str) -> str:
    """Normalize a distribution name as packaging tools compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_qualified_name(name: object) -> tuple[str | None, str]:
    """Split ``DIST:NAME`` into ``(DIST, NAME)``; a plain name gives ``(None, NAME)``.

    At the first colon: a distribution name cannot hold one (PEP 508), an entry
    point's name can (``dist-a:ns:omni`` is ``ns:omni`` from ``dist-a``). A value that is
    no string (``get(None)``) names nothing: ``(None, "")``.
    """
    # No string names nothing, as upstream answers it.
    if not isinstance(name, str):
        return None, ""
    dist, colon, backend = name.partition(":")
    # A plain name: no colon, or nothing before it.
    if not colon or not dist:
        return None, name
    return dist, backend
