"""Loading: stevedore managers over chosen entry points, each load guarded and bounded.

stevedore's managers load: a ``DriverManager`` for one backend, a
``NamedExtensionManager`` for the candidates of automatic detection. They
are handed exactly the entry points selection chose (through their public
``list_entry_points()``), so they never read stevedore's on-disk cache nor
import anything not asked for, and a failure-callback so failures are never
swallowed by stevedore's logger. What they are handed is a wrapper of each
entry point whose ``load()`` is guarded: a malformed target is refused
before importing, and anything the plugin raises, ``BaseException``
subclasses included, becomes an ordinary :class:`Exception`.

During automatic detection each candidate's load (its import, then its
factory) runs in a daemon thread, all started together, and is
waited for at most ``load_timeout`` seconds from its own start; the wrapper's
``load()`` hands the manager what that thread imported. A load still running
after :data:`SLOW_LOAD_NOTICE` seconds is logged at INFO, naming the
plugin, so a slow import is never silent.

Internal module: its names may change between releases without notice; use
:class:`~sglang_backends.registry.ServeBackendRegistry`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sglang_backends.contract import SERVE_BACKENDS_GROUP, RegisteredServeBackend
from sglang_backends.detection import DetectionOutcome, Verdict, skipped, start_each
from sglang_backends.discovery import PluginEntryPoint
from sglang_backends.errors import BackendLoadError, ServeBackendError
from sglang_backends.processes import StopRequested

__all__ = [
    "SLOW_LOAD_NOTICE",
    "Load",
    "LoadTimeout",
    "Loads",
    "Pending",
    "PluginCodeError",
    "Produce",
    "call_plugin_code",
    "load_concurrently",
    "load_one",
    "notice_if_slow",
]

LOG = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Given a zero-argument importer (returning the imported target, ``None`` for
#: a built-in), calls the factory and returns the validated backend.
Produce = Callable[[Callable[[], object]], object]

#: Seconds a load may run before a line says it is still loading.
SLOW_LOAD_NOTICE = 5.0
#: Seconds between further "still loading" lines for the same load.
_NOTICE_EVERY = 30.0


class PluginCodeError(RuntimeError):
    """Plugin code raised something that is not an ordinary ``Exception``.

    ``SystemExit``, ``asyncio.CancelledError``, ``GeneratorExit``, a
    ``KeyboardInterrupt`` raised in a worker thread, and a failed
    ``assert`` (which stevedore lets through its failure callback) become
    this error, the original kept as ``__cause__``.
    """


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def call_plugin_code(function: Callable[[], _T]) -> _T:
    """Call plugin code; whatever it raises is an ``Exception`` afterwards.

    A ``KeyboardInterrupt`` in the main thread is the user's and propagates,
    as does a :class:`~sglang_backends.processes.StopRequested` (a stop
    signal); in a worker thread they can only come from the plugin.

    :raises PluginCodeError: the plugin raised a ``BaseException`` that is
        not an ``Exception``, or an ``AssertionError``.
    """
    try:
        return function()
    except KeyboardInterrupt:
        if threading.current_thread() is threading.main_thread():
            raise
        raise PluginCodeError("plugin code raised KeyboardInterrupt") from None
    except SystemExit as exc:
        if isinstance(exc, StopRequested) and threading.current_thread() is threading.main_thread():
            raise
        raise PluginCodeError(f"plugin called sys.exit({exc.code!r}) while loading") from exc
    except AssertionError as exc:
        raise PluginCodeError(_describe(exc)) from exc
    except Exception:
        raise
    except BaseException as exc:
        raise PluginCodeError(f"plugin code raised {_describe(exc)}") from exc


def _import(entry_point: importlib.metadata.EntryPoint) -> object:
    """Import *entry_point*'s target, refusing a malformed one before importing."""
    if entry_point.pattern.fullmatch(entry_point.value) is None:
        raise ValueError(
            f"malformed entry point target {entry_point.value!r}; expected 'module:attribute'"
        )
    return call_plugin_code(entry_point.load)


class _GuardedEntryPoint:
    """An entry point as handed to stevedore: the original, with a guarded ``load()``.

    :param fetch: what ``load()`` returns instead of importing (a bounded
        wait for an import already under way), if given.
    """

    def __init__(
        self, entry_point: importlib.metadata.EntryPoint, fetch: Callable[[], object] | None = None
    ) -> None:
        self._entry_point = entry_point
        self._fetch = fetch
        self.name = entry_point.name
        self.value = entry_point.value
        self.group = entry_point.group

    def load(self) -> Any:
        if self._fetch is not None:
            return self._fetch()
        return _import(self._entry_point)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._entry_point, attribute)

    def __repr__(self) -> str:
        return f"<guarded {self._entry_point!r}>"


def _as_entry_points(guarded: Sequence[_GuardedEntryPoint]) -> list[importlib.metadata.EntryPoint]:
    # stevedore only calls .name, .value and .load() on what it is handed.
    return cast(list[importlib.metadata.EntryPoint], list(guarded))


class _Names(list[str]):
    """The names handed to a ``NamedExtensionManager``: a list whose ``in`` is a set's.

    The manager asks ``name in names`` for every entry point it is handed;
    with a plain list that is O(N²) over thousands of entry points.
    """

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__(names)
        self._set = frozenset(self)

    def __contains__(self, name: object) -> bool:
        return name in self._set


@functools.cache
def _managers() -> tuple[type[Any], type[Any]]:
    """stevedore's ``DriverManager`` and ``NamedExtensionManager``, over given entry points.

    Made on first use, so stevedore is imported only when something loads.
    """
    from stevedore import DriverManager, NamedExtensionManager

    class OneDriver(DriverManager):  # type: ignore[type-arg]
        def __init__(self, entry_point: _GuardedEntryPoint, **kwargs: Any) -> None:
            self._chosen = _as_entry_points([entry_point])
            super().__init__(SERVE_BACKENDS_GROUP, entry_point.name, **kwargs)

        def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
            return list(self._chosen)

    class Several(NamedExtensionManager):  # type: ignore[type-arg]
        def __init__(self, entry_points: Sequence[_GuardedEntryPoint], **kwargs: Any) -> None:
            self._chosen = _as_entry_points(entry_points)
            super().__init__(SERVE_BACKENDS_GROUP, _Names(ep.name for ep in entry_points), **kwargs)

        def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
            return list(self._chosen)

    return OneDriver, Several


def load_one(plugin: PluginEntryPoint) -> object:
    """Import *plugin*'s target through a ``DriverManager`` and return it.

    Runs in the calling thread, unbounded (an explicit choice waits for its
    backend). The plugin's own exception propagates, as an ``Exception``.
    """
    one_driver, _ = _managers()
    manager = one_driver(
        _GuardedEntryPoint(plugin.entry_point),
        invoke_on_load=False,
        on_missing_entrypoints_callback=None,
    )
    return manager.driver


@contextmanager
def notice_if_slow(name: str, provider: str) -> Iterator[None]:
    """Log at INFO if the body still runs after :data:`SLOW_LOAD_NOTICE` seconds."""
    timer = threading.Timer(
        SLOW_LOAD_NOTICE,
        LOG.info,
        ("Still loading serve backend %r (%s) after %g s", name, provider, SLOW_LOAD_NOTICE),
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


class LoadTimeout(Exception):
    """A load did not finish within its bound."""


class Load:
    """One backend's load, shared by every caller that asks for it.

    The first caller runs it (:meth:`run`); the others :meth:`wait` for its
    result, so a factory runs once however many threads ask.

    :param name: the backend, for messages.
    :param provider: its distribution, or ``built-in``, for messages.
    """

    def __init__(self, name: str, provider: str) -> None:
        self.name = name
        self.provider = provider
        self.thread: threading.Thread | None = None
        self.started: float | None = None
        self.seconds = 0.0
        self._value: object = None
        self._error: BaseException | None = None
        #: Set once the load finished, well or not.
        self.finished = threading.Event()

    @property
    def done(self) -> bool:
        """Whether the load finished, well or not."""
        return self.finished.is_set()

    def run(self, produce: Callable[[], object]) -> None:
        """Run *produce* in this thread and keep its result or exception.

        The time counts from :attr:`started` when it was set before the
        thread began, else from now.
        """
        self.thread = threading.current_thread()
        if self.started is None:
            self.started = time.perf_counter()
        try:
            self._value = produce()
        except BaseException as exc:  # kept for every waiter; the user's Ctrl-C goes on
            self._error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            self.seconds = time.perf_counter() - self.started
            self.finished.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the load to finish, at most *timeout* seconds; return whether it did."""
        return self.finished.wait(timeout)

    def result(self) -> object:
        """The loaded value; raises the load's exception if it failed."""
        if self._error is not None:
            raise self._error
        return self._value


@dataclass(frozen=True)
class Pending:
    """A load to start: *produce* is called in a worker with an importer.

    :param load: where the result goes.
    :param plugin: the entry point to import, ``None`` for a lazy built-in.
    :param produce: given a zero-argument importer returning the imported
        target (``None`` for a built-in), calls the factory and returns the
        validated backend.
    """

    load: Load
    plugin: PluginEntryPoint | None
    produce: Produce


class _Imported:
    """What a worker imported, for the manager's ``load()`` of that entry point."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.target: object = None
        self.error: BaseException | None = None


class _Watch:
    """Waits for loads until their deadlines, saying which are slow.

    Every wait looks for slow loads, but the loads are scanned at most once
    a second, and not before the first could be due: waiting for each of N
    loads costs O(N) in all, not O(N²).
    """

    def __init__(self, loads: Sequence[Load], timeout: float) -> None:
        self.loads = loads
        self.timeout = timeout
        self.noticed: dict[int, float] = {}
        starts = [load.started for load in loads if load.started is not None]
        self._next_scan = min(starts, default=time.perf_counter()) + SLOW_LOAD_NOTICE

    def deadline(self, load: Load) -> float:
        return (load.started or time.perf_counter()) + self.timeout

    def wait(self, event: threading.Event, deadline: float) -> bool:
        while True:
            now = time.perf_counter()
            self._notice(now)
            if event.is_set():
                return True
            if now >= deadline:
                return False
            event.wait(min(deadline - now, 1.0))

    def _notice(self, now: float) -> None:
        if now < self._next_scan:
            return
        self._next_scan = now + 1.0
        for load in self.loads:
            if load.done or load.started is None:
                continue
            running = now - load.started
            last = self.noticed.get(id(load))
            due = SLOW_LOAD_NOTICE if last is None else last + _NOTICE_EVERY
            if running >= due:
                self.noticed[id(load)] = running
                LOG.info(
                    "Still loading serve backend %r (%s) after %.0f s; "
                    "giving up on it after %g s (load_timeout)",
                    load.name,
                    load.provider,
                    running,
                    self.timeout,
                )


def load_concurrently(pending: Sequence[Pending], *, timeout: float) -> None:
    """Run every pending load in a daemon thread; wait for each at most *timeout*.

    All start at once (:func:`~sglang_backends.detection.start_each`: a
    thread whose load finished takes another, so a hung load holds only its
    own). Each load's bound counts from its own start, so the whole takes
    about *timeout* at worst. Plugins are imported through
    one ``NamedExtensionManager``, handed entry points whose ``load()`` waits
    for the worker's import. A load that overruns keeps running in its
    daemon thread (an import cannot be interrupted) and is left not
    :attr:`~Load.done`; it cannot keep the process alive.
    """
    imported = {id(item): _Imported() for item in pending}

    def start(item: Pending) -> None:
        holder = imported[id(item)]

        def importer() -> object:
            if item.plugin is None:
                return None
            try:
                holder.target = _import(item.plugin.entry_point)
            except BaseException as exc:
                holder.error = exc
                raise
            finally:
                holder.event.set()
            return holder.target

        item.load.started = time.perf_counter()
        item.load.run(lambda: item.produce(importer))

    start_each(pending, start, name=lambda item: f"load-{item.load.name}")
    watch = _Watch([item.load for item in pending], timeout)

    def fetch(item: Pending) -> object:
        holder = imported[id(item)]
        if not watch.wait(holder.event, watch.deadline(item.load)):
            raise LoadTimeout(f"import did not finish within {timeout:g} s")
        if holder.error is not None:
            raise holder.error
        return holder.target

    def fetcher(item: Pending) -> Callable[[], object]:
        return lambda: fetch(item)

    plugins = [(item, item.plugin) for item in pending if item.plugin is not None]
    if plugins:
        _, several = _managers()
        several(
            [_GuardedEntryPoint(plugin.entry_point, fetcher(item)) for item, plugin in plugins],
            invoke_on_load=False,
            on_load_failure_callback=_recorded,
            on_missing_entrypoints_callback=None,
        )
    for item in pending:
        watch.wait(item.load.finished, watch.deadline(item.load))


def _recorded(_manager: object, entry_point: object, exc: BaseException) -> None:
    """The manager's failure callback: the failure is already kept in its :class:`Load`."""
    LOG.debug("Loading %r failed: %s", getattr(entry_point, "name", entry_point), exc)


class Loads:
    """Every backend's one :class:`Load`, by key: the memo behind "a factory runs once"."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loads: dict[Hashable, Load] = {}

    def _claim(self, key: Hashable, name: str, provider: str) -> tuple[Load, bool]:
        with self._lock:
            load = self._loads.get(key)
            if load is not None:
                return load, False
            load = self._loads[key] = Load(name, provider)
            return load, True

    def one(
        self,
        key: Hashable,
        name: str,
        provider: str,
        produce: Callable[[], RegisteredServeBackend],
    ) -> RegisteredServeBackend:
        """Run *produce* here unless another caller has; return its backend, unbounded.

        :raises BackendLoadError: the load is under way in this very thread
            (a factory asked the registry for its own backend).
        """
        load, mine = self._claim(key, name, provider)
        if mine:
            try:
                with notice_if_slow(name, provider):
                    load.run(produce)
            except BaseException:  # the user's Ctrl-C: forget this load, so it may be retried
                with self._lock:
                    self._loads.pop(key, None)
                raise
        elif not load.done and load.thread is threading.current_thread():
            raise BackendLoadError(
                f"Failed to load serve backend {name!r} from {provider}: its factory "
                "asked the registry for it while it was loading",
                name=name,
            )
        load.wait()
        return cast(RegisteredServeBackend, load.result())

    def bounded(
        self,
        names: Sequence[str],
        resolve: Callable[[str], tuple[Hashable, PluginEntryPoint | None, Produce]],
        *,
        timeout: float,
    ) -> list[RegisteredServeBackend | DetectionOutcome]:
        """Load the backends *names*, concurrently, each bounded by *timeout* from its own start.

        :param resolve: a name's ``(key, plugin, produce)``: ``plugin`` is
            ``None`` for a built-in, and ``produce(importer)`` returns the
            validated backend. A :class:`ServeBackendError` it raises is
            that name's outcome.
        :returns: in order, each backend, or the ``error``/``timeout``
            outcome (logged as a WARNING naming it and its distribution)
            that replaced it.
        """
        loads: list[tuple[str, str | None, Load] | DetectionOutcome] = []
        pending: list[Pending] = []
        for name in names:
            try:
                key, plugin, produce = resolve(name)
            except ServeBackendError as exc:
                loads.append(skipped(name, exc.distribution, 0.0, str(exc)))
                continue
            provider = plugin.provider if plugin is not None else "built-in"
            load, mine = self._claim(key, name, provider)
            if mine:
                pending.append(Pending(load, plugin, produce))
            loads.append((name, None if plugin is None else plugin.distribution, load))
        load_concurrently(pending, timeout=timeout)
        result: list[RegisteredServeBackend | DetectionOutcome] = []
        for item in loads:
            if isinstance(item, DetectionOutcome):
                result.append(item)
                continue
            name, distribution, load = item
            if not load.done:  # another caller's, under way or claimed and about to start
                begun = time.perf_counter() if load.started is None else load.started
                load.wait(max(0.0, begun + timeout - time.perf_counter()))
            if not load.done:
                cause = (
                    f"loading from {load.provider} did not finish within {timeout:g} s "
                    "(load_timeout)"
                )
                result.append(skipped(name, distribution, timeout, cause, Verdict.TIMEOUT))
                continue
            try:
                result.append(cast(RegisteredServeBackend, load.result()))
            except Exception as exc:  # noqa: BLE001 - a plugin's failure is its outcome
                result.append(skipped(name, distribution, load.seconds, str(exc)))
        return result
