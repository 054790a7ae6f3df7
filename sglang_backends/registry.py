"""The registry: built-ins plus installed plugins, resolved, loaded, validated, memoised.

:class:`ServeBackendRegistry` re-implements SGLang's registry of the same
name on stevedore (:mod:`~sglang_backends._core.selection` decides which plugins
may be used, :mod:`~sglang_backends._core.loading` loads them). Listing imports
neither plugins nor stevedore.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial

from sglang_backends import errors
from sglang_backends._core import selection
from sglang_backends._core.detection import DetectionOutcome, DetectionReport, Verdict, report
from sglang_backends._core.discovery import PluginEntryPoint
from sglang_backends._core.inventory import Inventory, take_inventory
from sglang_backends._core.loading import BackendLoad, Loads, load_each_within, load_once
from sglang_backends._core.names import FALLBACK_BACKEND
from sglang_backends._core.progress import Progress
from sglang_backends._core.selection import PluginRecord, PluginStatus
from sglang_backends._core.settings import (
    DEFAULT_DETECT_TIMEOUT,
    DEFAULT_LOAD_TIMEOUT,
    Settings,
    seconds,
)
from sglang_backends._sglang.builtins import default_builtins
from sglang_backends.contract import RegisteredServeBackend, ServeBackend, ServeRequest

__all__ = [
    "BuiltinBackend",
    "DetectionOutcome",
    "DetectionReport",
    "PluginRecord",
    "PluginStatus",
    "Progress",
    "ServeBackendRegistry",
    "Verdict",
]


#: A built-in: a backend, or a zero-argument factory returning one.
BuiltinBackend = ServeBackend | Callable[[], ServeBackend]


class ServeBackendRegistry:
    """Built-in and installed serve backends, loaded on demand.

    Used as stevedore's managers are: ``ServeBackendRegistry()`` sees SGLang's
    built-ins and every installed plugin; :meth:`names` lists what may be
    asked for, importing nothing; ``registry[name]`` (:meth:`get`) loads one.

    :param builtins: built-in backends by name, in listing order: each a
        :class:`ServeBackend`, or a zero-argument factory returning one (a
        *lazy* built-in, loaded on first use like a plugin). By default
        SGLang's: ``llm`` and ``diffusion``, which need SGLang only to run.
    :param enabled: plugin names that may be used; ``None`` allows all.
    :param disabled: plugin names that may not be used. A plugin outside the
        selection is never imported and is not listed.
    :param detect_timeout: seconds each detector may run during
        :meth:`auto_detect` before it counts as inconclusive.
    :param load_timeout: seconds each candidate's load (its import and
        factory call, or a lazy built-in's factory) may take during
        :meth:`auto_detect` before it is skipped. :meth:`get` is unbounded.
    :param selection_origins: where the lists were set, ``{"enabled": ...,
        "disabled": ..., "preferred": ...}``, for the warning about names not installed
        and the errors naming a plugin the lists leave out.
    :param preferred: backend names in order of preference: when several
        detectors match, :meth:`explain` selects the first of them listed.
    :param inventory: the inventory a command already took
        (:func:`~sglang_backends._core.inventory.take_inventory`), whose built-ins,
        selection and origins this registry uses, without reading package
        metadata or warning again; then give none of *builtins*, *enabled*,
        *disabled* and *selection_origins*.
    :raises BackendConflictError: a usable plugin claims a reserved or built-in name.
    :raises ConfigurationError: a built-in is named ``auto`` or a timeout is not a number of
        seconds from :data:`~sglang_backends._core.settings.MIN_TIMEOUT` to
        :data:`~sglang_backends._core.settings.MAX_TIMEOUT` (a ``ValueError``); *enabled* or
        *disabled* is a string, not a collection (a ``TypeError`` too).
    """

    def __init__(
        self,
        builtins: Mapping[str, BuiltinBackend] | None = None,
        *,
        enabled: Iterable[str] | None = None,
        disabled: Iterable[str] = (),
        detect_timeout: float = DEFAULT_DETECT_TIMEOUT,
        load_timeout: float = DEFAULT_LOAD_TIMEOUT,
        selection_origins: Mapping[str, str] | None = None,
        preferred: Iterable[str] = (),
        inventory: Inventory | None = None,
    ) -> None:
        self.detect_timeout = timeout_argument("detect_timeout", detect_timeout)
        self.load_timeout = timeout_argument("load_timeout", load_timeout)
        if inventory is None:
            # A copy, as upstream's dict(builtins): the caller's later edits are not ours.
            builtins = default_builtins() if builtins is None else dict(builtins)
            # Before tuple() splits a string into letters; take_inventory trusts its Settings.
            selection.check_lists(builtins, enabled, disabled, preferred)
            # Read once: it may be an iterator.
            preferred = tuple(preferred)
            selected = Settings(
                enabled=None if enabled is None else tuple(enabled),
                disabled=tuple(disabled),
                preferred=preferred,
                # Where the caller says each list was set, as Settings.list_origins gives it.
                flag_origins=tuple((selection_origins or {}).items()),
            )
            inventory = take_inventory(selected, builtins)
        elif (builtins, enabled, selection_origins, tuple(disabled)) != (None, None, None, ()):
            raise TypeError("an inventory brings its own builtins, selection and origins")
        self._builtins = dict(inventory.builtins)
        self.preferred = tuple(preferred)
        #: What is installed and usable under the selection; the commands show the same.
        self.inventory = inventory
        # One load per backend, shared by every caller.
        self._loads: Loads = {}
        # Loaded backends by the name they were asked for: no waiting.
        self._by_name: dict[str, RegisteredServeBackend] = {
            name: RegisteredServeBackend(name=name, backend=backend)
            for name, backend in self._builtins.items()
            if isinstance(backend, ServeBackend)
        }
        # Conflicts are refused as upstream's constructor refuses them.
        selection.refuse_conflicts(inventory.conflicts)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        builtins: Mapping[str, BuiltinBackend] | None = None,
        *,
        inventory: Inventory | None = None,
    ) -> ServeBackendRegistry:
        """The registry *settings* describe; every entry point builds its registry here.

        :param builtins: SGLang's by default, as for the constructor.
        :param inventory: the command's own, taken under *settings* (then its built-ins
            are the registry's): package metadata is read, and the operator warned, once.
        :raises ConfigurationError, BackendConflictError: as the constructor's; without
            *inventory*, the lists of *settings* are checked as the constructor's are.
        """
        if inventory is None:
            builtins = default_builtins() if builtins is None else dict(builtins)
            selection.check_lists(builtins, settings.enabled, settings.disabled, settings.preferred)
            inventory = take_inventory(settings, builtins)
        elif builtins is not None:
            raise TypeError("an inventory brings its own builtins")
        return cls(
            detect_timeout=settings.detect_timeout,
            load_timeout=settings.load_timeout,
            preferred=settings.preferred,
            inventory=inventory,
        )

    @property
    def available_names(self) -> tuple[str, ...]:
        """Built-in names in their given order, then usable plugin names sorted; imports nothing."""
        return self.inventory.available_names

    def names(self) -> list[str]:
        """The names :meth:`get` may be given (:attr:`available_names`); imports nothing."""
        return list(self.available_names)

    def __getitem__(self, name: str) -> RegisteredServeBackend:
        """``registry[name]`` is :meth:`get`: the backend *name*, loaded on first use."""
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        """:meth:`names`, as a mapping iterates its keys (``list(registry)``); imports nothing."""
        return iter(self.available_names)

    def __repr__(self) -> str:
        """The names it offers, as a REPL shows it; imports nothing."""
        return f"<{type(self).__name__}: {', '.join(self.available_names)}>"

    def __contains__(self, name: object) -> bool:
        """Whether *name* is one of :meth:`names`; imports nothing."""
        return name in self.available_names

    @property
    def builtin_names(self) -> tuple[str, ...]:
        """The built-in backend names, in their given order."""
        return tuple(self._builtins)

    @property
    def plugins(self) -> tuple[PluginRecord, ...]:
        """Every installed plugin entry point with its status; imports nothing."""
        return self.inventory.records

    def plugin_of(self, registered: RegisteredServeBackend) -> PluginEntryPoint | None:
        """The installed entry point *registered* was loaded from; ``None`` for a built-in."""
        if registered.name in self._builtins:
            return None
        wanted = (registered.name, registered.distribution)
        return next((r.plugin for r in self.plugins if (r.name, r.distribution) == wanted), None)

    def _load(self, name: str, progress: Progress | None) -> BackendLoad:
        """A load, not yet run, of the backend *name* designates, telling *progress* (if any)
        when it starts and ends."""
        return BackendLoad(name, self.inventory.by_name(name), self._builtins.get(name), progress)

    def get(self, name: str, *, progress: Progress | None = None) -> RegisteredServeBackend:
        """Return the backend *name*, importing only that plugin.

        *name* may be ``DIST:NAME`` to pick one provider of a name several
        distributions register; an entry point named exactly *name* wins.
        The result is memoised: concurrent callers, and factories asking for
        a sibling while :meth:`auto_detect` loads it, get the same object,
        and each factory runs once. A load its caller interrupts (the user's
        Ctrl-C, a ``BaseException`` from *progress*) is that caller's alone:
        the next to ask, or a thread awaiting it, loads the backend anew.

        :raises UnknownBackendError: no such backend (a ``ValueError``).
        :raises DisabledBackendError: installed but not selected (a ``ValueError``).
        :raises BackendConflictError: several providers and none picked.
        :raises BackendLoadError: import failed, the target is not callable,
            the factory raised (whatever it raised), the factory asked
            for its own backend, or the backend declares another contract version.
        :raises BackendTypeError: the factory did not return a ``ServeBackend``.
        :param progress: told as its load starts and ends, if it is loaded.
        """
        registered = self._by_name.get(name)
        if registered is None:
            registered = load_once(self._loads, self._load(name, progress))
            self._by_name[name] = registered
        return registered

    def explain(
        self, request: ServeRequest, *, progress: Progress | None = None
    ) -> DetectionReport:
        """Run automatic detection on *request* and report every step.

        Every available backend but ``llm`` is loaded within :attr:`load_timeout`,
        then detects within :attr:`detect_timeout`. A plugin's fault never raises:
        it is an ``error`` or ``timeout`` outcome, logged as a warning.

        :param progress: told as each load and detector starts and ends.
        :raises ConfigurationError: *request* is no ``ServeRequest`` (a ``TypeError``
            too), which every detector would be blamed for.
        """
        # A subclass, or SGLang's request class, taken by its name as its backend class is.
        given: object = request
        kind = type(given).__name__
        if not isinstance(given, ServeRequest) and kind != ServeRequest.__name__:
            raise errors.ConfigurationError(f"request must be a ServeRequest, got {kind}")
        names = [n for n in self.available_names if n != FALLBACK_BACKEND]
        fresh = partial(self._load, progress=progress)
        loaded = load_each_within(self._loads, names, fresh, timeout=self.load_timeout)
        return report(
            loaded,
            request,
            timeout=self.detect_timeout,
            preferred=self.preferred,
            progress=progress,
        )

    def auto_detect(
        self, request: ServeRequest, *, progress: Progress | None = None
    ) -> RegisteredServeBackend:
        """Choose the backend for *request*: the one match, else ``llm``.

        Returns within about ``load_timeout + detect_timeout``, unless a plugin
        holds the GIL (``serve``'s supervisor, another process, keeps that bound).

        :param progress: told as each load and detector starts and ends.
        :raises AmbiguousDetectionError: several backends matched (a
            ``RuntimeError``).
        :raises ConfigurationError: *request* is no ``ServeRequest`` (a ``TypeError`` too).
        """
        return self.get(self.explain(request, progress=progress).choice())


def timeout_argument(label: str, value: float) -> float:
    """*value*, the argument *label* (the registry's, the kit's), as a timeout
    (:func:`.settings.seconds`).

    :raises ConfigurationError: it is not one.
    """
    try:
        return seconds(value)
    except ValueError as exc:
        raise errors.ConfigurationError(f"Invalid value {value!r} for {label}: {exc}") from None
