"""A conformance check plugin authors run against their backend.

What the host relies on: a literal, supported ``api_version``; ``run()``
honouring ``--help`` promptly with no socket or process; a detector that
answers awkward requests and never raises; and, where SGLang is installed,
SGLang's own registry accepting the backend and its answers.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import linecache
import os
import signal
import sys
import tempfile
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from sglang_backends.contract import (
    SERVE_BACKEND_API_VERSION,
    SGLANG_CONTRACT_MODULE,
    ServeBackend,
    ServeRequest,
    coerce_backend,
    coerce_detection,
)
from sglang_backends.errors import ServeBackendError

__all__ = [
    "ContractReport",
    "ContractViolation",
    "SGLangNotCheckedWarning",
    "assert_backend_contract",
    "assert_sglang_accepts",
    "assert_stops_cleanly",
    "awkward_requests",
    "installed_hosts",
]


class ContractViolation(ServeBackendError, AssertionError):
    """A backend breaks the serve-backend contract; the message says how (a pytest failure)."""


@dataclass
class ContractReport:
    """What :func:`assert_backend_contract` checked, for tests that want details."""

    backend: ServeBackend
    help_seconds: float
    detections: dict[str, str] = field(default_factory=dict)
    #: Whether SGLang's own registry loaded the backend and accepted its answers.
    sglang_checked: bool = False
    #: Why SGLang's acceptance was not checked (SGLang is not installed, ``sglang=False``).
    sglang_unchecked: str | None = None


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


_BUILDERS = ("ServeBackend", "portable_backend")


def _check_literal_api_version(factory: object, name: str) -> None:
    """Raise unless the factory's source declares ``api_version`` as a literal (or is unknown).

    A function is read from its module's source, so a lambda is found too,
    wherever it is written (in a dict of factories, say); a
    :func:`functools.partial` is checked where it is made (the module
    holding it) and through the function it wraps.
    """
    for node in _declarations(factory):
        value = _api_version_argument(node)
        if value is not None and not isinstance(value, ast.Constant):
            raise ContractViolation(
                f"Serve backend {name!r}: api_version is given as {ast.unparse(value)!r}; "
                f"declare it as a literal (api_version={SERVE_BACKEND_API_VERSION}) so a later "
                "host can tell which contract the plugin was written for"
            )


def _declarations(factory: object, depth: int = 0) -> Iterator[ast.Call]:
    """The calls building a backend in *factory*'s source: ``ServeBackend(...)`` and the like."""
    if depth > 8:
        return
    if isinstance(factory, functools.partial):
        for module in list(sys.modules.values()):
            names = _names_of(module, factory)
            tree = _parse(getattr(module, "__file__", None)) if names else None
            for node in ast.walk(tree) if tree else ():
                # Where a name holding it is assigned: ``factory = partial(...)``.
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id in names for t in node.targets
                ):
                    yield from (n for n in _calls(node.value) if _callee(n) == "partial")
        yield from _declarations(factory.func, depth + 1)
        return
    code = getattr(inspect.unwrap(factory), "__code__", None)  # type: ignore[arg-type]
    if code is None:
        return
    for node in ast.walk(_parse(code.co_filename) or ast.Module(body=[], type_ignores=[])):
        if _defines(node, code):
            yield from _calls(node)


def _names_of(module: object, value: object) -> set[str]:
    """The global names of *module* bound to *value*."""
    try:
        return {k for k, v in vars(module).items() if v is value}
    except TypeError:
        return set()


def _parse(filename: str | None) -> ast.AST | None:
    if not filename:
        return None
    try:
        return ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return None


def _calls(tree: ast.AST | None) -> Iterator[ast.Call]:
    return (n for n in ast.walk(tree) if isinstance(n, ast.Call)) if tree else iter(())


def _defines(node: ast.AST, code: types.CodeType) -> bool:
    """Whether *node* is the ``def`` or ``lambda`` that compiled to *code*."""
    if isinstance(node, ast.Lambda):
        return code.co_name == "<lambda>" and node.lineno == code.co_firstlineno
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        return code.co_firstlineno in (first, node.lineno)
    return False


def _callee(node: ast.Call) -> str | None:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _api_version_argument(node: ast.Call) -> ast.expr | None:
    """The ``api_version`` *node* passes to a backend builder, directly or through ``partial``."""
    args = node.args
    if _callee(node) == "partial":
        if not args or not isinstance(args[0], (ast.Name, ast.Attribute)):
            return None
        target = args[0]
        if (target.attr if isinstance(target, ast.Attribute) else target.id) not in _BUILDERS:
            return None
        args = args[1:]
    elif _callee(node) not in _BUILDERS:
        return None
    value = next((k.value for k in node.keywords if k.arg == "api_version"), None)
    return args[0] if value is None and args else value


def _footprint(pid: int) -> tuple[set[tuple[str, int]], set[int]]:
    """The listening sockets and the descendants of process *pid*; empty when psutil cannot tell."""
    import psutil

    try:
        process = psutil.Process(pid)
        conns = process.net_connections(kind="inet")
        children = {child.pid for child in process.children(recursive=True)}
    except psutil.Error:
        return set(), set()
    return {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}, children


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
    pid = os.getpid()
    sockets_before, children_before = _footprint(pid)
    opened: set[tuple[str, int]] = set()
    spawned: set[int] = set()

    def watch() -> None:
        sockets, children = _footprint(pid)
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
        from sglang_backends.processes import kill_trees

        kill_trees(*spawned)
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
    if isinstance(factory_or_name, str):
        name = factory_or_name
        if registry is None:
            from sglang_backends.registry import ServeBackendRegistry
            from sglang_backends.settings import Settings

            registry = ServeBackendRegistry.from_settings(Settings())
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
    if factory is not None:
        _check_literal_api_version(factory, name)
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
            unchecked = _NOT_INSTALLED
            warnings.warn(
                f"Serve backend {name!r}: SGLang's acceptance was not checked: {unchecked}",
                SGLangNotCheckedWarning,
                stacklevel=2,
            )
        if unchecked is None:
            assert_sglang_accepts(factory_or_name, requests=spread, timeout=timeout)
    return ContractReport(
        backend=backend,
        help_seconds=help_seconds,
        detections=detections,
        sglang_checked=unchecked is None,
        sglang_unchecked=unchecked,
    )


_NOT_INSTALLED = (
    f"SGLang is not installed ({SGLANG_CONTRACT_MODULE} is not importable), so whether "
    "'sglang serve' accepts the backend is unknown; install SGLang where the tests run, "
    "or pass sglang=False to say it is not wanted"
)


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
    """SGLang's contract module, ``None`` if absent; ContractViolation if *required* or broken."""
    try:
        return importlib.import_module(SGLANG_CONTRACT_MODULE)
    except Exception as exc:
        parents = ("sglang", "sglang.cli", SGLANG_CONTRACT_MODULE)
        if isinstance(exc, ModuleNotFoundError) and exc.name in parents:
            if not required:
                return None
            raise ContractViolation(
                f"Checking that SGLang accepts the backend needs SGLang's {SGLANG_CONTRACT_MODULE}"
                f" (SGLang 0.5.23 or later), which is not importable: {exc}"
            ) from exc
        detail = exc if isinstance(exc, ModuleNotFoundError) else f"{type(exc).__name__}: {exc}"
        raise ContractViolation(
            f"SGLang is installed but {SGLANG_CONTRACT_MODULE} failed to import: {detail}"
        ) from exc


# -- stopping under each host ------------------------------------------------------

#: This package's host and SGLang's, each run as a command: ``HOST --model-type NAME ARGS``.
HOSTS: dict[str, tuple[str, ...]] = {
    "sglang-backends serve": ("-m", "sglang_backends", "serve"),
    # SGLang's own dispatch (sglang/cli/serve.py), as its `sglang serve` calls it; the
    # `sglang` console script itself where it is installed beside this interpreter.
    "sglang serve": (
        "-c",
        "import sys; from sglang.cli.serve import serve; serve(None, sys.argv[1:])",
    ),
}


def installed_hosts() -> tuple[str, ...]:
    """The hosts that can serve a backend here: this package's, and SGLang's where installed.

    SGLang is looked for without importing it (its import takes seconds).
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        spec = None
    places = [] if spec is None else list(spec.submodule_search_locations or ())
    sglang = any(os.path.isfile(os.path.join(p, "cli", "serve.py")) for p in places)
    return ("sglang-backends serve", "sglang serve") if sglang else ("sglang-backends serve",)


def assert_stops_cleanly(
    name: str,
    argv: Sequence[str],
    *,
    ready: str | None = None,
    env: Mapping[str, str] | None = None,
    hosts: Iterable[str] | None = None,
    signum: int = signal.SIGINT,
    start_timeout: float = 60.0,
    stop_timeout: float = 15.0,
) -> dict[str, int]:
    """Serve backend *name* under each host in a subprocess, stop it as Ctrl+C does, check the end.

    Each host (by default :func:`installed_hosts`) runs ``--model-type NAME
    ARGV`` in a session of its own; once the output shows *ready* (or, without
    it, after a second), *signum* goes to its process group, as a terminal's
    Ctrl+C does. The backend must then end within *stop_timeout* seconds with
    status ``0`` or ``128 + signum`` (or by the signal itself), print no
    traceback and leave no process running. A host not installed is reported with
    :class:`SGLangNotCheckedWarning`.

    :param argv: the backend's arguments (a model path, a free port: ``--port 0``).
    :param env: the environment of the hosts; default ``os.environ``.
    :raises ContractViolation: the backend did not start, or did not stop cleanly.
    :returns: each host's exit status.
    """
    chosen = tuple(installed_hosts() if hosts is None else hosts)
    if hosts is None and "sglang serve" not in chosen:
        warnings.warn(
            f"Serve backend {name!r}: stopping under 'sglang serve' was not checked: "
            "SGLang is not installed",
            SGLangNotCheckedWarning,
            stacklevel=2,
        )
    return {
        host: _stop_under(host, name, list(argv), ready, env, signum, start_timeout, stop_timeout)
        for host in chosen
    }


def _stop_under(
    host: str,
    name: str,
    argv: list[str],
    ready: str | None,
    env: Mapping[str, str] | None,
    signum: int,
    start_timeout: float,
    stop_timeout: float,
) -> int:
    import subprocess

    import psutil

    script = Path(sys.executable).with_name("sglang")  # SGLang's console script, if installed
    if host == "sglang serve" and script.is_file():
        command = [str(script), "serve", "--model-type", name, *argv]
    else:
        command = [sys.executable, *HOSTS[host], "--model-type", name, *argv]
    shown = f"{host} --model-type {name} {' '.join(argv)}".rstrip()
    lines: list[str] = []
    proc = subprocess.Popen(
        command,
        env=dict(os.environ if env is None else env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="backslashreplace",
        start_new_session=True,
    )
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    seen: set[psutil.Process] = set()

    def look() -> None:
        try:
            seen.update(psutil.Process(proc.pid).children(recursive=True))
        except psutil.Error:
            pass

    def tail() -> str:
        return " | ".join(line.rstrip() for line in lines[-5:]) or "no output"

    try:
        deadline = time.monotonic() + (start_timeout if ready else 1.0)
        while time.monotonic() < deadline and proc.poll() is None:
            look()
            if ready and any(ready in line for line in lines):
                break
            time.sleep(0.05)
        else:
            if proc.poll() is not None:
                raise ContractViolation(
                    f"Serve backend {name!r} under {host} ended before it was stopped, with "
                    f"status {proc.returncode} ({shown}): {tail()}"
                )
            if ready:
                raise ContractViolation(
                    f"Serve backend {name!r} under {host} did not print {ready!r} within "
                    f"{start_timeout:g} s ({shown}): {tail()}"
                )
        look()
        os.killpg(proc.pid, signum)
        try:
            status = proc.wait(stop_timeout)
        except subprocess.TimeoutExpired:
            raise ContractViolation(
                f"Serve backend {name!r} under {host} did not end within {stop_timeout:g} s "
                f"of {signal.Signals(signum).name}; stop serving on it (see "
                "sglang_backends.stop_quietly)"
            ) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(5)
    proc.stdout.close()
    left = [p for p in seen if _running(p)]
    for process in left:
        process.kill()
    output = "".join(lines)
    if "Traceback (most recent call last)" in output:
        problem = f"printed a traceback (status {status})"
    elif status not in (0, 128 + signum, -signum):
        problem = f"ended with status {status}"
    elif left:
        problem = f"left processes running: {sorted(p.pid for p in left)}"
    else:
        return status
    raise ContractViolation(
        f"Serve backend {name!r} under {host} {problem} on {signal.Signals(signum).name} "
        f"(expected status 0 or {128 + signum}, no traceback, no process left; "
        f"serve within sglang_backends.stop_quietly()): {tail()}"
    )


def _running(process: Any) -> bool:
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
