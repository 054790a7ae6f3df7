"""A conformance check plugin authors run against their backend.

:func:`assert_backend_contract` takes a factory or the name of an installed
backend and checks what the host relies on: the factory returns a
``ServeBackend`` with a literal, supported ``api_version``; ``run()`` honours
``--help`` promptly, without listening on a socket or starting processes;
the detector, if any, answers a spread of awkward requests with a
``ServeBackendDetection`` and never raises.
"""

from __future__ import annotations

import ast
import inspect
import os
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sglang_backends.contract import (
    SERVE_BACKEND_API_VERSION,
    ServeBackend,
    ServeRequest,
    coerce_backend,
    coerce_detection,
)

__all__ = ["ContractReport", "ContractViolation", "assert_backend_contract", "awkward_requests"]


class ContractViolation(AssertionError):
    """A backend breaks the serve-backend contract; the message says how."""


@dataclass
class ContractReport:
    """What :func:`assert_backend_contract` checked, for tests that want details."""

    backend: ServeBackend
    help_seconds: float
    detections: dict[str, str] = field(default_factory=dict)


def awkward_requests(directory: str) -> dict[str, ServeRequest]:
    """Requests a detector must survive, by label; *directory* is an empty local dir."""
    long_path = "m" * 100_000
    garbage = "\x00\udcff../\n\t*?"
    missing = os.path.join(directory, "does-not-exist")
    cases = {
        "no model path": ServeRequest(argv=(), model_path=None),
        "empty model path": ServeRequest(argv=("--model-path", ""), model_path=""),
        "local directory": ServeRequest(("--model-path", directory), directory, True),
        "missing local path": ServeRequest(("--model-path", missing), missing),
        "hub id": ServeRequest(("--model-path", "org/model"), "org/model", True),
        "garbage": ServeRequest(("--model-path", garbage), garbage),
        "very long string": ServeRequest(("--model-path", long_path), long_path),
        "help only": ServeRequest(argv=("--help",), model_path=None),
    }
    return cases


def _literal_api_version(factory: Callable[..., object]) -> str | None:
    """Why the factory's ``api_version`` is not a literal, or ``None`` if it is (or unknown)."""
    try:
        source = textwrap.dedent(inspect.getsource(factory))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if callee != "ServeBackend":
            continue
        value = next((k.value for k in node.keywords if k.arg == "api_version"), None)
        if value is None and node.args:
            value = node.args[0]
        if value is not None and not isinstance(value, ast.Constant):
            return (
                f"api_version is given as {ast.unparse(value)!r}; declare it as a literal "
                f"(api_version={SERVE_BACKEND_API_VERSION}) so a later host can tell which "
                "contract the plugin was written for"
            )
    return None


def _listening(pid: int) -> set[tuple[str, int]]:
    import psutil

    try:
        conns = psutil.Process(pid).net_connections(kind="inet")
    except psutil.Error:
        return set()
    return {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}


def _children(pid: int) -> set[int]:
    import psutil

    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def _check_help(backend: ServeBackend, name: str, timeout: float) -> float:
    """Run ``run(--help)`` in a thread, watching for sockets and processes."""
    pid = os.getpid()
    sockets_before, children_before = _listening(pid), _children(pid)
    outcome: dict[str, BaseException | None] = {}

    def call() -> None:
        try:
            backend.run(ServeRequest(argv=("--help",), model_path=None))
            outcome["error"] = None
        except SystemExit as exc:
            outcome["error"] = None if exc.code in (0, None) else exc
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    started = time.perf_counter()
    thread = threading.Thread(target=call, name=f"help-{name}", daemon=True)
    thread.start()
    opened: set[tuple[str, int]] = set()
    spawned: set[int] = set()
    while thread.is_alive() and time.perf_counter() - started < timeout:
        opened |= _listening(pid) - sockets_before
        spawned |= _children(pid) - children_before
        thread.join(0.01)
    elapsed = time.perf_counter() - started
    opened |= _listening(pid) - sockets_before
    spawned |= _children(pid) - children_before
    if thread.is_alive():
        raise ContractViolation(
            f"Serve backend {name!r}: run(['--help']) did not return within {timeout:g} s; "
            "print the help and return without launching a server"
        )
    if opened:
        raise ContractViolation(
            f"Serve backend {name!r}: run(['--help']) opened listening sockets "
            f"{sorted(opened)}; --help must not launch a server"
        )
    if spawned:
        from sglang_backends.processes import kill_processes

        kill_processes(spawned)
        raise ContractViolation(
            f"Serve backend {name!r}: run(['--help']) started processes {sorted(spawned)}; "
            "--help must not launch a server"
        )
    error = outcome.get("error")
    if error is not None:
        raise ContractViolation(
            f"Serve backend {name!r}: run(['--help']) raised {type(error).__name__}: {error}"
        ) from error
    return elapsed


def _check_detector(
    backend: ServeBackend, name: str, requests: Iterable[tuple[str, ServeRequest]], timeout: float
) -> dict[str, str]:
    detector = backend.detect
    if detector is None:
        return {}
    results: dict[str, str] = {}
    for label, request in requests:
        box: dict[str, object] = {}

        def call(request: ServeRequest = request, box: dict[str, object] = box) -> None:
            try:
                box["value"] = detector(request)
            except BaseException as exc:  # noqa: BLE001 - reported below
                box["error"] = exc

        thread = threading.Thread(target=call, name=f"detect-{name}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise ContractViolation(
                f"Serve backend {name!r}: detect() did not return within {timeout:g} s for "
                f"a request with {label}; detectors must be cheap and return UNKNOWN when unsure"
            )
        if "error" in box:
            error = box["error"]
            raise ContractViolation(
                f"Serve backend {name!r}: detect() raised {type(error).__name__} for a request "
                f"with {label}: {error}; detectors must return UNKNOWN instead of raising"
            ) from error  # type: ignore[misc]
        detection = coerce_detection(box.get("value"))
        if detection is None:
            raise ContractViolation(
                f"Serve backend {name!r}: detect() returned {type(box.get('value')).__name__} "
                f"for a request with {label}; expected a ServeBackendDetection"
            )
        results[label] = detection.value
    return results


def assert_backend_contract(
    factory_or_name: Callable[[], object] | str,
    *,
    registry: object | None = None,
    requests: Iterable[tuple[str, ServeRequest]] | None = None,
    timeout: float = 10.0,
) -> ContractReport:
    """Check a backend against the serve-backend contract; raise on the first breach.

    :param factory_or_name: the plugin's zero-argument factory, or the name of
        an installed backend (loaded through *registry*, or a new
        :class:`~sglang_backends.ServeBackendRegistry` with the built-ins).
    :param requests: ``(label, request)`` pairs for the detector; by default
        :func:`awkward_requests` (no model path, a local directory, a hub id,
        garbage, a very long string, ...).
    :param timeout: seconds ``run(--help)`` and each ``detect()`` may take.
    :raises ContractViolation: an ``AssertionError`` explaining the breach.
    :returns: what was checked.
    """
    if isinstance(factory_or_name, str):
        name = factory_or_name
        if registry is None:
            from sglang_backends.host import default_builtins
            from sglang_backends.registry import ServeBackendRegistry

            registry = ServeBackendRegistry(default_builtins())
        try:
            backend = registry.get(name).backend  # type: ignore[attr-defined]
        except Exception as exc:
            raise ContractViolation(str(exc)) from exc
        factory = _installed_factory(registry, name)
    else:
        factory = factory_or_name
        name = getattr(factory, "__qualname__", repr(factory))
        if not callable(factory):
            raise ContractViolation(f"{name!r} is not callable; a factory takes no arguments")
        try:
            produced = factory()
        except Exception as exc:
            raise ContractViolation(f"Factory {name!r} raised {type(exc).__name__}: {exc}") from exc
        coerced = coerce_backend(produced)
        if coerced is None:
            raise ContractViolation(
                f"Factory {name!r} returned {type(produced).__name__}; expected ServeBackend"
            )
        backend = coerced
        if backend.api_version != SERVE_BACKEND_API_VERSION:
            raise ContractViolation(
                f"Factory {name!r} declares API version {backend.api_version!r}; "
                f"this release requires version {SERVE_BACKEND_API_VERSION}"
            )
    if factory is not None:
        problem = _literal_api_version(factory)
        if problem:
            raise ContractViolation(f"Serve backend {name!r}: {problem}")
    if not callable(backend.run):
        raise ContractViolation(f"Serve backend {name!r}: run is not callable")
    if backend.detect is not None and not callable(backend.detect):
        raise ContractViolation(f"Serve backend {name!r}: detect is neither None nor callable")
    if not isinstance(backend.requires_model_path, bool):
        raise ContractViolation(f"Serve backend {name!r}: requires_model_path must be a bool")

    help_seconds = _check_help(backend, name, timeout)
    with tempfile.TemporaryDirectory(prefix="sglang-backends-contract-") as directory:
        spread = (
            list(requests) if requests is not None else list(awkward_requests(directory).items())
        )
        detections = _check_detector(backend, name, spread, timeout)
    return ContractReport(backend=backend, help_seconds=help_seconds, detections=detections)


def _installed_factory(registry: object, name: str) -> Callable[..., object] | None:
    """The factory object behind installed backend *name*, if it is a plugin."""
    for record in getattr(registry, "plugins", ()):
        if record.plugin.name == name:
            try:
                return record.plugin.entry_point.load()
            except Exception:  # noqa: BLE001 - already loaded by the registry
                return None
    return None
