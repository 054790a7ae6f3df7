"""Selection: which installed plugins may be used, and why not.

The enabled/disabled rules, applied to what discovery found: a plugin
outside the selection is never imported, none may take a reserved or
built-in name, and a name several distributions register is a duplicate.
Pure: no file access, no plugin import.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from sglang_backends._core.discovery import (
    DISTRIBUTION_NAME,
    Discovered,
    PluginEntryPoint,
    normalize_distribution,
    split_qualified_name,
)
from sglang_backends._core.names import RESERVED_SERVE_BACKEND_NAMES
from sglang_backends.errors import (
    BackendConflictError,
    ConfigurationError,
    DisabledBackendError,
    UnknownBackendError,
    backend_named,
    closest,
    did_you_mean,
    meant,
    refuse_string,
)

if TYPE_CHECKING:
    from sglang_backends._core.inventory import Inventory
    from sglang_backends._core.settings import Settings

LOG = logging.getLogger(__name__)


class PluginStatus(str, enum.Enum):
    """Why a plugin may or may not be used."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    DUPLICATE = "duplicate"
    CONFLICT = "conflicts with a built-in"

    @property
    def usable(self) -> bool:
        """Whether a plugin of this status may be loaded (a duplicate, as ``DIST:NAME``)."""
        return self in (PluginStatus.ENABLED, PluginStatus.DUPLICATE)


class PluginRecord(NamedTuple):
    """An installed plugin entry point and its status under a selection.

    Read flat: :attr:`name`, :attr:`distribution`, :attr:`version`, :attr:`target` and
    :attr:`status`; :attr:`plugin` is the entry point they come from.
    """

    plugin: PluginEntryPoint
    status: PluginStatus

    @property
    def name(self) -> str:
        """The backend name: what ``--model-type`` is given."""
        return self.plugin.name

    @property
    def distribution(self) -> str | None:
        """The providing distribution's name, if known."""
        return self.plugin.distribution

    @property
    def version(self) -> str | None:
        """The providing distribution's version, if known."""
        return self.plugin.version

    @property
    def target(self) -> str:
        """The factory, as ``module:attribute``."""
        return self.plugin.target


def designates(name: str, plugin: PluginEntryPoint) -> bool:
    """Whether *name*, ``NAME`` or ``DIST:NAME``, names *plugin*: the one ``DIST:NAME`` rule.

    ``DIST`` is compared as packaging tools compare distribution names
    (PEP 503). :func:`choose` lets an entry point named exactly *name* win.
    """
    if plugin.name == name:
        return True
    dist, plain = split_qualified_name(name)
    return (
        dist is not None
        and plain == plugin.name
        and normalize_distribution(dist) == normalize_distribution(plugin.distribution or "")
    )


def _designated(name: str, discovered: Discovered) -> Sequence[PluginEntryPoint]:
    """The entry points *name* designates: those named exactly *name*, else those
    ``DIST:NAME`` names (:func:`designates`), as :func:`choose` picks among them."""
    plain = split_qualified_name(name)[1]
    return discovered.get(name) or [c for c in discovered.get(plain, ()) if designates(name, c)]


def qualified(plugin: PluginEntryPoint, discovered: Discovered) -> str | None:
    """The ``DIST:NAME`` that picks *plugin* alone, or ``None`` when none does.

    Advice is given only where following it works: not for a plugin whose
    distribution is unknown, or registers the name more than once, or when
    an entry point is named exactly ``DIST:NAME``.
    """
    if not plugin.distribution:
        return None
    name = f"{plugin.distribution}:{plugin.name}"
    found = _designated(name, discovered)
    return name if len(found) == 1 and found[0] is plugin else None


def _example(providers: Iterable[PluginEntryPoint], discovered: Discovered) -> str | None:
    """The first ``DIST:NAME`` that picks one of *providers* (:func:`qualified`), if any."""
    return next((q for p in providers if (q := qualified(p, discovered))), None)


def _duplicate_text(
    name: str, providers: Sequence[PluginEntryPoint], discovered: Discovered
) -> str:
    """Why serve backend *name* has several *providers* and how to pick one: the one
    wording of a duplicate, with ``DIST:NAME`` advice only where it picks one.
    """
    groups: dict[object, list[PluginEntryPoint]] = {}
    for plugin in providers:
        key = normalize_distribution(plugin.distribution) if plugin.distribution else id(plugin)
        groups.setdefault(key, []).append(plugin)
    repeated = [
        f"{group[0].provider} registers serve backend {name!r} {len(group)} times: "
        f"{', '.join(p.target for p in group)}."
        for group in groups.values()
        if len(group) > 1
    ]
    # All from one distribution: no DIST:NAME picks one of them.
    if len(groups) == 1:
        return (
            f"Distribution {repeated[0]} No DIST:NAME picks one entry point of a distribution: "
            "uninstall it or choose another backend name, and ask its authors to register the "
            "name once."
        )
    listed = ", ".join(p.provider for p in providers)
    head = f"Multiple distributions register serve backend {name!r}: {listed}."
    example = _example(providers, discovered)
    if example is None:
        pick = "; no DIST:NAME picks one."
    else:
        pick = f", or select one provider as DIST:NAME (e.g. {example!r})."
    return " ".join(
        [head, *repeated, f"Uninstall one provider or choose another backend name{pick}"]
    )


def check_lists(
    builtin_names: Collection[str], enabled: object, disabled: object, preferred: object
) -> None:
    """Refuse a reserved built-in name and a list given as a string: the registry's check
    of what it is given (configuration's typed options give lists, and SGLang's built-ins).

    :raises ConfigurationError: a built-in is named ``auto``, or *enabled*, *disabled* or
        *preferred* is a string, not a collection (a ``TypeError`` too).
    """
    reserved = sorted(set(builtin_names) & RESERVED_SERVE_BACKEND_NAMES)
    if reserved:
        raise ConfigurationError(
            f"Reserved serve backend names cannot be used: {', '.join(reserved)}"
        )
    for label, names in (("enabled", enabled), ("disabled", disabled), ("preferred", preferred)):
        refuse_string(names, f"{label} must be a collection of backend names")


def classify(
    discovered: Discovered,
    builtin_names: Collection[str],
    *,
    enabled: Collection[str] | None,
    disabled: Collection[str],
) -> list[PluginRecord]:
    """Classify every discovered entry point, sorted by name then provider.

    A plugin outside the enabled/disabled selection is ``DISABLED`` whatever
    else is wrong with it, since it will never be loaded; otherwise a
    reserved or built-in name is a ``CONFLICT`` and a name with several
    providers a ``DUPLICATE``.
    """
    reserved = set(builtin_names) | RESERVED_SERVE_BACKEND_NAMES
    records: list[PluginRecord] = []
    for name, entries in sorted(discovered.items()):
        if name in disabled or (enabled is not None and name not in enabled):
            status = PluginStatus.DISABLED
        elif name in reserved:
            status = PluginStatus.CONFLICT
        elif len(entries) > 1:
            status = PluginStatus.DUPLICATE
        else:
            status = PluginStatus.ENABLED
        records.extend(PluginRecord(plugin, status) for plugin in entries)
    return records


def conflict_warning(plugin: PluginEntryPoint) -> str:
    """What to tell an operator about *plugin*, which claims a built-in or reserved name."""
    kind = "reserved" if plugin.name in RESERVED_SERVE_BACKEND_NAMES else "built-in"
    return (
        f"Plugin {plugin.name!r} from {plugin.release} claims the {kind} name "
        f"{plugin.name!r}; every serve fails until you uninstall it "
        f"({uninstall_command(plugin.distribution)}) or add {plugin.name!r} to disabled_backends"
    )


def uninstall_command(distribution: str | None) -> str:
    """``pip uninstall DIST``, for a name pip takes (PEP 508), which is also safe to paste
    into a shell; for any other, that it is uninstalled by hand."""
    if distribution is None:
        return "pip uninstall ..."
    if DISTRIBUTION_NAME.fullmatch(distribution):
        return f"pip uninstall {distribution}"
    return f"by hand: pip takes no distribution named {distribution!r}"


def refuse_conflicts(conflicts: Sequence[PluginEntryPoint]) -> None:
    """Refuse *conflicts*, the usable plugins that claim a reserved or built-in name.

    :raises BackendConflictError: naming every such plugin and its provider.
    """
    if conflicts:
        names = ", ".join(f"{p.name} (from {p.provider})" for p in conflicts)
        raise BackendConflictError(
            f"Out-of-tree serve backends cannot replace reserved or built-in backends: {names}",
            name=conflicts[0].name,
            distribution=conflicts[0].distribution,
        )


def left_out(name: str, inventory: Inventory) -> str | None:
    """Why *inventory*'s enabled/disabled lists leave installed plugin *name* out
    (``disabled by WHERE``, or not enabled), or ``None`` when they let it be used.

    The one wording of it, for every message that says so (of one plugin or several),
    with where that list was set
    (:meth:`~sglang_backends._core.settings.Settings.list_origins`).
    """
    if name in inventory.disabled:
        return f"disabled by {inventory.origins.get('disabled', 'the disabled list')}"
    if inventory.enabled is not None and name not in inventory.enabled:
        return f"not enabled by {inventory.origins.get('enabled', 'the enabled list')}"
    return None


def choose(name: str, inventory: Inventory) -> PluginEntryPoint:
    """The one installed plugin *name* designates (``NAME`` or ``DIST:NAME``) in *inventory*.

    An entry point named exactly *name* wins over reading *name* as
    ``DIST:NAME``, as upstream does. The errors say where the lists were set.

    :raises UnknownBackendError: nothing usable has that name (built-in and
        reserved names are never plugins).
    :raises DisabledBackendError: the lists exclude it.
    :raises BackendConflictError: several distributions provide it.
    """
    candidates = _designated(name, inventory.discovered)
    never = {*inventory.builtins, *RESERVED_SERVE_BACKEND_NAMES}
    if not candidates or candidates[0].name in never:
        values = ("auto", *inventory.available_names)
        raise unknown_backend(name, values, inventory, selected=True)
    plain = candidates[0].name
    why = left_out(plain, inventory)
    if why:
        remedy = "remove it from" if plain in inventory.disabled else "add it to"
        raise DisabledBackendError(
            f"{backend_named(plain, ', '.join(c.provider for c in candidates), start=True)} "
            f"is {why}; {remedy} that list to use it.",
            name=plain,
            distribution=candidates[0].distribution,
        )
    if len(candidates) > 1:
        raise BackendConflictError(
            _duplicate_text(plain, candidates, inventory.discovered),
            name=plain,
            providers=tuple(c.provider for c in candidates),
        )
    return candidates[0]


def unknown_backend(
    name: str, values: Collection[str], inventory: Inventory, *, selected: bool = False
) -> UnknownBackendError:
    """The one wording of a name that designates nothing usable, with the closest name
    (``; did you mean 'x'?``); a left-out one is said to be.

    ``DIST:NAME`` with a wrong ``DIST`` and an installed ``NAME`` is offered
    that name's ``DIST:NAME`` (:func:`qualified`), the closest distribution
    first; otherwise the closest of *values*, the installed names, and, for a
    name with a colon, each plugin's ``DIST:NAME`` that picks it.

    :param values: what may be given instead (``serve``: ``auto`` and the inventory's
        available names; ``check``: every built-in and installed plugin).
    :param inventory: every installed entry point and the built-in names, for the
        closest name.
    :param selected: whether the inventory's enabled and disabled lists may leave the
        closest name out, which is then said (where the lists were set too).
    """
    discovered = inventory.discovered
    dist, plain = split_qualified_name(name)
    # Each name that may be offered, and its plugin (None for a built-in of values).
    offers: dict[str, PluginEntryPoint | None] = {}
    if dist is not None and plain not in {*inventory.builtins, *RESERVED_SERVE_BACKEND_NAMES}:
        offers = {q: p for p in discovered.get(plain, ()) if (q := qualified(p, discovered))}
    if offers:
        close: str | None = closest(name, offers) or next(iter(offers))
    else:
        offers = dict.fromkeys(values)
        for providers in discovered.values():
            for plugin in providers:
                offers.setdefault(plugin.name, plugin)
                if dist is not None and (q := qualified(plugin, discovered)):
                    offers.setdefault(q, plugin)
        close = closest(name, offers)
    found = None if close is None else offers[close]
    suggestion = meant(close)
    why = left_out(found.name, inventory) if found and selected else None
    if found and why:
        suggestion = (
            f"; did you mean {close!r}? It is installed (from {found.provider}) but is {why}, "
            "so it is not available."
        )
    return UnknownBackendError(
        f"Unknown serve backend {name!r}{suggestion} Available values: {', '.join(values)}.",
        name=name,
    )


def warn_unknown_selection(
    settings: Settings,
    installed: Collection[str],
    builtin_names: Collection[str],
    origins: Mapping[str, str],
) -> dict[str, list[str]]:
    """Warn about names in *settings*' enabled/disabled/preferred lists that name no
    installed plugin.

    A typo in a list must not pass silently, nor a built-in's name, which
    changes nothing (the lists apply to plugins; built-ins are always
    available) unless a plugin claims that name. Each warning goes to this
    module's logger and, when *origins* maps ``"enabled"``, ``"disabled"`` or
    ``"preferred"`` to where that list was set (an option in a file, a
    command-line flag), says so. A built-in in the preferred list is no slip:
    a built-in's detector (diffusion's) may be preferred.

    :returns: by list (``enabled``, ``disabled``, ``preferred``), the names warned about
        as not installed, sorted; a built-in's name, warned about apart, is not among them.
    """
    # The installed names, joined once however many are unknown.
    listed: str | None = None
    lists = {
        "enabled": frozenset(settings.enabled or ()),
        "disabled": frozenset(settings.disabled),
        # As given: a name given twice is warned about twice.
        "preferred": settings.preferred,
    }
    unknown: dict[str, list[str]] = {label: [] for label in lists}
    for label, names in lists.items():
        origin = origins.get(label)
        for name in sorted(names):
            if name in installed:
                continue
            if name not in builtin_names:
                unknown[label].append(name)
                if listed is None:
                    listed = ", ".join(sorted(installed)) or "none"
                dist, plain = split_qualified_name(name)
                # The lists take no DIST:NAME: one that picks an installed plugin is no typo.
                missing = ": it takes names, not DIST:NAME" if dist and plain in installed else None
                LOG.warning(
                    "Serve backend %r in the %s list%s%s Installed plugins: %s%s",
                    name,
                    label,
                    missing or " is not installed",
                    meant(plain) if missing else did_you_mean(name, installed),
                    listed,
                    f" (check {origin})" if origin else "",
                )
            elif label != "preferred":
                # A built-in's detector may be preferred.
                LOG.warning(
                    "Built-in %r in the %s list changes nothing: the lists apply to plugins "
                    "only and built-ins are always available; remove it%s",
                    name,
                    label,
                    f" ({origin})" if origin else "",
                )
    return unknown


def not_asked(inventory: Inventory) -> tuple[list[str], set[str]]:
    """Why automatic detection asked none of the plugins *inventory* leaves out (one reason
    for those one list leaves out, one for each duplicate name), and their names.

    A plugin the lists refuse, saying which list and where; a name several
    distributions provide, with how to pick one.
    """
    discovered = inventory.discovered
    reasons: list[str] = []
    names: set[str] = set()
    # The plugins each list left out, by why: one clause.
    left: dict[str, list[str]] = {}
    for record in inventory.records:
        why = left_out(record.name, inventory)
        if why:
            names.add(record.name)
            left.setdefault(why, []).append(f"{record.name!r} from {record.plugin.provider}")
    for why, plugins in left.items():
        if len(plugins) == 1:
            reasons.append(f"plugin {plugins[0]} is {why}, so it was not asked")
        else:
            reasons.append(f"plugins {', '.join(plugins)} are {why}, so they were not asked")
    for name in sorted({r.name for r in inventory.records if r.status is PluginStatus.DUPLICATE}):
        names.add(name)
        listed = ", ".join(p.provider for p in discovered[name])
        example = _example(discovered[name], discovered)
        advice = (
            f"select one as DIST:NAME (e.g. {example!r})"
            if example
            else "no DIST:NAME picks one of them"
        )
        reasons.append(
            f"plugin {name!r} has duplicate providers ({listed}), so none was asked; {advice}"
        )
    return reasons, names
