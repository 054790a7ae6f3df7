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
from typing import Any, TypeAlias, TypeVar, cast

import psutil

import sglang_backends
from sglang_backends._core import tree
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
    describe,
    describe_typed,
    refuse_string,
)
from sglang_backends.testing._sources import declared_api_versions

_T = TypeVar("_T")
#: A detector's requests as the checks take them: ``(label, request)`` pairs, or a mapping.
_Requests: TypeAlias = Iterable[tuple[str, ServeRequest]] | Mapping[str, ServeRequest]


class ContractViolation(ServeBackendError, AssertionError):
    """A backend breaks the serve-backend contract; the message says how (a pytest failure)."""


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


def _breach(name: str, problem: str) -> ContractViolation:
    """The breach *problem* of serve backend *name*'s contract, as the checks word it."""
    return ContractViolation(f"Serve backend {name!r}: {problem}")


def _check_help(backend: ServeBackend, name: str, timeout: float) -> float:
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
    run = TimedRun(functools.partial(backend.run, request), f"help-{name}")
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
    # argparse's --help exits 0.
    if isinstance(error, SystemExit) and error.code in (0, None):
        error = None
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
    elif error is not None:
        problem = f"raised {describe_typed(error)}"
        if _signal_set_in_a_thread(error):
            problem += (
                " (the check calls it in a worker thread, where signal.signal raises; both "
                "hosts call it in the main thread: set handlers after handling --help)"
            )
    else:
        return run.seconds
    raise _breach(name, f"run(['--help']) {problem}") from error


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
    name: str,
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
        run = TimedRun(functools.partial(backend.detect, request), f"detect-{name}")
        run_each([run], timeout=timeout)
        detection = accept(run.value)
        asked = f" for a request with {label}"
        # Its own seconds: one holding the GIL outlasts any wait.
        if not run.within(timeout):
            problem = (
                f"did not return within {timeout:g} s{asked}; "
                "detectors must be cheap and return UNKNOWN when unsure"
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
        raise _breach(name, f"detect() {problem}") from run.error
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
    run = TimedRun(load, f"load-{name}")
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
        return ContractViolation(f"Factory {name!r} raised {describe_typed(exc, when)}")

    return _loaded(functools.partial(call_plugin_code, factory, breach), name)


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
    (started as it is imported, built or asked to detect) is killed, and is a breach.

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
    :returns: what was checked.
    """
    __tracebackhide__ = True
    name = _name_of(factory_or_name)
    before = set(tree.descendants())
    try:
        # SGLang's contract, or why it is not checked; imported before any plugin is loaded,
        # as sglang serve imports it.
        upstream = (
            "sglang=False was given" if sglang is False else _sglang_contract(required=bool(sglang))
        )
        unchecked = None if isinstance(upstream, ModuleType) else upstream
        if isinstance(factory_or_name, str):
            found: Any = _registry(name) if registry is None else registry
            try:
                registered = _loaded(functools.partial(found.get, name), name)
            except Exception as exc:
                raise ContractViolation(str(exc)) from exc
            backend = registered.backend
            # The factory, for its source; a built-in has no entry point (plugin_of: None).
            try:
                factory = found.plugin_of(registered).entry_point.load()
            except Exception:  # noqa: BLE001 - the registry loaded it already
                factory = None
        else:
            factory = factory_or_name
            if not callable(factory):
                raise ContractViolation(f"{name!r} is not callable; a factory takes no arguments")
            produced = _produce(factory, name)
            # The registry's own check of what a factory returned.
            try:
                backend = validated(name, produced)
            except ServeBackendError as exc:
                raise ContractViolation(str(exc)) from exc
        # A built-in has no factory, so no source to read.
        for value in declared_api_versions(factory):
            if not isinstance(value, ast.Constant):
                raise _breach(
                    name,
                    f"api_version is given as {ast.unparse(value)!r}; declare it as a literal "
                    f"(api_version={SERVE_BACKEND_API_VERSION}) so a later host can tell which "
                    "contract the plugin was written for",
                )
        if not callable(backend.run):
            raise _breach(name, "run is not callable")
        if backend.detect is not None and not callable(backend.detect):
            raise _breach(name, "detect is neither None nor callable")
        if not isinstance(backend.requires_model_path, bool):
            raise _breach(name, "requires_model_path must be a bool")

        help_seconds = _check_help(backend, name, timeout)
        with _spread(requests) as spread:
            detections = _check_detector(backend, name, spread, timeout)
            if unchecked is None:
                assert_sglang_accepts(factory_or_name, requests=spread, timeout=timeout)
            elif sglang is not False:
                warnings.warn(
                    f"Serve backend {name!r}: SGLang's acceptance was not checked: {unchecked}",
                    SGLangNotCheckedWarning,
                    stacklevel=2,
                )
    finally:
        # Whatever the outcome, nothing the plugin started outlives the check.
        left = tree.kill_left(p for p in tree.descendants() if p not in before)
    if left:
        raise _breach(
            name,
            f"left processes running once it was loaded and asked to detect: "
            f"{sorted(p.pid for p in left)} (killed now); start processes in run() only: "
            "one started as the plugin loads outlives a backend's --help under both hosts",
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
            f"registry=ServeBackendRegistry(disabled=[{claimed!r}])"
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
    """
    __tracebackhide__ = True
    upstream = _sglang_contract(required=True)
    assert isinstance(upstream, ModuleType)
    name = _name_of(factory_or_name)
    if isinstance(factory_or_name, str):

        def refused(exc: BaseException) -> ContractViolation:
            said = describe(exc)
            # Its sentence ends where the hint's begins.
            if isinstance(exc, TypeError):
                said = f"{said.removesuffix('.')}; {_PORTABLE_HINT}"
            return ContractViolation(f"SGLang's registry refuses serve backend {name!r}: {said}")

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
                + _PORTABLE_HINT
            )
    with _spread(requests) as spread:
        their_requests = [(label, upstream.ServeRequest(**asdict(req))) for label, req in spread]
        _check_detector(
            backend,
            name,
            their_requests,
            timeout,
            # SGLang compares with ``is ServeBackendDetection.MATCH``: only its own count.
            accept=lambda value: (
                value if isinstance(value, upstream.ServeBackendDetection) else None
            ),
            expected=f"{SGLANG_CONTRACT_MODULE}.ServeBackendDetection under SGLang's host; "
            + _PORTABLE_HINT,
        )


def _name_of(factory: object) -> str:
    """The name a check calls a backend by: an installed one's name, or its factory's."""
    if isinstance(factory, str):
        return factory
    if isinstance(factory, functools.partial):
        return f"partial({_name_of(factory.func)})"
    return str(getattr(factory, "__qualname__", repr(factory)))


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
