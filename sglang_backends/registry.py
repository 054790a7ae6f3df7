"""The registry: built-ins plus installed plugins, resolved, loaded, validated, memoised.

:class:`ServeBackendRegistry` re-implements SGLang's registry of the same
name on stevedore. It resolves a name to one backend
(:mod:`~sglang_backends.selection` decides which plugins may be used),
loads it (:mod:`~sglang_backends.loading`, stevedore's managers), validates
what the factory returned and memoises it: every factory runs once, however
many threads ask. Automatic detection loads every candidate with a time
bound, then hands them to :mod:`~sglang_backends.detection`. Listing
imports neither plugins nor stevedore.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, cast

from sglang_backends.contract import (
    RESERVED_SERVE_BACKEND_NAMES,
    SERVE_BACKEND_API_VERSION,
    RegisteredServeBackend,
    ServeBackend,
    ServeRequest,
    coerce_backend,
)
from sglang_backends.detection import (
    DEFAULT_DETECT_TIMEOUT,
    DEFAULT_LOAD_TIMEOUT,
    FALLBACK_BACKEND,
    DetectionOutcome,
    DetectionReport,
    Verdict,
    describe,
    report,
    skipped,
)
from sglang_backends.discovery import (
    PluginEntryPoint,
    discover,
    normalize_distribution,
    split_qualified_name,
)
from sglang_backends.errors import (
    AmbiguousDetectionError,
    BackendAPIVersionError,
    BackendConflictError,
    BackendLoadError,
    BackendTypeError,
    DisabledBackendError,
    DuplicateBackendError,
    ReservedNameError,
    ServeBackendError,
    UnknownBackendError,
)
from sglang_backends.selection import (
    PluginRecord,
    PluginStatus,
    inventory,
    is_allowed,
    list_origins,
    warn_unknown_selection,
)

if TYPE_CHECKING:
    from sglang_backends.loading import Load
    from sglang_backends.settings import Settings

__all__ = ["FALLBACK_BACKEND", "BuiltinBackend", "ServeBackendRegistry"]

#: A built-in: a backend, or a zero-argument factory returning one.
BuiltinBackend = ServeBackend | Callable[[], ServeBackend]


class ServeBackendRegistry:
    """Built-in and installed serve backends, loaded on demand.

    :param builtins: built-in backends by name, in the order they are listed.
        A value is a :class:`ServeBackend`, or a zero-argument callable
        returning one (a *lazy* built-in), called on first use like a
        plugin's factory, so a built-in that imports a heavy host (SGLang)
        pays for it while loading, never while listing.
    :param enabled: plugin names that may be used; ``None`` allows all.
    :param disabled: plugin names that may not be used. A plugin outside the
        selection is never imported and is not listed.
    :param detect_timeout: seconds each detector may run during
        :meth:`auto_detect` before it counts as inconclusive.
    :param load_timeout: seconds each candidate's load (its import and
        factory call, or a lazy built-in's factory) may take during
        :meth:`auto_detect` before it is skipped. :meth:`get` is unbounded.
    :param selection_origins: where the lists were set, ``{"enabled": ...,
        "disabled": ...}``, so the warning about a listed name that is not
        installed can say where to fix it.
    :raises ReservedNameError: a built-in is named ``auto``.
    :raises BackendConflictError: a usable plugin claims a reserved or
        built-in name.
    :raises TypeError: *enabled* or *disabled* is a string, not a collection.
    :raises ValueError: a timeout is not a positive number.
    """

    def __init__(
        self,
        builtins: Mapping[str, BuiltinBackend],
        *,
        enabled: Iterable[str] | None = None,
        disabled: Iterable[str] = (),
        detect_timeout: float = DEFAULT_DETECT_TIMEOUT,
        load_timeout: float = DEFAULT_LOAD_TIMEOUT,
        selection_origins: Mapping[str, str] | None = None,
    ) -> None:
        reserved = sorted(set(builtins) & RESERVED_SERVE_BACKEND_NAMES)
        if reserved:
            raise ReservedNameError(
                f"Reserved serve backend names cannot be used: {', '.join(reserved)}"
            )
        for label, names in (("enabled", enabled), ("disabled", disabled)):
            if isinstance(names, str):
                raise TypeError(f"{label} must be a collection of backend names, not a string")
        for label, value in (("detect_timeout", detect_timeout), ("load_timeout", load_timeout)):
            if not 0 < value < float("inf"):
                raise ValueError(f"{label} must be > 0, got {value!r}")

        self._builtins = dict(builtins)
        self._enabled = None if enabled is None else frozenset(enabled)
        self._disabled = frozenset(disabled)
        self.detect_timeout = float(detect_timeout)
        self.load_timeout = float(load_timeout)
        self._discovered = discover()
        self._records = inventory(
            self._discovered, self._builtins, enabled=self._enabled, disabled=self._disabled
        )
        self._lock = threading.Lock()
        # One Load per backend (plugin entry point or built-in), shared by every caller.
        self._loads: dict[Hashable, Load] = {}
        # Loaded backends by the name they were asked for: no waiting.
        self._by_name: dict[str, RegisteredServeBackend] = {
            name: RegisteredServeBackend(name=name, backend=backend)
            for name, backend in self._builtins.items()
            if isinstance(backend, ServeBackend)
        }

        conflicts = [r.plugin for r in self._records if r.status is PluginStatus.CONFLICT]
        if conflicts:
            names = ", ".join(f"{p.name} (from {p.provider})" for p in conflicts)
            raise BackendConflictError(
                f"Out-of-tree serve backends cannot replace reserved or built-in backends: {names}",
                name=conflicts[0].name,
                distribution=conflicts[0].distribution,
            )
        warn_unknown_selection(
            self._discovered,
            self._builtins,
            enabled=self._enabled,
            disabled=self._disabled,
            origins=selection_origins,
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        builtins: Mapping[str, BuiltinBackend] | None = None,
        *,
        origins: Mapping[str, str] | None = None,
    ) -> ServeBackendRegistry:
        """The registry *settings* describe; every entry point builds its registry here.

        :param builtins: defaults to :func:`sglang_backends.builtins.default_builtins`.
        :param origins: where the enabled/disabled lists were set, for the
            warning about names not installed; by default ``settings.source``.
        """
        if builtins is None:
            from sglang_backends.builtins import default_builtins

            builtins = default_builtins()
        return cls(
            builtins,
            enabled=settings.enabled,
            disabled=settings.disabled,
            detect_timeout=settings.detect_timeout,
            load_timeout=settings.load_timeout,
            selection_origins=list_origins(settings.source) if origins is None else origins,
        )

    # -- listing ---------------------------------------------------------

    @property
    def available_names(self) -> tuple[str, ...]:
        """Built-in names in their given order, then usable plugin names sorted.

        Reads metadata only; no plugin is imported.
        """
        usable = (PluginStatus.ENABLED, PluginStatus.DUPLICATE)
        plugins = sorted({r.plugin.name for r in self._records if r.status in usable})
        return (*self._builtins, *plugins)

    @property
    def builtin_names(self) -> tuple[str, ...]:
        """The built-in backend names, in their given order."""
        return tuple(self._builtins)

    @property
    def plugins(self) -> tuple[PluginRecord, ...]:
        """Every installed plugin entry point with its status; imports nothing."""
        return tuple(self._records)

    # -- resolving ---------------------------------------------------------

    def _resolve(self, name: str) -> tuple[Hashable, PluginEntryPoint | None]:
        """The backend *name* designates: ``(key, plugin)``, ``plugin`` ``None`` for a built-in.

        An installed entry point named exactly *name* wins over reading it
        as ``DIST:NAME``.
        """
        if name in self._builtins:
            return ("built-in", name), None
        if name in self._discovered:
            dist, plain = None, name
        else:
            dist, plain = split_qualified_name(name)
        candidates = self._discovered.get(plain, ())
        if dist is not None:
            wanted = normalize_distribution(dist)
            candidates = tuple(
                c for c in candidates if normalize_distribution(c.distribution or "") == wanted
            )
        if not candidates or plain in self._builtins or plain in RESERVED_SERVE_BACKEND_NAMES:
            available = ", ".join(("auto", *self.available_names))
            raise UnknownBackendError(
                f"Unknown serve backend {name!r}. Available values: {available}.", name=name
            )
        if not is_allowed(plain, self._enabled, self._disabled):
            if plain in self._disabled:
                how = "it is in the disabled list; remove it from that list to use it"
            else:
                how = "it is not in the enabled list; add it to that list to use it"
            raise DisabledBackendError(
                f"Serve backend {plain!r} from {', '.join(c.provider for c in candidates)} "
                f"is disabled: {how}.",
                name=plain,
                distribution=candidates[0].distribution,
            )
        if len(candidates) > 1:
            providers = tuple(c.provider for c in candidates)
            raise DuplicateBackendError(
                f"Multiple distributions register serve backend {plain!r}: "
                f"{', '.join(providers)}. Uninstall one provider or choose another "
                f"backend name, or select one provider as DIST:NAME "
                f"(e.g. {providers[0] + ':' + plain!r}).",
                name=plain,
                providers=providers,
            )
        return candidates[0], candidates[0]

    def _claim(
        self, key: Hashable, name: str, plugin: PluginEntryPoint | None
    ) -> tuple[Load, bool]:
        """The :class:`~sglang_backends.loading.Load` of *key*, and whether the caller runs it."""
        from sglang_backends.loading import Load

        with self._lock:
            load = self._loads.get(key)
            if load is not None:
                return load, False
            provider = plugin.provider if plugin is not None else "built-in"
            load = self._loads[key] = Load(plugin.name if plugin else name, provider)
            return load, True

    # -- loading and validation -----------------------------------------------

    def get(self, name: str) -> RegisteredServeBackend:
        """Return the backend *name*, importing only that plugin.

        *name* may be ``DIST:NAME`` to pick one provider of a name several
        distributions register; an entry point named exactly *name* wins.
        The result is memoised: concurrent callers, and factories asking for
        a sibling while :meth:`auto_detect` loads it, get the same object,
        and each factory runs once.

        :raises UnknownBackendError: no such backend (a ``ValueError``).
        :raises DisabledBackendError: installed but not selected (a ``ValueError``).
        :raises DuplicateBackendError: several providers and none picked.
        :raises BackendLoadError: import failed, the target is not callable,
            the factory raised (whatever it raised), or the factory asked
            for its own backend.
        :raises BackendTypeError: the factory did not return a ``ServeBackend``.
        :raises BackendAPIVersionError: the backend declares another version.
        """
        registered = self._by_name.get(name)
        if registered is not None:
            return registered
        key, plugin = self._resolve(name)
        load, mine = self._claim(key, name, plugin)
        if mine:
            from sglang_backends.loading import load_one, notice_if_slow

            importer = (lambda: None) if plugin is None else partial(load_one, plugin)
            try:
                with notice_if_slow(load.name, load.provider):
                    load.run(partial(self._produce, plugin, load.name, importer))
            except BaseException:  # the user's Ctrl-C: forget this load, so it may be retried
                with self._lock:
                    self._loads.pop(key, None)
                raise
        elif not load.done and load.thread is threading.current_thread():
            raise BackendLoadError(
                f"Failed to load serve backend {load.name!r} from {load.provider}: its "
                "factory asked the registry for it while it was loading",
                name=load.name,
                distribution=plugin.distribution if plugin else None,
            )
        load.wait()
        registered = cast(RegisteredServeBackend, load.result())
        self._by_name[name] = registered
        return registered

    def _produce(
        self, plugin: PluginEntryPoint | None, name: str, importer: Callable[[], object]
    ) -> RegisteredServeBackend:
        """Import (*importer*), call the factory and validate: one backend's whole load."""
        from sglang_backends.loading import call_plugin_code

        where = "built-in serve backend" if plugin is None else "serve backend"
        provider = "" if plugin is None else f" from {plugin.provider}"
        distribution = None if plugin is None else plugin.distribution
        try:
            if plugin is None:
                factory = self._builtins[name]
            else:
                factory = importer()
                if not callable(factory):
                    raise TypeError("the entry point must resolve to a callable factory")
            obj = call_plugin_code(factory) if callable(factory) else factory
        except Exception as exc:
            raise BackendLoadError(
                f"Failed to load {where} {name!r}{provider}: {describe(exc)}",
                name=name,
                distribution=distribution,
            ) from exc
        backend = coerce_backend(obj)
        if backend is None:
            by = f" (provided by {plugin.provider})" if plugin is not None else ""
            raise BackendTypeError(
                f"{where[0].upper()}{where[1:]} {name!r} factory returned {type(obj).__name__}; "
                f"expected sglang_backends.ServeBackend{by}.",
                name=name,
                distribution=distribution,
            )
        if backend.api_version != SERVE_BACKEND_API_VERSION:
            raise BackendAPIVersionError(
                f"Serve backend {name!r}{provider} uses API version "
                f"{backend.api_version!r}; this sglang-backends release requires "
                f"version {SERVE_BACKEND_API_VERSION}.",
                name=name,
                distribution=distribution,
            )
        return RegisteredServeBackend(name=name, backend=backend, distribution=distribution)

    # -- automatic detection -----------------------------------------------

    def _load_for_detection(
        self, names: Iterable[str]
    ) -> list[RegisteredServeBackend | DetectionOutcome]:
        """Load every candidate, concurrently and bounded; failures become outcomes."""
        from sglang_backends.loading import Pending, load_concurrently

        slots: list[tuple[str, Load] | RegisteredServeBackend | DetectionOutcome] = []
        pending: list[Pending] = []
        for name in names:
            registered = self._by_name.get(name)
            if registered is not None:
                slots.append(registered)
                continue
            try:
                key, plugin = self._resolve(name)
            except ServeBackendError as exc:
                slots.append(skipped(name, exc.distribution, 0.0, str(exc)))
                continue
            load, mine = self._claim(key, name, plugin)
            if mine:
                pending.append(Pending(load, plugin, partial(self._produce, plugin, name)))
            slots.append((name, load))
        load_concurrently(pending, timeout=self.load_timeout)

        result: list[RegisteredServeBackend | DetectionOutcome] = []
        for slot in slots:
            if not isinstance(slot, tuple):
                result.append(slot)
                continue
            name, load = slot
            distribution = None if load.provider == "built-in" else load.provider
            if not load.done and load.started is not None:  # another caller's load, under way
                load.wait(max(0.0, load.started + self.load_timeout - time.perf_counter()))
            if not load.done:
                cause = (
                    f"loading from {load.provider} did not finish within "
                    f"{self.load_timeout:g} s (load_timeout)"
                )
                result.append(
                    skipped(name, distribution, self.load_timeout, cause, Verdict.TIMEOUT)
                )
                continue
            try:
                registered = cast(RegisteredServeBackend, load.result())
            except Exception as exc:  # noqa: BLE001 - a plugin's failure is its outcome
                result.append(skipped(name, distribution, load.seconds, str(exc)))
                continue
            self._by_name[name] = registered
            result.append(registered)
        return result

    def explain(self, request: ServeRequest) -> DetectionReport:
        """Run automatic detection on *request* and report every step.

        Candidates are all available backends but the fallback ``llm``.
        Each loads in a worker thread, bounded by :attr:`load_timeout`;
        detectors then run concurrently, each bounded by
        :attr:`detect_timeout`. Never raises for a plugin's fault: failures
        become ``error`` or ``timeout`` outcomes, logged as warnings.
        """
        names = [n for n in self.available_names if n != FALLBACK_BACKEND]
        candidates = self._load_for_detection(names)
        return report(candidates, request, timeout=self.detect_timeout)

    def auto_detect(self, request: ServeRequest) -> RegisteredServeBackend:
        """Choose the backend for *request*: the one match, else ``llm``.

        Returns within about ``load_timeout + detect_timeout`` whatever
        plugins do.

        :raises AmbiguousDetectionError: several backends matched (a
            ``RuntimeError``).
        """
        found = self.explain(request)
        if found.selected is None:
            raise AmbiguousDetectionError(
                f"Multiple serve backends matched this request: "
                f"{', '.join(found.matches)}. "
                "Select one explicitly with --model-type BACKEND.",
                matches=found.matches,
            )
        return self.get(found.selected)
