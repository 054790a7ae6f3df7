"""Loading: one stevedore ``DriverManager`` per backend load, each run once and guarded.

A plugin's load is ``DriverManager(group, name, invoke_on_load=True)`` over
the one entry point the survey chose, handed over by overriding its public
``list_entry_points()``: stevedore reads no cache of its own, imports the
plugin and calls its factory, and re-raises the plugin's exception, as a
``DriverManager`` does by default. What comes back is validated here. That
entry point's ``load()`` refuses a malformed target and one that is not
callable; whatever the plugin raises becomes a :class:`BackendLoadError`
(:func:`call_plugin_code`), but the user's Ctrl-C.

stevedore's ``NamedExtensionManager`` would load a named set in one go, but
no set is loaded so in one process without losing a guarantee. Automatic
detection loads every candidate, each bounded by ``load_timeout`` from its
own start, a failure being that candidate's outcome alone; the manager's
construction is serial and all or nothing (every load runs one after the
other, and none is handed back until all have finished), it imports every
provider of a duplicated name (a conflict is decided here before any
import, naming the distributions), and its lookup by name misses
non-adjacent duplicates (``itertools.groupby``). ``check`` and ``detect``
load in worker processes, one backend each.

A registry keeps one :class:`BackendLoad` per backend (:data:`Loads`):
:func:`load_once` and :func:`load_each_within` run each once, however many
threads ask, but for one its own caller interrupts (the user's Ctrl-C, a
``BaseException`` from its progress callback): that reaches that caller alone,
and the load is forgotten, so whoever awaits it or asks next loads the backend
anew. A load still running after :data:`SLOW_LOAD_NOTICE` seconds is logged.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from importlib.metadata import EntryPoint
from types import TracebackType
from typing import Any, TypeVar, cast

from sglang_backends._core.detection import (
    DetectionOutcome,
    Loaded,
    TimedRun,
    Verdict,
    run_each,
    skip_with_warning,
)
from sglang_backends._core.discovery import PluginEntryPoint
from sglang_backends._core.names import SERVE_BACKENDS_GROUP
from sglang_backends._core.processes import from_signal
from sglang_backends._core.progress import LOADING, Progress, label, with_progress
from sglang_backends.contract import (
    SERVE_BACKEND_API_VERSION,
    RegisteredServeBackend,
    ServeBackend,
    coerce_backend,
)
from sglang_backends.errors import (
    BackendLoadError,
    BackendTypeError,
    ServeBackendError,
    backend_named,
    describe_raised,
    describe_typed,
    load_failed,
    shortened,
)

LOG = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Seconds a load may run before a line says it is still loading.
SLOW_LOAD_NOTICE = 5.0
#: Seconds between further "still loading" lines for the same load.
_NOTICE_EVERY = 30.0


def call_plugin_code(
    function: Callable[[], _T], failure: Callable[[BaseException], BaseException]
) -> _T:
    """Call plugin code; whatever it raises becomes ``failure(exc)``, raised from it.

    Only a stop signal's unwinding (:func:`~sglang_backends._core.processes.from_signal`:
    a ``KeyboardInterrupt`` or ``SystemExit`` a signal caused) is the user's and
    propagates; a plugin's own raise of either is its failure, as any other
    ``BaseException`` is.
    """
    try:
        return function()
    except BaseException as exc:
        if from_signal(exc):
            raise
        raise failure(exc) from exc


def _cause(exc: BaseException) -> str:
    """What plugin code did, in a failure's words: a ``sys.exit``, a failed ``assert`` or
    another ``BaseException`` by its type, an exception by its message.
    """
    if isinstance(exc, SystemExit):
        return f"plugin called sys.exit({_shown(exc.code)}) while loading"
    if isinstance(exc, AssertionError):
        return describe_typed(exc)
    return describe_raised(exc, "plugin code")


def _shown(code: object) -> str:
    """``repr(code)``, or ``<Type>`` when plugin code gave it a ``__repr__`` that raises."""
    try:
        return shortened(repr(code))
    except BaseException:  # noqa: BLE001
        # Its __repr__ is plugin code, which may raise anything, SystemExit too.
        return f"<{type(code).__name__}>"


class _GuardedEntryPoint(EntryPoint):
    """An entry point whose ``load()`` refuses a malformed target and a non-callable one."""

    def load(self) -> Any:
        if self.pattern.fullmatch(self.value) is None:
            raise ValueError(
                f"malformed entry point target {self.value!r}; expected 'module:attribute'"
            )
        factory = super().load()
        if not callable(factory):
            raise TypeError("the entry point must resolve to a callable factory")
        return factory


@functools.cache
def _chosen_driver_manager() -> type[Any]:
    """stevedore's ``DriverManager`` loading and invoking one given entry point, guarded;
    stevedore imported on first use."""
    from stevedore import DriverManager

    # DriverManager is generic only in newer stevedore.
    class ChosenDriverManager(DriverManager):  # type: ignore[type-arg]
        def __init__(self, entry_point: EntryPoint) -> None:
            self._chosen = _GuardedEntryPoint(
                entry_point.name, entry_point.value, entry_point.group
            )
            super().__init__(SERVE_BACKENDS_GROUP, entry_point.name, invoke_on_load=True)

        def list_entry_points(self) -> list[EntryPoint]:
            return [self._chosen]

    return ChosenDriverManager


def load_failure(
    name: str, plugin: PluginEntryPoint | None, exc: BaseException
) -> BackendLoadError:
    """The one wording of a failed load of *name* (*plugin*'s, or a built-in's)."""
    dist = plugin.distribution if plugin else None
    if isinstance(exc, BackendLoadError) and (exc.name, exc.distribution) == (name, dist):
        # Its factory asked the registry for this very backend: that refusal says it all.
        return BackendLoadError(str(exc), name=name, distribution=dist)
    failed = load_failed(name, plugin.provider if plugin else None, builtin=plugin is None)
    unmet = ""
    # A mismatched requirement is the commonest cause: say so (read only once a load failed).
    if plugin is not None:
        from sglang_backends._core.findings import unmet_clause

        unmet = f"; {clause}" if (clause := unmet_clause(plugin)) else ""
    return BackendLoadError(f"{failed}: {_cause(exc)}{unmet}", name=name, distribution=dist)


def _produce(name: str, plugin: PluginEntryPoint | None, builtin: object) -> RegisteredServeBackend:
    """Import *plugin* and call its factory (each by a ``DriverManager`` of its own), or call
    the built-in *name*'s factory, then validate: one whole load.

    :raises BackendLoadError: the import failed, the target is malformed or not
        callable, the factory raised (whatever it raised), or the backend declares
        another contract version.
    :raises BackendTypeError: the factory did not return a ``ServeBackend``.
    """
    dist = plugin.distribution if plugin else None
    failure = functools.partial(load_failure, name, plugin)
    if plugin is not None:
        manager = _chosen_driver_manager()
        # Not ``.driver``: for a factory returning something falsy it gives the factory.
        obj = call_plugin_code(lambda: manager(plugin.entry_point).extensions[0].obj, failure)
    else:
        obj = call_plugin_code(builtin, failure) if callable(builtin) else builtin
    backend = validated(name, obj, plugin, builtin=plugin is None)
    return RegisteredServeBackend(name=name, backend=backend, distribution=dist)


def validated(
    name: str, obj: object, plugin: PluginEntryPoint | None = None, *, builtin: bool = False
) -> ServeBackend:
    """What *name*'s factory returned, as a ``ServeBackend`` of this contract version: the
    one check of a factory's result, for the registry and the kit.

    :raises BackendTypeError: *obj* is not a ``ServeBackend``.
    :raises BackendLoadError: it declares another contract version.
    """
    dist = plugin.distribution if plugin else None
    # What the factory returned is plugin code too: its fields may raise as they are read,
    # compared or tested, which is its load's failure, here once and for all.
    failure = functools.partial(load_failure, name, plugin)
    backend = call_plugin_code(lambda: coerce_backend(obj), failure)
    if backend is None:
        by = f" (provided by {plugin.provider})" if plugin else ""
        raise BackendTypeError(
            f"{backend_named(name, builtin=builtin, start=True)} factory "
            f"returned {type(obj).__name__}; expected sglang_backends.ServeBackend{by}.",
            name=name,
            distribution=dist,
        )
    if call_plugin_code(lambda: bool(backend.api_version != SERVE_BACKEND_API_VERSION), failure):
        raise BackendLoadError(
            f"{backend_named(name, plugin.provider if plugin else None, start=True)} uses API "
            f"version {_shown(backend.api_version)}; this sglang-backends release requires version "
            f"{SERVE_BACKEND_API_VERSION}.",
            name=name,
            distribution=dist,
        )
    call_plugin_code(lambda: bool(backend.requires_model_path), failure)
    return backend


def _log_still_loading(load: BackendLoad, since: float, timeout: float | None = None) -> None:
    """The one "still loading" line, with the load's own age (from *since* while it has not
    started); *timeout* is the bound, when there is one."""
    LOG.info(
        "Still loading serve backend %s after %.0f s%s",
        load.label,
        time.perf_counter() - (load.started or since),
        "" if timeout is None else f"; giving up on it after {timeout:g} s (load_timeout)",
    )


class BackendLoad(TimedRun[RegisteredServeBackend]):
    """One backend's load, asked for as *name*: *plugin*'s, or the built-in *builtin*'s (a
    backend or its factory), telling *progress* as it starts and ends. Run by one caller and
    awaited by the others; a :attr:`detached` one, automatic detection's, on a worker.
    """

    def __init__(
        self,
        name: str,
        plugin: PluginEntryPoint | None,
        builtin: object,
        progress: Progress | None,
    ) -> None:
        #: The backend's own name (a plugin's entry point's), whatever it was asked for as.
        self.backend = plugin.name if plugin else name
        self.provider = plugin.provider if plugin else "built-in"
        self.distribution = plugin.distribution if plugin else None
        #: The backend's, in :data:`Loads`: its entry point (which outlives every load), or
        #: the built-in's name.
        self.key: Hashable = name if plugin is None else id(plugin)
        produce = functools.partial(_produce, self.backend, plugin, builtin)
        #: Who is loading, as progress and the "still loading" line name it: ``'x' (DIST)``.
        self.label = label(name, self.provider)
        super().__init__(
            functools.partial(with_progress, produce, progress, LOADING, self.label),
            f"load-{name}",
        )
        self.detached = False
        self.thread: threading.Thread | None = None
        self._frames: TracebackType | None = None
        #: Seconds of running after which :func:`load_each_within` next says it is still loading.
        self.notice_after = SLOW_LOAD_NOTICE

    @property
    def interruption(self) -> BaseException | None:
        """What its own caller interrupted this load with (the user's Ctrl-C, or what its
        progress callback raised), or ``None``: every failure of plugin code is an
        ``Exception`` (:func:`call_plugin_code`). An interrupted load has no outcome for
        anyone else: it is forgotten (:func:`_claim`).
        """
        error = self.error
        return None if isinstance(error, Exception) else error

    def run(self) -> None:
        """Run the load in this thread. A failure is kept for every waiter (a detached load's
        without its frames); an interruption is raised here, unless the load is detached
        (its owner, awaiting the pool, raises it)."""
        self.thread = threading.current_thread()
        super().run()
        interruption = self.interruption
        if interruption is not None:
            if self.detached:
                return
            raise interruption
        error = self.error
        # Each raise of the kept failure starts again from these frames, not from the last
        # raise's: a caller retrying a failed backend would otherwise grow it without end.
        self._frames = None if error is None else error.__traceback__
        if not self.detached:
            return
        # A detached load's exceptions lose their tracebacks. Each traceback holds
        # every frame of the failed import alive: with thousands of failed loads,
        # every garbage collection walked millions of objects. Automatic detection's
        # failures are outcomes, logged without a traceback; a load that fails for
        # load_once keeps them.
        self._frames = None
        seen: set[int] = set()
        while error is not None and id(error) not in seen:
            seen.add(id(error))
            error.__traceback__ = None
            error = error.__cause__ or error.__context__

    def result(self) -> RegisteredServeBackend:
        """The loaded backend; raises the load's exception if it failed."""
        if self.error is not None:
            raise self.error.with_traceback(self._frames)
        return cast(RegisteredServeBackend, self.value)


#: A registry's loads, by :attr:`BackendLoad.key`: one per backend, shared by every caller.
Loads = dict[Hashable, BackendLoad]


#: Held to forget an interrupted load (:func:`_forget`), by one caller at a time.
_FORGETTING = threading.Lock()


def _forget(loads: Loads, load: BackendLoad) -> None:
    """Drop *load* from *loads*, unless another caller has already put a new one there."""
    with _FORGETTING:
        if loads.get(load.key) is load:
            del loads[load.key]


def _claim(loads: Loads, fresh: BackendLoad) -> BackendLoad:
    """The load of *fresh*'s backend in *loads*: another caller's, else *fresh*, now
    claimed. An interrupted load (:attr:`BackendLoad.interruption`) is forgotten, and
    the backend loaded anew.
    """
    while True:
        # setdefault is atomic: one caller claims it.
        load = loads.setdefault(fresh.key, fresh)
        if load.interruption is None:
            return load
        _forget(loads, load)


#: The load each thread awaits in :func:`load_once`, to see a wait that would never end.
_AWAITED: dict[threading.Thread, BackendLoad] = {}
_AWAITED_LOCK = threading.Lock()


def _awaits(load: BackendLoad, thread: threading.Thread) -> bool:
    """Whether *load* waits, through the loads its thread and theirs await, for *thread*."""
    seen: set[threading.Thread] = set()
    runner = load.thread
    while runner is not None and runner not in seen:
        if runner is thread:
            return True
        seen.add(runner)
        awaited = _AWAITED.get(runner)
        runner = None if awaited is None or awaited.finished else awaited.thread
    return False


def load_once(loads: Loads, fresh: BackendLoad) -> RegisteredServeBackend:
    """Run *fresh* here unless another caller has claimed its backend's load in *loads*; return
    the backend, unbounded, saying after :data:`SLOW_LOAD_NOTICE` s that it is still loading.

    A load its own caller interrupts is forgotten; a caller awaiting it loads the backend
    anew, never seeing the other's interruption.

    :raises BackendLoadError: the load waits for this very thread, which would then wait
        for it: a factory asked the registry for its own backend, maybe through others'
        (``a`` asks for ``b``, which asks for ``a``), in this thread or across threads.
    """
    load = _claim(loads, fresh)
    while load is not fresh:
        _await(load)
        if load.interruption is None:
            return load.result()
        load = _claim(loads, fresh)
    timer = _notice_if_slow(load)
    try:
        load.run()
    except BaseException:
        # Interrupted (the user's Ctrl-C, what the progress callback raised): forgotten
        # now, should the interruption even have come before the load could keep it.
        _forget(loads, load)
        raise
    finally:
        timer.cancel()
    return load.result()


def _await(load: BackendLoad) -> None:
    """Wait for another caller's *load* to finish.

    :raises BackendLoadError: it waits for this very thread (:func:`load_once`).
    """
    me = threading.current_thread()
    # Two threads about to await each other: the second sees it.
    with _AWAITED_LOCK:
        if not load.finished and _awaits(load, me):
            raise BackendLoadError(
                f"{load_failed(load.backend, load.provider)}: its factory "
                "asked the registry for it while it was loading",
                name=load.backend,
                distribution=load.distribution,
            )
        _AWAITED[me] = load
    timer = _notice_if_slow(load)
    try:
        load.wait()
    finally:
        timer.cancel()
        _AWAITED.pop(me, None)


def _notice_if_slow(load: BackendLoad) -> threading.Timer:
    """A started timer saying after :data:`SLOW_LOAD_NOTICE` s that *load* is still loading;
    cancel it once the load has finished."""
    timer = threading.Timer(SLOW_LOAD_NOTICE, _log_still_loading, (load, time.perf_counter()))
    timer.daemon = True
    timer.start()
    return timer


def _notice_slow(loads: Sequence[BackendLoad], timeout: float, done: threading.Event) -> None:
    """Until *done*, log the loads still running after :data:`SLOW_LOAD_NOTICE` s, and later again.

    One pass a second over *loads*, from the first that can be due: N loads cost O(N), not O(N²).
    """
    pause = SLOW_LOAD_NOTICE
    while not done.wait(pause):
        pause = 1.0
        now = time.perf_counter()
        for load in loads:
            if load.finished or load.started is None:
                continue
            running = now - load.started
            if running >= load.notice_after:
                load.notice_after = running + _NOTICE_EVERY
                _log_still_loading(load, load.started, timeout)


def _within(
    name: str, load: BackendLoad, mine: bool, timeout: float
) -> Loaded | DetectionOutcome | None:
    """*load*'s backend, seconds (none if another caller ran it) and label if it finished
    within *timeout* s, else the outcome (logged) for *name*; ``None`` if its caller
    interrupted it, to load it anew."""
    if not load.within(timeout):
        cause = f"loading from {load.provider} did not finish within {timeout:g} s (load_timeout)"
        return skip_with_warning(name, load.distribution, timeout, cause, Verdict.TIMEOUT)
    if load.interruption is not None:
        return None
    # A plugin's failure is its outcome.
    if isinstance(load.error, Exception):
        return skip_with_warning(name, load.distribution, load.seconds, str(load.error))
    return Loaded(load.result(), load.seconds if mine else 0.0, load.label)


def load_each_within(
    loads: Loads, names: Sequence[str], fresh: Callable[[str], BackendLoad], *, timeout: float
) -> list[Loaded | DetectionOutcome]:
    """Load the backends *names* concurrently, each bounded by *timeout* from its own start.

    Loads run on a pool of daemon workers sized to the work
    (:func:`~sglang_backends._core.detection.run_each`): one that overruns
    keeps running there, as an import cannot be interrupted.

    :param fresh: a name's load, not yet run; a :class:`ServeBackendError`
        it raises is that name's outcome.
    :returns: in order, each backend loaded, or the outcome (logged) that replaced it.
    :raises BaseException: what interrupted one of the loads run here (the user's Ctrl-C,
        what the progress callback raised). One another caller interrupted is run anew.
    """
    claimed: list[tuple[str, BackendLoad, bool] | DetectionOutcome] = []
    for name in names:
        try:
            load = fresh(name)
        except ServeBackendError as exc:
            claimed.append(skip_with_warning(name, exc.distribution, 0.0, str(exc)))
            continue
        load.detached = True
        found = _claim(loads, load)
        claimed.append((name, found, found is load))
    mine = [item[1] for item in claimed if isinstance(item, tuple) and item[2]]
    waited = threading.Event()
    threading.Thread(target=_notice_slow, args=(mine, timeout, waited), daemon=True).start()
    try:
        run_each(mine, timeout=timeout)
        for load in mine:
            if load.interruption is not None:
                raise load.interruption
        outcomes = [
            _within(*item, timeout) if isinstance(item, tuple) else item for item in claimed
        ]
    finally:
        waited.set()
    again = [name for name, outcome in zip(names, outcomes, strict=True) if outcome is None]
    reloaded = iter(load_each_within(loads, again, fresh, timeout=timeout) if again else ())
    return [next(reloaded) if outcome is None else outcome for outcome in outcomes]
