"""The registry: built-ins plus installed plugins, checked, loaded on demand.

:class:`ServeBackendRegistry` re-implements SGLang's registry of the same
name on stevedore. Discovery reads package metadata; stevedore's
``DriverManager`` (one backend) and ``NamedExtensionManager`` (automatic
detection) import only what is selected; the registry adds the checks:
reserved and built-in names, duplicate providers, the enabled/disabled
selection, factory validation and detection aggregation. Listing imports
neither plugins nor stevedore.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

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
    DetectionOutcome,
    DetectionReport,
    Verdict,
    describe,
    run_detectors,
)
from sglang_backends.discovery import (
    PluginEntryPoint,
    PluginRecord,
    PluginStatus,
    discover,
    inventory,
    is_allowed,
    normalize_distribution,
    split_qualified_name,
    warn_unknown_selection,
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

__all__ = ["FALLBACK_BACKEND", "ServeBackendRegistry"]

LOG = logging.getLogger(__name__)

#: The backend chosen when no detector claims a request.
FALLBACK_BACKEND = "llm"


class ServeBackendRegistry:
    """Built-in and installed serve backends, loaded on demand.

    :param builtins: built-in backends by name, in the order they are listed.
        A value is a :class:`ServeBackend`, or a zero-argument callable
        returning one (a *lazy* built-in): it is called on first use, like a
        plugin's factory, so a built-in that must import a heavy host (SGLang)
        pays for it while loading, never while listing or detecting.
    :param enabled: plugin names that may be used; ``None`` allows all.
    :param disabled: plugin names that may not be used. A plugin outside the
        selection is never imported and is not listed.
    :param detect_timeout: seconds each detector may run during
        :meth:`auto_detect` before it counts as inconclusive.
    :param selection_origins: where the lists were set, ``{"enabled": ...,
        "disabled": ...}`` (an option in a file, a flag), so the warning about
        a listed name that is not installed can say where to fix it.
    :raises ReservedNameError: a built-in is named ``auto``.
    :raises BackendConflictError: a usable plugin claims a reserved or
        built-in name.
    :raises TypeError: *enabled* or *disabled* is a string, not a collection.
    """

    def __init__(
        self,
        builtins: Mapping[str, ServeBackend | Callable[[], ServeBackend]],
        *,
        enabled: Iterable[str] | None = None,
        disabled: Iterable[str] = (),
        detect_timeout: float = DEFAULT_DETECT_TIMEOUT,
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
        if not detect_timeout > 0:
            raise ValueError(f"detect_timeout must be > 0, got {detect_timeout!r}")

        self._builtins = dict(builtins)
        self._enabled = None if enabled is None else frozenset(enabled)
        self._disabled = frozenset(disabled)
        self.detect_timeout = float(detect_timeout)
        self._discovered = discover()
        self._records = inventory(
            self._discovered,
            self._builtins,
            enabled=self._enabled,
            disabled=self._disabled,
        )
        self._lock = threading.RLock()
        self._loaded: dict[tuple[str | None, str], RegisteredServeBackend] = {
            (None, name): RegisteredServeBackend(name=name, backend=backend)
            for name, backend in self._builtins.items()
            if isinstance(backend, ServeBackend)
        }
        # Loaded plugins by entry point, so ``NAME`` and ``DIST:NAME`` share one.
        self._by_plugin: dict[PluginEntryPoint, RegisteredServeBackend] = {}

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

    # -- listing ---------------------------------------------------------

    @property
    def available_names(self) -> tuple[str, ...]:
        """Built-in names in their given order, then usable plugin names sorted.

        Reads metadata only; no plugin is imported.
        """
        plugins = sorted(
            {
                r.plugin.name
                for r in self._records
                if r.status in (PluginStatus.ENABLED, PluginStatus.DUPLICATE)
            }
        )
        return (*self._builtins, *plugins)

    @property
    def builtin_names(self) -> tuple[str, ...]:
        """The built-in backend names, in their given order."""
        return tuple(self._builtins)

    @property
    def plugins(self) -> tuple[PluginRecord, ...]:
        """Every installed plugin entry point with its status; imports nothing."""
        return tuple(self._records)

    # -- selection -------------------------------------------------------

    def get(self, name: str) -> RegisteredServeBackend:
        """Return the backend *name*, importing only that plugin.

        *name* may be ``DIST:NAME`` to pick one provider of a name several
        distributions register. The result is memoised; concurrent callers
        get the same object and a factory runs once.

        :raises UnknownBackendError: no such backend (a ``ValueError``).
        :raises DisabledBackendError: installed but not selected.
        :raises DuplicateBackendError: several providers and none picked.
        :raises BackendLoadError: import failed, the target is not callable or
            the factory raised.
        :raises BackendTypeError: the factory did not return a ``ServeBackend``.
        :raises BackendAPIVersionError: the backend declares another version.
        """
        dist, plain = split_qualified_name(name)
        key = (None if dist is None else normalize_distribution(dist), plain)
        registered = self._loaded.get(key)  # built-ins and loaded plugins: no waiting
        if registered is not None:
            return registered
        with self._lock:
            registered = self._loaded.get(key)
            if registered is None and dist is None and plain in self._builtins:
                registered = self._load_builtin(plain)
            elif registered is None:
                plugin = self._choose(name, dist, plain)
                registered = self._by_plugin.get(plugin)
                if registered is None:
                    registered = self._build(plugin, self._import(plugin))
                    self._by_plugin[plugin] = registered
                self._loaded[key] = registered
            return registered

    def _choose(self, name: str, dist: str | None, plain: str) -> PluginEntryPoint:
        """The single entry point *name* designates, or the error explaining why not."""
        candidates = self._discovered.get(plain, ())
        if dist is not None:
            wanted = normalize_distribution(dist)
            candidates = tuple(
                c
                for c in candidates
                if c.distribution and normalize_distribution(c.distribution) == wanted
            )
        if not candidates or plain in self._builtins or plain in RESERVED_SERVE_BACKEND_NAMES:
            available = ", ".join(("auto", *self.available_names))
            raise UnknownBackendError(
                f"Unknown serve backend {name!r}. Available values: {available}.",
                name=name,
            )
        if not is_allowed(plain, self._enabled, self._disabled):
            providers = ", ".join(c.provider for c in candidates)
            if plain in self._disabled:
                how = "it is in the disabled list; remove it from that list to use it"
            else:
                how = "it is not in the enabled list; add it to that list to use it"
            raise DisabledBackendError(
                f"Serve backend {plain!r} from {providers} is disabled: {how}.",
                name=plain,
                distribution=candidates[0].distribution,
            )
        if len(candidates) > 1:
            providers_t = tuple(c.provider for c in candidates)
            example = f"{providers_t[0]}:{plain}"
            raise DuplicateBackendError(
                f"Multiple distributions register serve backend {plain!r}: "
                f"{', '.join(providers_t)}. Uninstall one provider or choose another "
                f"backend name, or select one provider as DIST:NAME (e.g. {example!r}).",
                name=plain,
                providers=providers_t,
            )
        return candidates[0]

    # -- loading and validation -------------------------------------------

    @staticmethod
    def _load_error(plugin: PluginEntryPoint, exc: BaseException) -> BackendLoadError:
        return BackendLoadError(
            f"Failed to load serve backend {plugin.name!r} from {plugin.provider}: {describe(exc)}",
            name=plugin.name,
            distribution=plugin.distribution,
        )

    def _load_builtin(self, name: str) -> RegisteredServeBackend:
        """Call lazy built-in *name*'s factory, validate and memoise what it returns."""
        factory = self._builtins[name]
        try:
            obj = factory() if callable(factory) else factory
        except (Exception, SystemExit) as exc:
            raise BackendLoadError(
                f"Failed to load built-in serve backend {name!r}: {describe(exc)}", name=name
            ) from exc
        backend = coerce_backend(obj)
        if backend is None:
            raise BackendTypeError(
                f"Built-in serve backend {name!r} factory returned {type(obj).__name__}; "
                "expected sglang_backends.ServeBackend.",
                name=name,
            )
        registered = RegisteredServeBackend(name=name, backend=backend)
        self._loaded[(None, name)] = registered
        return registered

    def _import(self, plugin: PluginEntryPoint) -> object:
        """Import *plugin*'s target through stevedore's ``DriverManager``."""
        from sglang_backends.loading import load_one  # stevedore: only once loading

        try:
            return load_one(plugin)
        except Exception as exc:
            raise self._load_error(plugin, exc) from exc

    def _build(self, plugin: PluginEntryPoint, target: object) -> RegisteredServeBackend:
        """Call the factory *target* and validate what it returns."""
        try:
            if not callable(target):
                raise TypeError("the entry point must resolve to a callable factory")
            obj = target()
        except (Exception, SystemExit) as exc:
            raise self._load_error(plugin, exc) from exc

        backend = coerce_backend(obj)
        if backend is None:
            raise BackendTypeError(
                f"Serve backend {plugin.name!r} factory returned {type(obj).__name__}; "
                f"expected sglang_backends.ServeBackend (provided by {plugin.provider}).",
                name=plugin.name,
                distribution=plugin.distribution,
            )
        if backend.api_version != SERVE_BACKEND_API_VERSION:
            raise BackendAPIVersionError(
                f"Serve backend {plugin.name!r} from {plugin.provider} uses API version "
                f"{backend.api_version!r}; this sglang-backends release requires "
                f"version {SERVE_BACKEND_API_VERSION}.",
                name=plugin.name,
                distribution=plugin.distribution,
            )
        return RegisteredServeBackend(
            name=plugin.name, backend=backend, distribution=plugin.distribution
        )

    # -- automatic detection -----------------------------------------------

    def _load_for_detection(
        self, names: Iterable[str]
    ) -> list[RegisteredServeBackend | DetectionOutcome]:
        """Load every candidate, plugins through one ``NamedExtensionManager``.

        Returns, in candidate order, the loaded backend or the ``error``
        outcome that replaced it.
        """
        slots: list[RegisteredServeBackend | DetectionOutcome | PluginEntryPoint] = []
        wanted: list[PluginEntryPoint] = []
        for name in names:
            registered = self._loaded.get((None, name))
            if registered is not None:
                slots.append(registered)
                continue
            if name in self._builtins:
                try:
                    slots.append(self._load_builtin(name))
                except ServeBackendError as exc:
                    slots.append(self._failed(name, None, 0.0, exc))
                continue
            try:
                plugin = self._choose(name, None, name)
            except ServeBackendError as exc:
                slots.append(self._failed(name, None, 0.0, exc))
                continue
            registered = self._by_plugin.get(plugin)
            if registered is not None:
                self._loaded[(None, name)] = registered
                slots.append(registered)
                continue
            slots.append(plugin)
            wanted.append(plugin)

        from sglang_backends.loading import load_many  # stevedore: only once loading

        failures: dict[str, BaseException] = {}
        started = time.perf_counter()
        targets = load_many(wanted, lambda p, exc: failures.__setitem__(p.name, exc))
        elapsed = time.perf_counter() - started

        result: list[RegisteredServeBackend | DetectionOutcome] = []
        for slot in slots:
            if not isinstance(slot, PluginEntryPoint):
                result.append(slot)
                continue
            plugin = slot
            try:
                if plugin.name in failures:
                    raise self._load_error(plugin, failures[plugin.name]) from failures[plugin.name]
                registered = self._build(plugin, targets[(plugin.name, plugin.target)])
            except ServeBackendError as exc:
                result.append(self._failed(plugin.name, plugin.distribution, elapsed, exc))
                continue
            self._by_plugin[plugin] = registered
            self._loaded[(None, plugin.name)] = registered
            result.append(registered)
        return result

    @staticmethod
    def _failed(
        name: str, distribution: str | None, seconds: float, exc: BaseException
    ) -> DetectionOutcome:
        LOG.warning("Skipping automatic detection for serve backend %r: %s", name, exc)
        return DetectionOutcome(name, Verdict.ERROR, seconds, str(exc), distribution)

    def explain(self, request: ServeRequest) -> DetectionReport:
        """Run automatic detection on *request* and report every step.

        Candidates are all available backends but the fallback ``llm``;
        detectors run concurrently, each bounded by :attr:`detect_timeout`.
        Never raises for a plugin's fault: failures become ``error`` or
        ``timeout`` outcomes, logged as warnings.
        """
        names = [n for n in self.available_names if n != FALLBACK_BACKEND]
        with self._lock:
            loaded = self._load_for_detection(names)
        backends = [b for b in loaded if isinstance(b, RegisteredServeBackend)]
        detected = iter(run_detectors(backends, request, timeout=self.detect_timeout))
        outcomes = tuple(
            next(detected) if isinstance(b, RegisteredServeBackend) else b for b in loaded
        )
        matches = tuple(o.name for o in outcomes if o.verdict is Verdict.MATCH)
        if len(matches) == 1:
            selected: str | None = matches[0]
        elif matches:
            selected = None
        else:
            selected = FALLBACK_BACKEND
        return DetectionReport(
            outcomes=outcomes,
            matches=matches,
            selected=selected,
            fallback=not matches,
        )

    def auto_detect(self, request: ServeRequest) -> RegisteredServeBackend:
        """Choose the backend for *request*: the one match, else ``llm``.

        :raises AmbiguousDetectionError: several backends matched (a
            ``RuntimeError``).
        """
        report = self.explain(request)
        if report.selected is None:
            raise AmbiguousDetectionError(
                f"Multiple serve backends matched this request: "
                f"{', '.join(report.matches)}. "
                "Select one explicitly with --model-type BACKEND.",
                matches=report.matches,
            )
        return self.get(report.selected)
