"""A conformance check plugin authors run against their backend.

What the host relies on: a literal, supported ``api_version``; ``run()``
honouring ``--help`` promptly with no socket or process; a detector that
answers awkward requests and never raises; and, where SGLang is installed,
SGLang's own registry accepting the backend and its answers.
"""

from __future__ import annotations

import ast
import enum
import functools
import math
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any, NamedTuple, NoReturn, TypeAlias, TypeVar, cast

import psutil

import sglang_backends
from sglang_backends._core import console, tree
from sglang_backends._core.detection import TimedRun, run_each
from sglang_backends._core.loading import call_plugin_code, validated
from sglang_backends._core.selection import uninstall_command
from sglang_backends._sglang.fork import sglang_unusable
from sglang_backends._sglang.installed import load_sglang
from sglang_backends.contract import (
    SERVE_BACKEND_API_VERSION,
    SGLANG_CONTRACT_MODULE,
    ServeBackend,
    ServeRequest,
    coerce_detection,
)
from sglang_backends.errors import (
    BackendConflictError,
    ServeBackendError,
    backend_named,
    describe,
    describe_typed,
    load_failed,
    refuse_string,
)
from sglang_backends.registry import timeout_argument
from sglang_backends.testing._sources import declared_api_versions

_T = TypeVar("_T")
#: A detector's requests as the checks take them: ``(label, request)`` pairs, or a mapping.
_Requests: TypeAlias = Iterable[tuple[str, ServeRequest]] | Mapping[str, ServeRequest]


class ContractViolation(ServeBackendError, AssertionError):
    """A backend breaks the serve-backend contract; the message says how (a pytest failure),
    what plugin code said in it escaped (:func:`~sglang_backends._core.console.printable`).
    """

    def __init__(
        self, message: str, *, name: str | None = None, distribution: str | None = None
    ) -> None:
        super().__init__(console.printable(message), name=name, distribution=distribution)


#: The second argument of the ``SystemExit`` a check's ``os._exit`` raises, which tells it
#: from plugin code's own ``sys.exit``.
_OS_EXIT = "os._exit"


def _exit_raising(status: int) -> NoReturn:
    """``os._exit`` while a check runs: a ``SystemExit`` marked :data:`_OS_EXIT` (the host
    would end there), not the end of the test run."""
    __tracebackhide__ = True
    raise SystemExit(status, _OS_EXIT)


def _exit_status(exc: BaseException | None) -> int | None:
    """The status of the ``os._exit`` *exc* is, or was raised from (a failed load's cause)."""
    for error in (exc, exc.__cause__ if exc is not None else None):
        if isinstance(error, SystemExit) and error.args[1:] == (_OS_EXIT,):
            return cast(int, error.args[0])
    return None


def _exited(exc: BaseException | None) -> str | None:
    """``called os._exit(N)`` when *exc* is, or was raised from, plugin code's ``os._exit``."""
    status = _exit_status(exc)
    return None if status is None else f"called os._exit({status!r})"


class _Subject(NamedTuple):
    """The backend a check is about, as its breaches name it: an installed one's name with its
    distribution (``None`` for a factory object), or its factory's ``module.qualname``."""

    name: str
    provider: str | None = None
    builtin: bool = False

    def breach(self, problem: str) -> ContractViolation:
        """The breach *problem* of this backend's contract, as the checks word it."""
        named = backend_named(self.name, self.provider, builtin=self.builtin, start=True)
        return ContractViolation(f"{named}: {problem}", name=self.name, distribution=self.provider)


@dataclass
class ContractReport:
    """What :func:`assert_backend_contract` checked, for tests that want details."""

    backend: ServeBackend
    help_seconds: float
    detections: dict[str, str] = field(default_factory=dict)
    #: Why SGLang's acceptance was not checked (SGLang is not installed, ``sglang=False``).
    sglang_unchecked: str | None = None

    @property
    def sglang_checked(self) -> bool:
        """Whether SGLang's own registry loaded the backend and accepted its answers."""
        return self.sglang_unchecked is None


class SGLangNotCheckedWarning(UserWarning):
    """SGLang is not installed, so whether ``sglang serve`` accepts the backend was not checked."""


def awkward_requests(directory: str) -> dict[str, ServeRequest]:
    """Requests a detector must survive, by label; *directory* is an empty local dir."""
    missing = os.path.join(directory, "does-not-exist")
    # Each as serve hands it over (ServeRequest.from_argv).
    argvs = {
        "no model path": [],
        "empty model path": ["--model-path", ""],
        "local directory": [directory],
        "missing local path": ["--model-path", missing],
        "hub id": ["org/model"],
        "garbage": ["--model-path", "\x00\udcff../\n\t*?"],
        "very long string": ["--model-path", "m" * 100_000],
        "help only": ["--help"],
    }
    return {label: ServeRequest.from_argv(argv) for label, argv in argvs.items()}


def _as_in_main_thread(function: Callable[..., _T], *args: object) -> _T:
    """``function(*args)`` on a worker thread, the threads it starts non-daemon by default as
    in a host's main thread (a thread's default is its starter's; this worker is a daemon).
    """
    worker = threading.current_thread()
    daemon = worker.daemon
    # No public API changes a running thread's flag; Python's exit only waits for threads
    # started non-daemon, which this worker stays.
    setattr(worker, "_daemonic", False)  # noqa: B010
    try:
        return function(*args)
    finally:
        setattr(worker, "_daemonic", daemon)  # noqa: B010


def _check_help(backend: ServeBackend, subject: _Subject, timeout: float) -> float:
    """Run ``run(--help)`` in a thread, watching for sockets and processes; its seconds.

    A helper command it runs and waits for is fine; a process still running once it
    returned (a child, or one that child left) is a breach, and is killed.
    """
    __tracebackhide__ = True
    pid = os.getpid()
    sockets_before = tree.listening(pid)
    children_before = set(tree.descendants(pid))
    opened: set[tuple[str, int]] = set()
    spawned: set[psutil.Process] = set()
    request = ServeRequest.from_argv(["--help"])
    run = TimedRun(
        functools.partial(_as_in_main_thread, backend.run, request), f"help-{subject.name}"
    )
    threading.Thread(target=run.run, name=run.thread_name, daemon=True).start()
    deadline = time.perf_counter() + timeout
    done = False
    # A last look once it has returned.
    while not done:
        done = run.wait(0.01) or time.perf_counter() >= deadline
        opened.update(tree.listening(pid) - sockets_before)
        spawned.update(set(tree.descendants(pid)) - children_before)
    left = tree.kill_left(spawned)
    error = run.error
    exited = _exited(error)
    # argparse's --help exits 0; so may os._exit after the help, ending both hosts with 0.
    if (isinstance(error, SystemExit) and error.code in (0, None)) or _exit_status(error) == 0:
        error = None
        exited = None
    # Its own seconds: one holding the GIL outlasts any wait.
    if not run.within(timeout):
        problem = (
            f"did not return within {timeout:g} s; "
            "print the help and return without launching a server"
        )
    elif opened:
        problem = f"opened listening sockets {sorted(opened)}; --help must not launch a server"
    elif left:
        problem = (
            f"left processes running when it returned: {sorted(p.pid for p in left)} "
            "(killed now); --help must print the help and leave nothing running"
        )
    elif exited is not None:
        problem = f"{exited}; print the help and return (or exit 0)"
    elif error is not None:
        problem = f"raised {describe_typed(error)}"
        if _signal_set_in_a_thread(error):
            problem += (
                " (the check calls it in a worker thread, where signal.signal raises; both "
                "hosts call it in the main thread: set handlers after handling --help)"
            )
    else:
        return run.seconds
    raise subject.breach(f"run(['--help']) {problem}") from error


def _signal_set_in_a_thread(error: BaseException) -> bool:
    """Whether *error* is :func:`signal.signal`'s refusal outside the main thread: its last
    Python frame is the :mod:`signal` module's."""
    trace = error.__traceback__
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    frame = trace.tb_frame if trace is not None else None
    return (
        isinstance(error, ValueError)
        and frame is not None
        and frame.f_globals.get("__name__") == "signal"
    )


def _check_detector(
    backend: ServeBackend,
    subject: _Subject,
    requests: Iterable[tuple[str, ServeRequest]],
    timeout: float,
    accept: Callable[[object], enum.Enum | None] = coerce_detection,
    expected: str = "a ServeBackendDetection",
) -> dict[str, str]:
    """Call the detector on each request (this contract's or SGLang's) in a thread; *accept*
    gives the answer or ``None``."""
    __tracebackhide__ = True
    if backend.detect is None:
        return {}
    results: dict[str, str] = {}
    for label, request in requests:
        run = TimedRun(
            functools.partial(_as_in_main_thread, backend.detect, request),
            f"detect-{subject.name}",
        )
        run_each([run], timeout=timeout)
        detection = accept(run.value)
        asked = f" for a request with {label}"
        # Its own seconds: one holding the GIL outlasts any wait.
        if not run.within(timeout):
            problem = (
                f"did not return within {timeout:g} s{asked}; "
                "detectors must be cheap and return UNKNOWN when unsure"
            )
        elif (exited := _exited(run.error)) is not None:
            problem = (
                f"{exited}{asked}: it would end the host; detectors must return UNKNOWN when unsure"
            )
        elif run.error is not None:
            problem = (
                f"raised {describe_typed(run.error, asked)}; "
                "detectors must return UNKNOWN instead of raising"
            )
        elif detection is None:
            problem = f"returned {type(run.value).__name__}{asked}; expected {expected}"
        else:
            results[label] = str(detection.value)
            continue
        raise subject.breach(f"detect() {problem}") from run.error
    return results


@contextmanager
def _spread(
    requests: _Requests | None,
) -> Iterator[list[tuple[str, ServeRequest]]]:
    """*requests* as a list of pairs (a mapping's items); by default :func:`awkward_requests`
    in a temporary directory."""
    __tracebackhide__ = True
    refuse_string(requests, "requests must be (label, ServeRequest) pairs or a mapping of them")
    with tempfile.TemporaryDirectory(prefix="sglang-backends-contract-") as directory:
        given = awkward_requests(directory) if requests is None else requests
        pairs = list(given.items() if isinstance(given, Mapping) else given)
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise TypeError(f"requests must be (label, ServeRequest) pairs, not {pair!r}")
            if not isinstance(pair[1], ServeRequest):
                raise TypeError(
                    f"requests: {pair[0]!r} is a {type(pair[1]).__name__}, not a ServeRequest"
                )
        yield pairs


def _loaded(load: Callable[[], _T], name: str) -> _T:
    """What *load* returns, called on a worker thread as automatic detection loads (without its
    bound), and awaited here: whatever the plugin raises there, ``KeyboardInterrupt`` too, is
    its failure (no signal unwinds a worker), while the user's Ctrl+C still interrupts the wait.
    """
    __tracebackhide__ = True
    run = TimedRun(functools.partial(_as_in_main_thread, load), f"load-{name}")
    run_each([run], timeout=math.inf)
    # Without the worker's frames (the kit's); its cause has the plugin's.
    if run.error is not None:
        raise run.error.with_traceback(None)
    return cast(_T, run.value)


def _produce(factory: Callable[[], object], name: str, when: str = "") -> object:
    """What *factory* returns; a ContractViolation if it raises anything, ``SystemExit`` and
    ``KeyboardInterrupt`` too, as the registry takes a load (*when* says under what).
    """
    __tracebackhide__ = True

    def breach(exc: BaseException) -> ContractViolation:
        exited = _exited(exc)
        if exited is not None:
            return ContractViolation(f"Factory {name!r} {exited} while loading{when}", name=name)
        return ContractViolation(f"Factory {name!r} raised {describe_typed(exc, when)}", name=name)

    return _loaded(functools.partial(call_plugin_code, factory, breach), name)


def _refused_load(exc: Exception, name: str) -> ContractViolation:
    """The registry's refusal *exc* of the installed backend *name*, as a breach (to be
    raised from the plugin's own error, which the refusal words)."""
    exited = _exited(exc)
    distribution = getattr(exc, "distribution", None)
    if exited is not None:
        message = f"{load_failed(name, distribution)}: plugin {exited} while loading"
    else:
        message = str(exc)
    return ContractViolation(message, name=name, distribution=distribution)


@contextmanager
def _host_kept() -> Iterator[None]:
    """Around a check: plugin code's ``os._exit`` raises ``SystemExit`` (a breach, not
    the end of the test run), orphans re-parent to this process to be seen
    (:func:`~sglang_backends._core.tree.adopting_orphans`), and a breach's causes keep only
    plugin code's frames (:func:`_plugin_frames`). Each is as it was afterwards.
    """
    real_exit = os._exit
    os._exit = _exit_raising
    try:
        with tree.adopting_orphans():
            yield
    except ContractViolation as breach:
        _plugin_frames(breach)
        raise
    finally:
        os._exit = real_exit


#: The packages whose frames come before plugin code's in what it raised: the kit's and the
#: registry's, stevedore's, the import system's and SGLang's host, which called it.
_CALLERS = ("sglang_backends", "stevedore", "importlib", "sglang")


def _plugin_frames(breach: BaseException) -> None:
    """Cut from each exception *breach* was raised from the frames that called plugin code:
    pytest shows a failure as the plugin's test, the breach and the plugin's own frames."""
    cause = breach.__cause__
    while cause is not None:
        trace = cause.__traceback__
        while trace is not None and _caller(trace.tb_frame.f_globals.get("__name__")):
            trace = trace.tb_next
        cause.with_traceback(trace)
        cause = cause.__cause__


def _caller(module: object) -> bool:
    return isinstance(module, str) and any(
        module == package or module.startswith(f"{package}.") for package in _CALLERS
    )


def assert_backend_contract(
    factory_or_name: Callable[[], object] | str,
    *,
    registry: object | None = None,
    requests: _Requests | None = None,
    timeout: float = 10.0,
    sglang: bool | None = None,
) -> ContractReport:
    """Check a backend against the serve-backend contract; raise on the first breach.

    Where SGLang's host is checked, SGLang's contract module is imported first, as
    ``sglang serve`` imports it before any plugin. A process the plugin leaves running
    (started as it is imported, built or asked to detect; one that double-forked too,
    on Linux) is killed, and is a breach; so is a non-daemon thread still running
    :data:`~sglang_backends._core.console.THREAD_GRACE` s after, and ``os._exit``
    (but in ``run(--help)`` with status 0).

    :param factory_or_name: the plugin's zero-argument factory, or the name of
        an installed backend (loaded through *registry*, or a new
        :class:`~sglang_backends.ServeBackendRegistry` with the built-ins).
    :param requests: ``(label, request)`` pairs for the detector, or a mapping of label to
        request; by default :func:`awkward_requests` (no model path, a hub id, garbage, ...).
    :param timeout: seconds ``run(--help)`` and each ``detect()`` may take, each measured
        from its own start.
    :param sglang: also check that SGLang's own host accepts the backend
        (see :func:`assert_sglang_accepts`): ``None`` (the default) does so
        where SGLang is installed, ``True`` requires SGLang, ``False`` skips it.
    :raises ContractViolation: an ``AssertionError`` explaining the breach.
    :raises TypeError: *requests* is a string or holds something other than
        ``(label, ServeRequest)`` pairs (:func:`awkward_requests` gives them).
    :raises ConfigurationError: *timeout* is no number of seconds (a ``TypeError`` too).
    :returns: what was checked.
    """
    __tracebackhide__ = True
    timeout = _timeout(timeout)
    with _host_kept():
        return _check_contract(factory_or_name, registry, requests, timeout, sglang)


def _timeout(timeout: object) -> float:
    """The checks' *timeout* argument, as every timeout is taken (a string refused).

    :raises ConfigurationError: it is not a number of seconds in range.
    """
    refuse_string(timeout, "timeout must be a number of seconds")
    return timeout_argument("timeout", cast(float, timeout))


def _check_contract(
    factory_or_name: Callable[[], object] | str,
    registry: object | None,
    requests: _Requests | None,
    timeout: float,
    sglang: bool | None,
) -> ContractReport:
    """:func:`assert_backend_contract`'s checks, under :func:`_host_kept`."""
    __tracebackhide__ = True
    name = _name_of(factory_or_name)
    subject = _Subject(name)
    before = set(tree.descendants())
    try:
        # SGLang's contract, or why it is not checked; imported before any plugin is loaded,
        # as sglang serve imports it.
        upstream = (
            "sglang=False was given" if sglang is False else _sglang_contract(required=bool(sglang))
        )
        unchecked = None if isinstance(upstream, ModuleType) else upstream
        # Those SGLang's import started are not the plugin's.
        threads_before = threading.enumerate()
        if isinstance(factory_or_name, str):
            found: Any = _registry(name) if registry is None else registry
            try:
                registered = _loaded(functools.partial(found.get, name), name)
            except Exception as exc:  # noqa: BLE001 - its cause is the plugin's
                raise _refused_load(exc, name) from exc.__cause__ or exc
            backend = registered.backend
            # The factory, for its source; a built-in has no entry point (plugin_of: None).
            try:
                plugin = found.plugin_of(registered)
                factory = plugin.entry_point.load()
            except Exception:  # noqa: BLE001 - the registry loaded it already
                plugin = factory = None
            subject = _Subject(
                registered.name,
                plugin.provider if plugin is not None else registered.distribution,
                builtin=plugin is None and registered.distribution is None,
            )
        else:
            factory = factory_or_name
            if not callable(factory):
                raise ContractViolation(f"{name!r} is not callable; a factory takes no arguments")
            produced = _produce(factory, name)
            # The registry's own check of what a factory returned.
            try:
                backend = validated(name, produced)
            except ServeBackendError as exc:
                raise ContractViolation(str(exc), name=name) from exc
        # A built-in has no factory, so no source to read.
        for value in declared_api_versions(factory):
            if not isinstance(value, ast.Constant):
                raise subject.breach(
                    f"api_version is given as {ast.unparse(value)!r}; declare it as a literal "
                    f"(api_version={SERVE_BACKEND_API_VERSION}) so a later host can tell which "
                    "contract the plugin was written for",
                )
        if not callable(backend.run):
            raise subject.breach("run is not callable")
        if backend.detect is not None and not callable(backend.detect):
            raise subject.breach("detect is neither None nor callable")
        if not isinstance(backend.requires_model_path, bool):
            raise subject.breach("requires_model_path must be a bool")

        help_seconds = _check_help(backend, subject, timeout)
        with _spread(requests) as spread:
            detections = _check_detector(backend, subject, spread, timeout)
            if unchecked is None:
                _sglang_accepts(factory_or_name, subject, spread, timeout)
            elif sglang is not False:
                warnings.warn(
                    f"{backend_named(subject.name, subject.provider, start=True)}: SGLang's "
                    f"acceptance was not checked: {unchecked}",
                    SGLangNotCheckedWarning,
                    stacklevel=3,
                )
    finally:
        # Whatever the outcome, nothing the plugin started outlives the check.
        left = tree.kill_left(p for p in tree.descendants() if p not in before)
    if left:
        raise subject.breach(
            f"left processes running once it was loaded and asked to detect: "
            f"{sorted(p.pid for p in left)} (killed now); start processes in run() only: "
            "one started as the plugin loads outlives a backend's --help under both hosts",
        )
    threads = console.threads_left(threads_before)
    if threads:
        raise subject.breach(
            f"left non-daemon threads running: {', '.join(repr(t.name) for t in threads)}; "
            "sglang serve would wait for them for ever before it exits: make them daemon "
            "threads or join them"
        )
    return ContractReport(backend, help_seconds, detections, sglang_unchecked=unchecked)


def _registry(name: str) -> Any:
    """A new registry with the built-ins, as serve builds it; a plugin claiming a built-in
    name, which fails every serve, fails the check of *name*, naming that plugin."""
    __tracebackhide__ = True
    try:
        return sglang_backends.ServeBackendRegistry()
    except BackendConflictError as exc:
        claimed = exc.name or "a built-in name"
        raise ContractViolation(
            f"Serve backend {name!r} cannot be checked: serve fails for every backend while "
            f"plugin {claimed!r} from {exc.distribution} is installed ({describe(exc)}); "
            f"uninstall it where the tests run ({uninstall_command(exc.distribution)}), or check "
            "with a registry that disables it: "
            f"registry=ServeBackendRegistry(disabled=[{claimed!r}])",
            name=name,
        ) from exc


_PORTABLE_HINT = "build it with sglang_backends.portable_backend(...) so that both hosts accept it"


def assert_sglang_accepts(
    factory_or_name: Callable[[], object] | str,
    *,
    requests: _Requests | None = None,
    timeout: float = 10.0,
) -> None:
    """Check that SGLang's own ``sglang serve`` host accepts the backend; SGLang must be installed.

    An installed backend is loaded through SGLang's registry, which refuses any
    ``ServeBackend`` but its own; a factory is called with SGLang's contract
    loaded. Given SGLang's ``ServeRequest`` for each of *requests* (by default
    :func:`awkward_requests`), the detector must answer with SGLang's
    ``ServeBackendDetection``. :func:`sglang_backends.portable_backend` passes.

    :raises ContractViolation: SGLang refuses the backend or an answer, or is not installed.
    :raises ConfigurationError: *timeout* is no number of seconds (a ``TypeError`` too).
    """
    __tracebackhide__ = True
    timeout = _timeout(timeout)
    with _host_kept(), _spread(requests) as spread:
        _sglang_accepts(factory_or_name, _subject(factory_or_name), spread, timeout)


def _subject(factory_or_name: Callable[[], object] | str) -> _Subject:
    """The backend *factory_or_name* is, named with the distribution serve would load it from
    (none where serve would not load it: the load's refusal says why)."""
    name = _name_of(factory_or_name)
    if not isinstance(factory_or_name, str):
        return _Subject(name)
    try:
        plugin = sglang_backends.ServeBackendRegistry().inventory.by_name(name)
    except ServeBackendError:
        return _Subject(name)
    if plugin is None:
        return _Subject(name, builtin=True)
    return _Subject(plugin.name, plugin.provider)


def _sglang_accepts(
    factory_or_name: Callable[[], object] | str,
    subject: _Subject,
    spread: list[tuple[str, ServeRequest]],
    timeout: float,
) -> None:
    """:func:`assert_sglang_accepts`'s checks, of *subject*, on the requests *spread*."""
    __tracebackhide__ = True
    upstream = _sglang_contract(required=True)
    assert isinstance(upstream, ModuleType)
    name = _name_of(factory_or_name)
    if isinstance(factory_or_name, str):

        def refused(exc: BaseException) -> ContractViolation:
            named = backend_named(subject.name, subject.provider, builtin=subject.builtin)
            said = str(_exited(exc) or describe(exc))
            # Its sentence ends where the hint's begins.
            if isinstance(exc, TypeError):
                said = f"{said.removesuffix('.')}; {_PORTABLE_HINT}"
            return ContractViolation(
                f"SGLang's registry refuses {named}: {said}",
                name=subject.name,
                distribution=subject.provider,
            )

        def load() -> Any:
            return upstream.ServeBackendRegistry({}).get(name).backend

        # Whatever it lets through (it catches Exception only) is the plugin's, as in ours.
        backend = _loaded(functools.partial(call_plugin_code, load, refused), name)
    else:
        backend = _produce(factory_or_name, name, " when called with SGLang's contract loaded")
        if not isinstance(backend, upstream.ServeBackend):
            raise ContractViolation(
                f"SGLang refuses factory {name!r}: it returned {type(backend).__name__} from "
                f"{type(backend).__module__}; expected {SGLANG_CONTRACT_MODULE}.ServeBackend; "
                + _PORTABLE_HINT,
                name=name,
            )
    their_requests = [(label, upstream.ServeRequest(**asdict(req))) for label, req in spread]
    _check_detector(
        backend,
        subject,
        their_requests,
        timeout,
        # SGLang compares with ``is ServeBackendDetection.MATCH``: only its own count.
        accept=lambda value: value if isinstance(value, upstream.ServeBackendDetection) else None,
        expected=f"{SGLANG_CONTRACT_MODULE}.ServeBackendDetection under SGLang's host; "
        + _PORTABLE_HINT,
    )


def _name_of(factory: object) -> str:
    """The name a check calls a backend by: an installed one's name, or its factory's
    ``module.qualname``."""
    if isinstance(factory, str):
        return factory
    if isinstance(factory, functools.partial):
        return f"partial({_name_of(factory.func)})"
    qualname = getattr(factory, "__qualname__", None)
    if not isinstance(qualname, str):
        return repr(factory)
    module = getattr(factory, "__module__", None)
    return f"{module}.{qualname}" if isinstance(module, str) else qualname


def _sglang_contract(*, required: bool) -> ModuleType | str:
    """SGLang's contract module; else why SGLang's host was not checked, and what to do about
    it: SGLang is not installed, or a fork's ``sglang`` package (named, with its distribution,
    and nothing of it imported) stands where SGLang's would.

    :raises ContractViolation: SGLang is absent and *required*, or its contract fails to import.
    """
    __tracebackhide__ = True
    try:
        return load_sglang(SGLANG_CONTRACT_MODULE, filtered=False)
    except Exception as exc:
        parents = ("sglang", "sglang.cli", SGLANG_CONTRACT_MODULE)
        if not isinstance(exc, ModuleNotFoundError) or exc.name not in parents:
            detail = exc if isinstance(exc, ModuleNotFoundError) else describe_typed(exc)
            raise ContractViolation(
                f"SGLang is installed but {SGLANG_CONTRACT_MODULE} failed to import: {detail}"
            ) from exc
        missing = exc
    unusable = sglang_unusable()
    if required:
        needs = (
            f"Checking that SGLang accepts the backend needs SGLang's {SGLANG_CONTRACT_MODULE}"
            " (SGLang 0.5.18 or later)"
        )
        # Nothing of the fork was imported: no error to chain.
        if unusable is not None:
            raise ContractViolation(f"{needs}, but {unusable}") from None
        raise ContractViolation(f"{needs}, which is not importable: {missing}") from missing
    if unusable is None:
        why = f" ({SGLANG_CONTRACT_MODULE} is not importable)"
        remedy = "install SGLang where the tests run"
    else:
        why = f": {unusable}"
        remedy = "run the tests where SGLang is installed"
    return (
        f"SGLang is not installed{why}, so whether 'sglang serve' accepts the backend is "
        f"unknown; {remedy}, or pass sglang=False to say it is not wanted"
    )
