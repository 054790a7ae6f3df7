"""A conformance check plugin authors run against their backend.

What the host relies on: a literal, supported ``api_version``; ``run()``
honouring ``--help`` promptly with no socket or process; a detector that
answers awkward requests and never raises; and, where SGLang is installed,
SGLang's own registry accepting the backend and its answers.
"""

from __future__ import annotations

import ast
import functools
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import cast

import sglang_backends
from sglang_backends._core import tree
from sglang_backends._sglang.fork import sglang_unusable
from sglang_backends._sglang.installed import load_sglang
from sglang_backends.contract import (
    SERVE_BACKEND_API_VERSION,
    SGLANG_CONTRACT_MODULE,
    ServeBackend,
    ServeRequest,
    coerce_backend,
    coerce_detection,
)
from sglang_backends.errors import ServeBackendError
from sglang_backends.testing._sources import declared_api_versions


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
    long_path = "m" * 100_000
    garbage = "\x00\udcff../\n\t*?"
    missing = os.path.join(directory, "does-not-exist")
    return {
        "no model path": ServeRequest(argv=(), model_path=None),
        "empty model path": ServeRequest(argv=("--model-path", ""), model_path=""),
        "local directory": ServeRequest(("--model-path", directory), directory, True),
        "missing local path": ServeRequest(("--model-path", missing), missing),
        "hub id": ServeRequest(("--model-path", "org/model"), "org/model", True),
        "garbage": ServeRequest(("--model-path", garbage), garbage),
        "very long string": ServeRequest(("--model-path", long_path), long_path),
        "help only": ServeRequest(argv=("--help",), model_path=None),
    }


def _call_bounded(
    function: Callable[[], object],
    label: str,
    timeout: float,
    watch: Callable[[], None] = lambda: None,
) -> tuple[object, BaseException | None] | None:
    """Run plugin code in a thread, polling *watch*: ``(value, error)``, ``None`` past *timeout*."""
    outcome: list[tuple[object, BaseException | None]] = []

    def call() -> None:
        try:
            outcome.append((function(), None))
        except BaseException as exc:  # noqa: BLE001 - the caller reports it
            outcome.append((None, exc))

    thread = threading.Thread(target=call, name=label, daemon=True)
    thread.start()
    deadline = time.perf_counter() + timeout
    while thread.is_alive() and time.perf_counter() < deadline:
        watch()
        thread.join(0.01)
    return None if thread.is_alive() else outcome[0]


def _check_help(backend: ServeBackend, name: str, timeout: float) -> float:
    """Run ``run(--help)`` in a thread, watching for sockets and processes; its seconds."""
    __tracebackhide__ = True
    pid = os.getpid()
    sockets_before, children_before = tree.footprint(pid)
    opened: set[tuple[str, int]] = set()
    spawned: set[int] = set()

    def watch() -> None:
        sockets, children = tree.footprint(pid)
        opened.update(sockets - sockets_before)
        spawned.update(children - children_before)

    request = ServeRequest(argv=("--help",), model_path=None)
    started = time.perf_counter()
    outcome = _call_bounded(functools.partial(backend.run, request), f"help-{name}", timeout, watch)
    elapsed = time.perf_counter() - started
    watch()
    error = None if outcome is None else outcome[1]
    if isinstance(error, SystemExit) and error.code in (0, None):
        error = None  # argparse's --help exits 0
    if outcome is None:
        problem = (
            f"did not return within {timeout:g} s; "
            "print the help and return without launching a server"
        )
    elif opened:
        problem = f"opened listening sockets {sorted(opened)}; --help must not launch a server"
    elif spawned:
        tree.kill_trees(*spawned)
        problem = f"started processes {sorted(spawned)}; --help must not launch a server"
    elif error is not None:
        problem = f"raised {type(error).__name__}: {error}"
    else:
        return elapsed
    raise ContractViolation(f"Serve backend {name!r}: run(['--help']) {problem}") from error


def _check_detector(
    backend: ServeBackend,
    name: str,
    requests: Iterable[tuple[str, object]],
    timeout: float,
    accept: Callable[[object], object | None] = coerce_detection,
    expected: str = "a ServeBackendDetection",
) -> dict[str, str]:
    """Call the detector on each request in a thread; *accept* gives the answer or ``None``."""
    __tracebackhide__ = True
    detector = cast("Callable[[object], object] | None", backend.detect)
    if detector is None:
        return {}
    results: dict[str, str] = {}
    for label, request in requests:
        outcome = _call_bounded(functools.partial(detector, request), f"detect-{name}", timeout)
        if outcome is None:
            raise ContractViolation(
                f"Serve backend {name!r}: detect() did not return within {timeout:g} s for "
                f"a request with {label}; detectors must be cheap and return UNKNOWN when unsure"
            )
        value, error = outcome
        if error is not None:
            raise ContractViolation(
                f"Serve backend {name!r}: detect() raised {type(error).__name__} for a request "
                f"with {label}: {error}; detectors must return UNKNOWN instead of raising"
            ) from error
        detection = accept(value)
        if detection is None:
            raise ContractViolation(
                f"Serve backend {name!r}: detect() returned {type(value).__name__} "
                f"for a request with {label}; expected {expected}"
            )
        results[label] = str(getattr(detection, "value", detection))
    return results


@contextmanager
def _spread(
    requests: Iterable[tuple[str, ServeRequest]] | None,
) -> Iterator[list[tuple[str, ServeRequest]]]:
    """*requests* as a list; by default :func:`awkward_requests` in a temporary directory."""
    if requests is not None:
        yield list(requests)
        return
    with tempfile.TemporaryDirectory(prefix="sglang-backends-contract-") as directory:
        yield list(awkward_requests(directory).items())


def assert_backend_contract(
    factory_or_name: Callable[[], object] | str,
    *,
    registry: object | None = None,
    requests: Iterable[tuple[str, ServeRequest]] | None = None,
    timeout: float = 10.0,
    sglang: bool | None = None,
) -> ContractReport:
    """Check a backend against the serve-backend contract; raise on the first breach.

    :param factory_or_name: the plugin's zero-argument factory, or the name of
        an installed backend (loaded through *registry*, or a new
        :class:`~sglang_backends.ServeBackendRegistry` with the built-ins).
    :param requests: ``(label, request)`` pairs for the detector; by default
        :func:`awkward_requests` (no model path, a hub id, garbage, ...).
    :param timeout: seconds ``run(--help)`` and each ``detect()`` may take.
    :param sglang: also check that SGLang's own host accepts the backend
        (see :func:`assert_sglang_accepts`): ``None`` (the default) does so
        where SGLang is installed, ``True`` requires SGLang, ``False`` skips it.
    :raises ContractViolation: an ``AssertionError`` explaining the breach.
    :returns: what was checked.
    """
    __tracebackhide__ = True
    if isinstance(factory_or_name, str):
        name = factory_or_name
        if registry is None:
            registry = sglang_backends.ServeBackendRegistry()
        try:
            registered = registry.get(name)  # type: ignore[attr-defined]
        except Exception as exc:
            raise ContractViolation(str(exc)) from exc
        backend = registered.backend
        plugin_of = getattr(registry, "plugin_of", None)
        try:  # the factory object, for its source; a built-in has no entry point
            plugin = None if plugin_of is None else plugin_of(registered)
            factory = None if plugin is None else plugin.entry_point.load()
        except Exception:  # noqa: BLE001 - the registry loaded it already
            factory = None
    else:
        factory = factory_or_name
        name = _factory_name(factory)
        if not callable(factory):
            raise ContractViolation(f"{name!r} is not callable; a factory takes no arguments")
        try:
            produced = factory()
        except Exception as exc:
            raise ContractViolation(f"Factory {name!r} raised {type(exc).__name__}: {exc}") from exc
        backend = coerce_backend(produced)
        if backend is None:
            raise ContractViolation(
                f"Factory {name!r} returned {type(produced).__name__}; expected ServeBackend"
            )
        if backend.api_version != SERVE_BACKEND_API_VERSION:
            raise ContractViolation(
                f"Factory {name!r} declares API version {backend.api_version!r}; "
                f"this release requires version {SERVE_BACKEND_API_VERSION}"
            )
    for value in declared_api_versions(factory):  # none for a built-in (no factory)
        if not isinstance(value, ast.Constant):
            raise ContractViolation(
                f"Serve backend {name!r}: api_version is given as {ast.unparse(value)!r}; "
                f"declare it as a literal (api_version={SERVE_BACKEND_API_VERSION}) so a later "
                "host can tell which contract the plugin was written for"
            )
    if not callable(backend.run):
        raise ContractViolation(f"Serve backend {name!r}: run is not callable")
    if backend.detect is not None and not callable(backend.detect):
        raise ContractViolation(f"Serve backend {name!r}: detect is neither None nor callable")
    if not isinstance(backend.requires_model_path, bool):
        raise ContractViolation(f"Serve backend {name!r}: requires_model_path must be a bool")

    help_seconds = _check_help(backend, name, timeout)
    with _spread(requests) as spread:
        detections = _check_detector(backend, name, spread, timeout)
        unchecked = "sglang=False was given" if sglang is False else None
        if unchecked is None and _sglang_contract(required=bool(sglang)) is None:
            unchecked = _sglang_absent()
            warnings.warn(
                f"Serve backend {name!r}: SGLang's acceptance was not checked: {unchecked}",
                SGLangNotCheckedWarning,
                stacklevel=2,
            )
        if unchecked is None:
            assert_sglang_accepts(factory_or_name, requests=spread, timeout=timeout)
    return ContractReport(backend, help_seconds, detections, sglang_unchecked=unchecked)


_PORTABLE_HINT = "build it with sglang_backends.portable_backend(...) so that both hosts accept it"


def assert_sglang_accepts(
    factory_or_name: Callable[[], object] | str,
    *,
    requests: Iterable[tuple[str, ServeRequest]] | None = None,
    timeout: float = 10.0,
) -> None:
    """Check that SGLang's own ``sglang serve`` host accepts the backend; SGLang must be installed.

    An installed backend is loaded through SGLang's registry, which refuses any
    ``ServeBackend`` but its own; a factory is called with SGLang's contract
    loaded. Given SGLang's ``ServeRequest`` for each of *requests* (by default
    :func:`awkward_requests`), the detector must answer with SGLang's
    ``ServeBackendDetection``. :func:`sglang_backends.portable_backend` passes.

    :raises ContractViolation: SGLang is not installed, or refuses the backend or an answer.
    """
    __tracebackhide__ = True
    upstream = _sglang_contract(required=True)
    assert upstream is not None
    if isinstance(factory_or_name, str):
        name = factory_or_name
        try:
            backend = upstream.ServeBackendRegistry({}).get(name).backend
        except Exception as exc:
            raise ContractViolation(
                f"SGLang's registry refuses serve backend {name!r}: {exc}"
                + (f"; {_PORTABLE_HINT}" if isinstance(exc, TypeError) else "")
            ) from exc
    else:
        name = _factory_name(factory_or_name)
        try:
            backend = factory_or_name()
        except Exception as exc:
            raise ContractViolation(
                f"Factory {name!r} raised {type(exc).__name__} when called with SGLang's "
                f"contract loaded: {exc}"
            ) from exc
        if not isinstance(backend, upstream.ServeBackend):
            raise ContractViolation(
                f"SGLang refuses factory {name!r}: it returned {type(backend).__name__} from "
                f"{type(backend).__module__}; expected {SGLANG_CONTRACT_MODULE}.ServeBackend; "
                + _PORTABLE_HINT
            )
    detection_class = upstream.ServeBackendDetection
    with _spread(requests) as spread:
        their_requests = [(label, upstream.ServeRequest(**asdict(req))) for label, req in spread]
        _check_detector(
            backend,
            name,
            their_requests,
            timeout,
            # SGLang compares with ``is ServeBackendDetection.MATCH``: only its own members count.
            accept=lambda value: value if isinstance(value, detection_class) else None,
            expected=f"{SGLANG_CONTRACT_MODULE}.ServeBackendDetection under SGLang's host; "
            + _PORTABLE_HINT,
        )


def _factory_name(factory: object) -> str:
    if isinstance(factory, functools.partial):
        return f"partial({_factory_name(factory.func)})"
    return str(getattr(factory, "__qualname__", repr(factory)))


def _sglang_contract(*, required: bool) -> ModuleType | None:
    """SGLang's contract module, ``None`` if absent; ContractViolation if *required* or broken.

    Beside a fork shipping the ``sglang`` package without the serve-backend API,
    nothing of it is imported: SGLang is absent.
    """
    __tracebackhide__ = True
    try:
        return load_sglang(SGLANG_CONTRACT_MODULE, filtered=False)
    except Exception as exc:
        parents = ("sglang", "sglang.cli", SGLANG_CONTRACT_MODULE)
        if not isinstance(exc, ModuleNotFoundError) or exc.name not in parents:
            detail = exc if isinstance(exc, ModuleNotFoundError) else f"{type(exc).__name__}: {exc}"
            raise ContractViolation(
                f"SGLang is installed but {SGLANG_CONTRACT_MODULE} failed to import: {detail}"
            ) from exc
        if not required:
            return None
        unusable = sglang_unusable()
        needs = (
            f"Checking that SGLang accepts the backend needs SGLang's {SGLANG_CONTRACT_MODULE}"
            " (SGLang 0.5.23 or later)"
        )
        if unusable is not None:  # nothing of the fork was imported: no error to chain
            raise ContractViolation(f"{needs}, but {unusable}") from None
        raise ContractViolation(f"{needs}, which is not importable: {exc}") from exc


def _sglang_absent() -> str:
    """Why SGLang's host was not checked: not installed, or a fork's ``sglang`` package
    (named, with its distribution) stands where SGLang's would; and what to do about it."""
    unusable = sglang_unusable()
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
