"""``sglang-backends serve``: choose a backend as SGLang does, run it, clean up.

Exit status:

* ``0``: the backend's ``run()`` returned (or printed its help);
* ``1``: the backend failed to load, several providers or detectors
  claimed the request, the backend is disabled, or ``run()`` raised;
* ``2``: usage errors: a bad ``--model-type`` value, an unknown backend, a
  missing model path, invalid configuration;
* ``128 + N`` when stopped by signal ``N``: ``143`` for SIGTERM, ``130``
  for SIGINT;
* the code a backend passes to :class:`SystemExit` (argparse's ``2``, say).

After ``run()`` returns or raises, every descendant process gets SIGTERM,
then SIGKILL after ``$SGLANG_BACKENDS_STOP_TIMEOUT`` seconds (default 5).
On SIGTERM or SIGINT, ``run()`` is unwound by an exception in the main
thread; a backend still running twice that long later, or a second signal,
makes ``serve`` kill the descendants and exit at once.

Configuration (oslo.config, through :mod:`sglang_backends.config`) is
imported only when ``--config-file``/``--config-dir`` is given or an
``OS_SERVE_BACKENDS__*`` variable is set.
"""

from __future__ import annotations

import logging
import signal
import sys
import traceback
from collections.abc import Callable, Sequence

from sglang_backends import host as sglang_host
from sglang_backends.contract import RegisteredServeBackend, ServeRequest
from sglang_backends.dispatch import (
    AUTO,
    HostOptions,
    UsageError,
    normalize,
    parse_host_options,
    wants_help,
)
from sglang_backends.errors import (
    ConfigurationError,
    DisabledBackendError,
    ServeBackendError,
    UnknownBackendError,
)
from sglang_backends.registry import ServeBackendRegistry
from sglang_backends.settings import Settings, configuration_in_environment
from sglang_backends.usage import PROG, general_help, usage_line

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "main"]

LOG = logging.getLogger(__name__)

EXIT_FAILURE = 1
EXIT_USAGE = 2


class _Failure(Exception):
    """An expected failure: print its message and exit with *status*."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _configure_logging(debug: bool) -> Callable[[], None]:
    """Send this package's log records to stderr (INFO, or DEBUG with --debug).

    Returns a function restoring the logger as it was, for in-process callers.
    """
    logger = logging.getLogger("sglang_backends")
    saved = (logger.level, logger.propagate)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    logger.propagate = False

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]

    return restore


def _configure(host: HostOptions) -> tuple[Settings, ServeBackendRegistry]:
    """Settings and registry: defaults, or configuration when any is in use.

    oslo.config is imported only when a file, a directory or an
    ``OS_SERVE_BACKENDS__*`` variable asks for it.
    """
    if not (host.config_files or host.config_dirs or configuration_in_environment()):
        settings = Settings()
        return settings, ServeBackendRegistry(
            sglang_host.default_builtins(),
            enabled=settings.enabled,
            disabled=settings.disabled,
            detect_timeout=settings.detect_timeout,
        )
    from sglang_backends.config import build_registry, load_settings

    try:
        settings = load_settings(
            config_files=list(host.config_files), config_dirs=list(host.config_dirs)
        )
    except ConfigurationError as exc:
        raise _Failure(str(exc), EXIT_USAGE) from exc
    LOG.debug("Settings from %s: %r", settings.source, settings)
    return settings, build_registry(settings)


def _describe(registered: RegisteredServeBackend) -> str:
    source = f"from {registered.distribution}" if registered.distribution else "built-in"
    return f"{registered.name!r} ({source})"


def _exit_status(exc: SystemExit) -> int:
    """The status a :class:`SystemExit` asks for, printing a message code."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return EXIT_FAILURE


def _failed(registered: RegisteredServeBackend, exc: BaseException) -> _Failure:
    failure = _Failure(
        f"serve backend {_describe(registered)} failed: {exc or type(exc).__name__}", EXIT_FAILURE
    )
    failure.__cause__ = exc
    return failure


def _forward_help(registered: RegisteredServeBackend, request: ServeRequest) -> int | None:
    """Let the backend print its own help: no model path check, no cleanup.

    Returns ``None`` when ``run()`` returned, else the status its
    :class:`SystemExit` asked for.
    """
    try:
        registered.backend.run(request)
    except SystemExit as exc:
        return _exit_status(exc)
    except Exception as exc:
        raise _failed(registered, exc) from exc
    return None


def _print_help_note() -> None:
    """SGLang's closing note after a help, as ``sglang serve`` prints it; only with SGLang."""
    note = sglang_host.help_note()
    if note:
        print(f"\n{note}")


def _launch(registered: RegisteredServeBackend, request: ServeRequest) -> int:
    """Run the backend until it returns, raises or is stopped; then stop every descendant."""
    # psutil is needed only once something is launched, not for help or errors.
    from sglang_backends.processes import (
        StopSignals,
        become_subreaper,
        stop_timeout,
        terminate_descendants,
    )

    grace = stop_timeout()
    become_subreaper()
    guard = StopSignals(timeout=2 * grace, on_force=lambda: terminate_descendants(grace))
    status = 0
    failure: _Failure | None = None
    with guard:
        try:
            try:
                registered.backend.run(request)
            finally:
                # From here a first signal is only recorded; a second one, or
                # a first one caught in this very window, still ends in cleanup.
                guard.disarm()
        except KeyboardInterrupt:
            status = 128 + signal.SIGINT
        except SystemExit as exc:
            status = _exit_status(exc)
        except Exception as exc:  # noqa: BLE001 - any failure of run() is reported
            failure = _failed(registered, exc)
        guard.disarm()
        count = terminate_descendants(grace)
        if count:
            LOG.info("Stopped %d remaining process(es)", count)
    if guard.exit_status is not None:
        LOG.info("Serve backend %s stopped by %s", _describe(registered), guard.signal_name)
        return guard.exit_status
    if failure is not None:
        raise failure
    return status


def _select(
    registry: ServeBackendRegistry, model_type: str, request: ServeRequest
) -> RegisteredServeBackend:
    if model_type == AUTO:
        registered = registry.auto_detect(request)
        LOG.info("Selected serve backend %s by automatic detection", _describe(registered))
    else:
        registered = registry.get(model_type)
        LOG.info("Using serve backend %s", _describe(registered))
    return registered


def _serve(argv: Sequence[str]) -> int:
    host = parse_host_options(argv)
    restore_logging = _configure_logging(host.debug)
    try:
        return _dispatch(host)
    finally:
        restore_logging()


def _dispatch(host: HostOptions) -> int:
    settings, registry = _configure(host)
    model_type = host.model_type or settings.model_type or AUTO
    request = normalize(host.argv)
    LOG.debug("Backend request: %r", request)
    if wants_help(request.argv):
        if model_type == AUTO:
            sys.stdout.write(general_help(registry))
        else:
            status = _forward_help(registry.get(model_type), request)
            if status is not None:
                return status  # the backend exited: SGLang adds no note either
        _print_help_note()
        return 0

    # SGLang's general (hardware and hook) plugins apply to every backend.
    sglang_host.run_general_plugins()
    registered = _select(registry, model_type, request)
    if registered.backend.requires_model_path and request.model_path is None:
        raise _Failure(
            f"serve backend {_describe(registered)} needs a model. {usage_line()}", EXIT_USAGE
        )
    return _launch(registered, request)


def _status_for(exc: ServeBackendError) -> int:
    if isinstance(exc, DisabledBackendError):
        return EXIT_FAILURE
    if isinstance(exc, (UnknownBackendError, ConfigurationError)):
        return EXIT_USAGE
    return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sglang-backends serve ARGS`` and return the exit status.

    :param argv: the arguments after ``serve``; default ``sys.argv[1:]``.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        return _serve(args)
    except UsageError as exc:
        failure: Exception = exc
        status = EXIT_USAGE
    except _Failure as exc:
        failure, status = exc, exc.status
    except ServeBackendError as exc:
        failure, status = exc, _status_for(exc)
    except (ValueError, RuntimeError, TypeError) as exc:
        # What the registry raises outside its own hierarchy, SGLang-style
        # (an invalid setting, say); run()'s own errors were handled above.
        failure = exc
        status = EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILURE
    except KeyboardInterrupt:
        # Interrupted while choosing a backend: nothing was started yet.
        return 128 + signal.SIGINT
    if debug:
        traceback.print_exception(failure)
    print(f"{PROG}: error: {failure}", file=sys.stderr)
    return status
