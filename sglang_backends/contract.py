"""The plugin contract: what a serve backend is and what it is handed.

This module is what plugins import, so it imports nothing heavy: no
stevedore, no :mod:`importlib.metadata`, no inference runtime. A plugin pays
only for the few standard-library modules below.

The shapes match SGLang's ``sglang.cli.serve_backends`` field for field, so a
backend written for SGLang and one written for this package are
interchangeable; :func:`coerce_backend` and :func:`coerce_detection` accept
SGLang's own objects by structure and value without importing SGLang.

Threads and time. With ``--model-type auto``, every candidate's detector
runs in a worker thread, concurrently with the other detectors, and is
abandoned (left running, its answer ignored) once ``detect_timeout``
seconds have passed. A plugin's import and factory may likewise run in a
worker thread, bounded by ``load_timeout``. A detector must therefore be
thread-safe, must not rely on running in the main thread (no
:func:`signal.signal`), and must not hold a lock or resource the server
will need after it is abandoned. A factory runs once per registry.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields

from sglang_backends._core.names import PROG, RESERVED_SERVE_BACKEND_NAMES, SERVE_BACKENDS_GROUP
from sglang_backends.errors import ConfigurationError, refuse_string

__all__ = [
    "RESERVED_SERVE_BACKEND_NAMES",
    "SERVE_BACKENDS_GROUP",
    "SERVE_BACKEND_API_VERSION",
    "RegisteredServeBackend",
    "ServeBackend",
    "ServeBackendDetection",
    "ServeRequest",
    "coerce_backend",
    "coerce_detection",
    "host_contract",
    "host_prog",
    "portable_backend",
    "stop_quietly",
]

#: Contract version a factory's :class:`ServeBackend` must declare.
SERVE_BACKEND_API_VERSION = 1
#: SGLang's contract module: ``sglang serve`` imports it before it loads a plugin.
SGLANG_CONTRACT_MODULE = "sglang.cli.serve_backends"
#: This package's ``serve`` module: imported in every process that runs a backend for it.
HOST_MODULE = "sglang_backends._serve.main"


class ServeBackendDetection(str, enum.Enum):
    """A detector's verdict on a request."""

    MATCH = "match"
    NO_MATCH = "no_match"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ServeRequest:
    """The normalized command line handed to a backend.

    :param argv: arguments after dispatch; a positional model has become
        ``--model-path MODEL`` and ``--model-type`` has been removed.
    :param model_path: the model path or hub id, ``None`` when absent.
    :param model_path_is_positional: ``True`` when the model was given as the
        first positional argument.
    """

    argv: tuple[str, ...]
    model_path: str | None
    model_path_is_positional: bool = False

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> ServeRequest:
        """The request ``serve`` hands a backend for *argv*, the arguments after ``serve``.

        ``--model-type`` is removed wherever it stands, as are ``serve``'s
        own options leading the line; a first argument that is not an
        option becomes ``--model-path MODEL``. A host program builds its
        requests here rather than writing the model path twice.

        :raises ValueError: a ``--model-type`` or a leading option of
            ``serve``'s without its value.
        :raises ConfigurationError: *argv* is a string, not a sequence of
            arguments, or holds what is no string (a ``TypeError`` too).
        """
        refuse_string(argv, "argv must be a sequence of arguments")
        # Read once: an iterator is arguments too.
        args = tuple(argv)
        strays = [arg for arg in args if not isinstance(arg, str)]
        if strays:
            raise ConfigurationError(f"argv must hold strings, got {type(strays[0]).__name__}")
        # serve's argv module, which is not on a plugin's import path.
        from sglang_backends._serve import argv as dispatch

        return cls(*dispatch.request_fields(dispatch.parse_host_options(args).argv))


#: The two callables' types, defined (and left out of ``__all__``) as upstream does.
ServeBackendRunner = Callable[[ServeRequest], None]
ServeBackendDetector = Callable[[ServeRequest], ServeBackendDetection]


@dataclass(frozen=True)
class ServeBackend:
    """What a plugin factory returns.

    :param api_version: the contract version the plugin was written for;
        declare it as a literal (``1``), not as this package's constant, so a
        later host can tell an old plugin from a current one.
    :param run: parses the backend's own arguments from ``request.argv``,
        honours ``-h``/``--help`` without launching, and otherwise blocks for
        the server's lifetime. The host cleans up child processes afterwards.
    :param detect: optional; a cheap, offline-safe check used by
        ``--model-type auto``. Without one the backend is only selectable by
        name. It should return ``UNKNOWN`` rather than raise. It may run in
        a worker thread, concurrently with other detectors, and may be
        abandoned after ``detect_timeout`` seconds: make it thread-safe. It
        is handed its own copy of the request: whatever it does to that copy
        reaches neither the other detectors nor the chosen backend's ``run``.
    :param requires_model_path: ``False`` for runtimes configured without a
        model path.
    """

    api_version: int
    run: ServeBackendRunner
    detect: ServeBackendDetector | None = None
    requires_model_path: bool = True


@dataclass(frozen=True)
class RegisteredServeBackend:
    """A loaded backend with the name it was selected by and its provider."""

    name: str
    backend: ServeBackend
    distribution: str | None = None


def coerce_backend(obj: object) -> ServeBackend | None:
    """Return *obj* as a :class:`ServeBackend`, or ``None`` if it is not one.

    Accepts this package's class and any object of a class named
    ``ServeBackend`` carrying the contract's four fields (SGLang's own
    dataclass), so plugins written for SGLang load without SGLang installed.
    """
    if isinstance(obj, ServeBackend):
        return obj
    names = [field.name for field in fields(ServeBackend)]
    if type(obj).__name__ != "ServeBackend" or not all(hasattr(obj, n) for n in names):
        return None
    return ServeBackend(**{name: getattr(obj, name) for name in names})


def coerce_detection(value: object) -> ServeBackendDetection | None:
    """Return a detector's result as a :class:`ServeBackendDetection`.

    Accepts this package's members and members of any enum named
    ``ServeBackendDetection`` with one of the contract's values (SGLang's);
    anything else, plain strings included, gives ``None``.
    """
    if not isinstance(value, enum.Enum) or type(value).__name__ != "ServeBackendDetection":
        return None
    try:
        return ServeBackendDetection(value.value)
    except ValueError:
        return None


# -- one plugin source for both hosts ---------------------------------------


def host_contract() -> tuple[type[ServeBackend], type[ServeBackendDetection]]:
    """The calling host's ``(ServeBackend, ServeBackendDetection)`` classes.

    A host imports its own contract module before it calls a factory or a
    detector. When SGLang's (:data:`SGLANG_CONTRACT_MODULE`) is among the
    imported modules, its classes are returned: ``sglang serve`` accepts
    only those (it checks ``isinstance`` and ``is MATCH``), and this
    package's host accepts them too (:func:`coerce_backend`,
    :func:`coerce_detection`). Otherwise this module's classes are returned.
    Nothing is imported: a plugin running under ``sglang-backends serve``
    never pays for SGLang. Call it when the host calls you (in the factory,
    in the detector), not at import time.
    """
    module = sys.modules.get(SGLANG_CONTRACT_MODULE)
    backend = getattr(module, "ServeBackend", None)
    detection = getattr(module, "ServeBackendDetection", None)
    if isinstance(backend, type) and isinstance(detection, type):
        return backend, detection
    return ServeBackend, ServeBackendDetection


def portable_backend(
    api_version: int,
    run: ServeBackendRunner,
    detect: ServeBackendDetector | None = None,
    requires_model_path: bool = True,
) -> ServeBackend:
    """Build a backend that whichever host called the factory accepts: THE way to return one.

    Takes :class:`ServeBackend`'s fields and returns the calling host's
    ``ServeBackend`` (see :func:`host_contract`). Under SGLang's host the
    detector is wrapped so that its answer, this package's
    :class:`ServeBackendDetection` (or SGLang's), reaches SGLang as SGLang's
    member of the same value; any other answer is passed on unchanged, for
    the host to report. Declare *api_version* as a literal (``1``).
    """
    backend_class, detection_class = host_contract()
    if detect is not None and detection_class is not ServeBackendDetection:
        detect = _answering_in(detection_class, detect)
    return backend_class(
        api_version=api_version, run=run, detect=detect, requires_model_path=requires_model_path
    )


def _answering_in(
    detection_class: type[ServeBackendDetection], detect: ServeBackendDetector
) -> ServeBackendDetector:
    """*detect*, its answers given as members of *detection_class* (matched by value)."""

    @functools.wraps(detect)
    def host_detect(request: ServeRequest) -> ServeBackendDetection:
        answer = detect(request)
        known = coerce_detection(answer)
        return answer if known is None else detection_class(known.value)

    return host_detect


def host_prog(model_type: str | None = None) -> str:
    """The command that runs the calling host's ``serve``, for a backend's ``prog=``.

    ``"sglang-backends serve"`` under this package's host (its serve module
    is imported wherever it runs a backend), ``"sglang serve"`` under
    SGLang's (:data:`SGLANG_CONTRACT_MODULE` imported), this package's
    otherwise; with *model_type*, followed by ``--model-type MODEL_TYPE``, so
    that a backend's usage line is a command line that works. Nothing is
    imported; call it in ``run()``.
    """
    prog = PROG
    if HOST_MODULE not in sys.modules and SGLANG_CONTRACT_MODULE in sys.modules:
        prog = "sglang serve"
    return prog if model_type is None else f"{prog} --model-type {model_type}"


@contextlib.contextmanager
def stop_quietly() -> Iterator[None]:
    """Serve within it: Ctrl+C, SIGTERM, SIGHUP and SIGQUIT then end ``run()`` as both hosts
    expect.

    ``sglang serve`` calls ``run()`` in its own process with Python's
    default signal handling: SIGINT raises ``KeyboardInterrupt``, which
    ends in a traceback and exit status 1, and SIGTERM, SIGHUP (a closed
    terminal or ssh session) and SIGQUIT kill the process without running
    any ``finally``. Within this context SIGINT leaves as
    ``SystemExit(130)`` and each of the others, when nobody handles it (as
    under ``sglang serve``), as ``SystemExit(128 + N)``: cleanup runs, and
    the process ends with the status a shell expects and no traceback.
    Under ``sglang-backends serve``, whose own handlers stay in place,
    ``serve`` then exits ``128 + N`` as it always does. Outside the main
    thread, only the ``KeyboardInterrupt`` is turned into ``SystemExit``.
    """
    # About a millisecond a plugin that never serves need not pay.
    import signal

    previous = {}
    for name in _STOPPING:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) == signal.SIG_DFL:
            # Not the main thread, which alone may set one.
            with contextlib.suppress(ValueError):
                previous[signum] = signal.signal(signum, _exit_on_signal)
    try:
        yield
    except KeyboardInterrupt:
        raise SystemExit(128 + signal.SIGINT) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


#: The stop signals ``serve`` takes besides SIGINT (where the platform has them), which
#: kill a process that leaves them to their default.
_STOPPING = ("SIGTERM", "SIGHUP", "SIGQUIT")


def _exit_on_signal(signum: int, frame: object) -> None:
    """A stop signal as ``SystemExit(128 + N)``, the shell's status for it."""
    raise SystemExit(128 + signum)
