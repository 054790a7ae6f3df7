"""Turn ``sglang-backends serve`` arguments into a backend choice and a request.

SGLang's rules: ``--model-type`` is taken from anywhere, a first argument
that is not an option becomes ``--model-path MODEL``, and everything else
is the backend's, in order. ``serve``'s own options are taken only from the
leading run of arguments, so a backend's option of the same name reaches it.

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from sglang_backends.errors import ConfigurationError

if TYPE_CHECKING:
    from sglang_backends.contract import ServeRequest

__all__ = [
    "PROG",
    "HostOptions",
    "hoisted",
    "model_path_from",
    "normalize",
    "parse_host_options",
    "wants_help",
]

#: The command, as its usage, errors and the built-ins' help name it.
PROG = "sglang-backends serve"

_MODEL_PATH_OPTIONS = ("--model-path", "--model")
_HELP_OPTIONS = ("-h", "--help")
# A backend name is an entry point name, optionally qualified as DIST:NAME.
_INVALID_NAME = re.compile(r"[/\\\s]")
#: ``serve``'s own options taking a value; ``--debug`` is its one flag.
_HOST_VALUED = ("--model-type", "--config-file", "--config-dir")


class HostOptions(NamedTuple):
    """What ``serve`` takes for itself, and the arguments left for the backend.

    :param model_type: the ``--model-type`` value, ``None`` when not given.
    :param config_args: the ``--config-file PATH`` and ``--config-dir DIR`` pairs of
        the leading run, in order (oslo.config reads them in that order).
    :param debug: ``--debug`` was given in the leading run.
    :param argv: the remaining arguments, in their original order: the
        backend's, those named like ``serve``'s options after the leading
        run included.
    """

    model_type: str | None
    config_args: tuple[str, ...]
    debug: bool
    argv: tuple[str, ...]


def _check_model_type(value: str) -> str:
    if not value:
        raise ConfigurationError("--model-type needs a backend name, got an empty value")
    if value.startswith("-") or _INVALID_NAME.search(value):
        raise ConfigurationError(
            f"--model-type {value!r} is not a backend name "
            "(expected auto, NAME or DIST:NAME, without '/' or spaces)"
        )
    return value


def _arguments(argv: Sequence[str]) -> Iterator[tuple[str | None, str | None, Sequence[str]]]:
    """Each argument of *argv*: ``serve``'s option (else ``None``), its value, its arguments.

    A value comes as ``--opt V`` or ``--opt=V``; it is ``None`` for ``--debug``
    and for a valued option missing its value.
    """
    index = 0
    while index < len(argv):
        arg, end = argv[index], index + 1
        option = arg.split("=", 1)[0]
        value: str | None = None
        if option in _HOST_VALUED and arg != option:
            value = arg[len(option) + 1 :]
        elif option in _HOST_VALUED and end < len(argv) and not argv[end].startswith("-"):
            value, end = argv[end], end + 1
        own = option in _HOST_VALUED or arg == "--debug"
        yield (option if own else None), value, argv[index:end]
        index = end


def parse_host_options(argv: Sequence[str]) -> HostOptions:
    """Remove the host's options from *argv*.

    ``--model-type`` may be given anywhere, as ``--model-type NAME`` or
    ``--model-type=NAME``; when repeated, the last one wins, as with
    argparse. ``--config-file`` (repeatable), ``--config-dir`` (repeatable)
    and ``--debug`` are ``serve``'s only while they lead the command line:
    from the model or the first other argument on, they are the backend's
    and are left in place.

    :raises ConfigurationError: a dangling or empty option value, or a
        ``--model-type`` value that cannot be a backend name.
    """
    model_type: str | None = None
    config: list[str] = []
    debug = False
    rest: list[str] = []
    leading = True
    for option, value, arguments in _arguments(argv):
        if option == "--model-type" or (leading and option is not None):
            if option == "--debug":
                debug = True
            elif option == "--model-type" and value is not None:
                model_type = _check_model_type(value)
            elif not value:
                raise ConfigurationError(f"{option} expects a value")
            else:
                config += [option, value]
        else:
            leading = False
            rest.extend(arguments)
    return HostOptions(
        model_type=model_type,
        config_args=tuple(config),
        debug=debug,
        argv=tuple(rest),
    )


def hoisted(host: HostOptions) -> tuple[str, ...] | None:
    """The serve arguments with ``serve``'s own options moved before the model.

    ``serve MODEL --debug`` hands ``--debug`` to the backend (only a leading
    run of them is ``serve``'s). When the backend then refuses its
    arguments, this is the command the user probably meant. ``None`` when
    no option named like ``serve``'s follows the leading run.
    """
    moved: list[str] = []
    kept: list[str] = []
    for option, value, arguments in _arguments(host.argv):
        (moved if option == "--debug" or value is not None else kept).extend(arguments)
    if not moved:
        return None
    leading = [
        *host.config_args,
        *(["--debug"] if host.debug else []),
    ]
    model_type = [] if host.model_type is None else ["--model-type", host.model_type]
    return (*leading, *moved, *kept, *model_type)


def model_path_from(argv: Sequence[str]) -> str | None:
    """The first ``--model-path``/``--model`` value in *argv*, either form; else ``None``."""
    for index, arg in enumerate(argv):
        for option in _MODEL_PATH_OPTIONS:
            if arg == option:
                return argv[index + 1] if index + 1 < len(argv) else None
            if arg.startswith(option + "="):
                return arg[len(option) + 1 :]
    return None


def normalize(argv: Sequence[str]) -> ServeRequest:
    """The request a backend receives for the (host-option free) *argv*.

    A first argument not starting with ``-`` is the model: it becomes
    ``--model-path MODEL`` and the request is marked positional.
    """
    from sglang_backends.contract import ServeRequest  # not for the general help

    if argv and not argv[0].startswith("-"):
        forwarded = ("--model-path", argv[0], *argv[1:])
        return ServeRequest(argv=forwarded, model_path=argv[0], model_path_is_positional=True)
    forwarded = tuple(argv)
    return ServeRequest(argv=forwarded, model_path=model_path_from(forwarded))


def wants_help(argv: Sequence[str]) -> bool:
    """Whether ``-h`` or ``--help`` appears anywhere in *argv*."""
    return any(arg in _HELP_OPTIONS for arg in argv)
