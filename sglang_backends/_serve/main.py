"""``sglang-backends serve``: choose a backend as SGLang does, run it, supervise it.

Argument routing, exit statuses, the stop timeout and where the backend
runs (a supervised process on Linux, :mod:`sglang_backends._serve.supervise.supervisor`;
this process elsewhere) are documented for operators in ``user/operators.rst``
and ``reference/cli.rst``. A request goes: :func:`main` → :func:`_serve`
(settings; the general help) → :mod:`sglang_backends._serve.run` (choose,
check, launch, ``run()``). oslo.config is imported only for configuration; the
general help imports neither the registry nor the contract's dataclasses.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator, Sequence

from sglang_backends._core import console
from sglang_backends._core.inventory import model_type_problems, take_inventory
from sglang_backends._core.names import AUTO, PROG, wants_help
from sglang_backends._core.settings import Settings, configured
from sglang_backends._serve.argv import ServeArguments, parse_host_options
from sglang_backends._serve.help import metadata_help
from sglang_backends._sglang.installed import BUILTIN_NOTES
from sglang_backends._sglang.note import help_note
from sglang_backends.errors import ConfigurationError, ServeBackendError, UnknownBackendError

LOG = logging.getLogger(__name__)


@contextlib.contextmanager
def _logging_to_stderr(debug: bool) -> Iterator[None]:
    """Log this package to stderr (INFO, DEBUG with --debug); undone on exit, for embedders."""
    logger = logging.getLogger("sglang_backends")
    level = logger.level
    propagate = logger.propagate
    handler = console.terminal_log(logging.StreamHandler(sys.stderr))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _settings(host: ServeArguments) -> Settings:
    """Defaults, or configuration (importing oslo.config) when any is in use; a
    ``--model-type`` replaces configuration's, which then set none (:meth:`~Settings.set_in`).
    """
    if not configured(host.config_args):
        return Settings(model_type=host.model_type or AUTO)
    from sglang_backends.config import read_settings

    settings, problems = read_settings(host.config_args)
    if problems and host.model_type is None and settings.model_type != AUTO:
        # and the model_type it would refuse next (unknown, disabled): every problem at once
        # The built-ins by name: none is built.
        found = take_inventory(settings, dict.fromkeys(BUILTIN_NOTES))
        problems += model_type_problems(settings, found, serve=True)
    if problems:
        raise ConfigurationError("\n".join(problems))
    LOG.debug("Settings from %s: %r", settings.source, settings)
    if host.model_type is None:
        return settings
    located = tuple(pair for pair in settings.located or () if pair[0] != "model_type")
    return settings._replace(model_type=host.model_type, located=located)


def _sglang_note() -> int:
    """After a help, SGLang's closing note, once (only with SGLang)."""
    note = help_note()
    if note:
        console.show(f"\n{note}")
    return 0


def _serve(host: ServeArguments) -> int:
    """The general help (from metadata: a plugin claiming a built-in name fails every
    serve, and it warns of it), the backend's own help, or serving the request.
    """
    settings = _settings(host)
    # As in the request: normalizing moves no -h.
    helps = wants_help(host.argv)
    if helps and settings.model_type == AUTO:
        console.show(metadata_help(settings))
        return _sglang_note()
    # The registry and the contract: not for that help.
    from sglang_backends._serve import run

    if not helps:
        return run.serve(host, settings)
    status = run.backend_help(host, settings)
    # A backend that exited: SGLang adds no note either.
    return _sglang_note() if status is None else status


def guarded(step: Callable[[], int], *, debug: bool) -> int:
    """Run *step*; an expected failure becomes one error line and its exit status."""
    try:
        return step()
    except KeyboardInterrupt:
        # While choosing a backend: nothing was started yet.
        return 128 + signal.SIGINT
    except ServeBackendError as exc:
        if debug:
            console.say(console.printable_traceback(exc))
        # A configuration's problems, a line each; any other failure on one line.
        text = str(exc) if isinstance(exc, ConfigurationError) else " ".join(str(exc).split())
        console.error(PROG, text)
        usage = isinstance(exc, (UnknownBackendError, ConfigurationError))
        return console.EXIT_USAGE if usage else console.EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sglang-backends serve ARGS`` and return the exit status.

    :param argv: the arguments after ``serve``; default ``sys.argv[1:]``.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        host = parse_host_options(args)
    except ConfigurationError as exc:
        console.error(PROG, exc)
        return console.EXIT_USAGE
    with _logging_to_stderr(host.debug):
        return guarded(lambda: _serve(host), debug=host.debug)
