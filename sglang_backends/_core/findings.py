"""Findings: what will break, read from package metadata before anything loads.

Three things an operator can be told in advance, each a pure reading of
:mod:`importlib.metadata` (nothing here imports a plugin):

* a plugin distribution's ``Requires-Dist`` lines that what is installed does
  not meet (:func:`unmet_text`), evaluated with :mod:`packaging` as pip
  would: markers for this interpreter, requirements of extras nobody asked
  for skipped;
* SGLang's general plugins (entry-point group ``sglang.srt.plugins``) and
  whether the next serve runs them (:func:`general_plugins`), by the rules of
  SGLang's ``load_plugins``: ``SGLANG_PLUGINS``, a comma-separated allow-list
  (unset or empty allows all), and ``SGLANG_PLATFORM``, which skips the
  general plugins of the distributions providing another platform;
* later copies of a distribution on the path, which the first copy shadows
  (:func:`shadowed_text`).

The commands render these; serve reads only which general plugins would run,
to import SGLang only then, and the registry only :func:`unmet_clause`, once a
load has failed. ``SGLANG_PLUGINS`` is read by
:func:`sglang_backends._core.names.general_plugins_allowed`, which serve uses too.
:mod:`packaging` is imported only to parse a requirement that is more than a name.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from sglang_backends._core.discovery import (
    DISTRIBUTION_NAME,
    InstalledDistribution,
    PluginEntryPoint,
    discover,
    header_block,
    metadata_text,
    normalize_distribution,
    read_metadata,
)
from sglang_backends._core.names import GENERAL_PLUGINS_GROUP, general_plugins_allowed

if TYPE_CHECKING:
    from importlib.metadata import Distribution

LOG = logging.getLogger(__name__)

#: Entry-point group of SGLang's hardware platform plugins (``SGLANG_PLATFORM`` picks one).
PLATFORM_PLUGINS_GROUP = "sglang.srt.platforms"

#: A general plugin's status: the next serve runs it.
RUNS = "runs before serve"
#: A general plugin's status: ``SGLANG_PLUGINS`` leaves it out.
NOT_ALLOWED = "not in SGLANG_PLUGINS"
#: A general plugin's status: its distribution provides a platform ``SGLANG_PLATFORM`` did not pick.
OTHER_PLATFORM = "skipped: its distribution's platform is not SGLANG_PLATFORM"
#: A general plugin's status without SGLang, which is what runs them (when no filter of
#: SGLang's leaves it out: those say so, with or without SGLang); ``list`` adds what to
#: install.
NEEDS_SGLANG = "needs SGLang, which runs it"


def _unmet(line: str, dist: Distribution) -> str | None:
    """What requirement *line* of *dist* lacks here; ``None`` when it is met or not for
    this environment (its marker). A line no tool could read cannot be met: it is said to
    be invalid. Only a line that is more than a name is parsed."""
    # A name alone (no version, marker or extra): installed is enough, and no parser is needed.
    if DISTRIBUTION_NAME.fullmatch(line):
        return f"{line} (not installed)" if _installed_version(line) is None else None
    from packaging import requirements, version

    try:
        requirement = requirements.Requirement(line)
    except requirements.InvalidRequirement as exc:
        LOG.debug("The requirement %r of %r is invalid: %s", line, dist, exc)
        return f"{line} (not a valid requirement)"
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        return None
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    wanted = f"{requirement.name}{extras}{requirement.specifier}"
    installed = _installed_version(requirement.name)
    if installed is None:
        return f"{wanted} (not installed)"
    try:
        met = requirement.specifier.contains(version.Version(installed), prereleases=True)
    except version.InvalidVersion:
        met = False
    return None if met else f"{wanted} (installed: {installed})"


def _requires(dist: Distribution) -> list[str]:
    """*dist*'s ``Requires-Dist`` lines; none when its metadata cannot be read.

    An egg's ``requires.txt``, outside the header block, is left to ``dist.requires``.
    """
    try:
        metadata = read_metadata(dist, "METADATA")
        if metadata is None and read_metadata(dist, "requires.txt"):
            return list(dist.requires or ())
        return _header(metadata or read_metadata(dist, "PKG-INFO"), "Requires-Dist")
    except Exception as exc:  # noqa: BLE001
        # Discovery already warned about its metadata.
        LOG.debug("Cannot read the requirements of %r: %s", dist, exc)
        return []


def _header(text: str | None, field: str) -> list[str]:
    """Every value of *field* in the header block of *text*, a distribution's ``METADATA``
    (:func:`~sglang_backends._core.discovery.metadata_text`): the header alone, as
    discovery reads Name."""
    return [v for key, v in header_block(text or "") if key == field.lower()]


def _installed_version(name: str) -> str | None:
    """The installed version of distribution *name*, ``None`` when it is not installed."""
    try:
        versions = _header(metadata_text(importlib.metadata.distribution(name)), "Version")
    except importlib.metadata.PackageNotFoundError:
        return None
    except Exception:  # noqa: BLE001
        # Unreadable metadata: installed, version unknown.
        return "unknown"
    return versions[0] if versions and versions[0] else "unknown"


#: Each distribution's unmet requirements, kept while the distribution is (a registry
#: or a command holds it): 10,000 failing entry points of one distribution read its
#: metadata once, not 10,000 times.
_UNMET: weakref.WeakKeyDictionary[Distribution, str] = weakref.WeakKeyDictionary()


def unmet_text(plugin: PluginEntryPoint) -> str | None:
    """*plugin*'s distribution's requirements that are not met, with what is installed,
    joined by "; ": empty when all are met, ``None`` when its metadata could not be read
    (nothing is known).

    ``sglang==0.5.22 (installed: 0.5.23)``, ``torch==2.14.1 (not installed)``.
    A requirement whose marker is false for this interpreter, or which only an
    extra asks for (no extra is requested), is skipped; so is a line
    :mod:`packaging` cannot parse. A pre-release installed meets a
    specifier, as it does for pip once installed. :mod:`packaging` (some 25 ms
    to import) is imported only for a requirement that is more than a name.
    """
    if plugin.problem is not None or plugin.installed is None:
        return None
    dist = plugin.installed.distribution
    if dist not in _UNMET:
        unmet = [_unmet(line, dist) for line in _requires(dist)]
        _UNMET[dist] = "; ".join(clause for clause in unmet if clause is not None)
    return _UNMET[dist]


def unmet_clause(plugin: PluginEntryPoint) -> str:
    """``unmet requirements of DIST VERSION: …``, to end a line about *plugin*; or empty."""
    text = unmet_text(plugin)
    return f"unmet requirements of {plugin.release}: {text}" if text else ""


class GeneralPlugin(NamedTuple):
    """One installed ``sglang.srt.plugins`` entry point and whether serve runs it."""

    plugin: PluginEntryPoint
    status: str


def general_plugins(
    installed: Iterable[InstalledDistribution], *, sglang: bool
) -> list[GeneralPlugin]:
    """Every general plugin of *installed*, sorted by name then provider, with its status
    under this process's ``SGLANG_PLUGINS`` and ``SGLANG_PLATFORM``.

    :param installed: the distributions to read (a survey's), so the path is read once.
    :param sglang: whether SGLang, which runs them, is installed.
    """
    installed = tuple(installed)
    found = discover(GENERAL_PLUGINS_GROUP, installed)
    allowed = general_plugins_allowed()
    # The distributions providing a platform SGLANG_PLATFORM did not pick (normalized).
    platform = os.environ.get("SGLANG_PLATFORM", "")
    platforms = discover(PLATFORM_PLUGINS_GROUP, installed) if platform else {}
    excluded = distributions_of(
        plugin for name, providers in platforms.items() if name != platform for plugin in providers
    )
    plugins: list[GeneralPlugin] = []
    for name in sorted(found):
        for plugin in found[name]:
            # SGLang's own filters first: what they leave out would not run with SGLang either.
            if allowed is not None and name not in allowed:
                status = NOT_ALLOWED
            elif normalize_distribution(plugin.distribution or "") in excluded:
                status = OTHER_PLATFORM
            elif not sglang:
                status = NEEDS_SGLANG
            else:
                status = RUNS
            plugins.append(GeneralPlugin(plugin, status))
    return plugins


def shadowed_text(plugin: PluginEntryPoint) -> str:
    """The copies of *plugin*'s distribution after the first on the path, which is the one
    used (discovery keeps them), ``VERSION at PATH`` joined by "; "; empty when there is one.
    """
    copies = []
    for dist in plugin.installed.shadowed if plugin.installed is not None else ():
        try:
            text = metadata_text(dist)
        except Exception:  # noqa: BLE001
            # An unreadable copy is still a copy.
            text = None
        version = next(iter(_header(text, "Version")), None)
        copy = f"{version or 'unknown version'} at {dist.locate_file('')}"
        # Taken for a copy by its directory's name (vlm-fast-1.0.dist-info is "vlm"), as
        # importlib.metadata takes it, though its METADATA names another distribution.
        named = next(iter(_header(text, "Name")), None)
        first = plugin.distribution
        if named and first and normalize_distribution(named) != normalize_distribution(first):
            copy += f" (its METADATA names {named})"
        copies.append(copy)
    return "; ".join(copies)


def distributions_of(plugins: Iterable[PluginEntryPoint]) -> dict[str, PluginEntryPoint]:
    """The first plugin of each distribution among *plugins*, by normalized name, in order."""
    first: dict[str, PluginEntryPoint] = {}
    for plugin in plugins:
        if plugin.distribution:
            first.setdefault(normalize_distribution(plugin.distribution), plugin)
    return first
