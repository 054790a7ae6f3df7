"""Turn ``sglang-backends serve`` arguments into a backend choice and a request.

SGLang's rules: ``--model-type`` is taken from anywhere, a first argument
that is not an option becomes ``--model-path MODEL``, and everything else
is the backend's, in order. ``serve``'s own options are taken only from the
leading run of arguments, so a backend's option of the same name reaches it.
They are declared once, here (:data:`SERVE_OPTIONS`), for the general help
and the operator commands as well.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from sglang_backends._core.names import AUTO, FALLBACK_BACKEND, HELP_FLAGS
from sglang_backends.errors import ConfigurationError

_MODEL_PATH_OPTIONS = ("--model-path", "--model")


class ServeOption(NamedTuple):
    """One of ``serve``'s own options, declared once: this module parses it, the general
    help shows it, and the operator commands take ``--config-file``/``--config-dir`` as it says.

    :param flags: its option strings.
    :param metavar: its value's name in help; ``None`` for a flag, which takes no value.
    :param help: its line in the help.
    :param anywhere: ``serve``'s wherever it comes, not only in the leading run.
    """

    flags: tuple[str, ...]
    metavar: str | None
    help: str
    anywhere: bool = False


HELP = ServeOption(HELP_FLAGS, None, "show this help and exit", anywhere=True)
MODEL_TYPE = ServeOption(
    ("--model-type",),
    "NAME",
    f"the serve backend (default: {AUTO}: the one backend whose detector claims the model, "
    f"else {FALLBACK_BACKEND}); DIST:NAME picks one provider",
    anywhere=True,
)
CONFIG_FILE = ServeOption(
    ("--config-file",),
    "PATH",
    "read [serve_backends] options from this file; repeatable, later files win",
)
CONFIG_DIR = ServeOption(
    ("--config-dir",),
    "DIR",
    "read every .conf file in DIR, in name order; repeatable, files and directories are "
    "read in the order given, later ones win",
)
DEBUG = ServeOption(("--debug",), None, "log at DEBUG level and show tracebacks")

#: ``serve``'s own options, in the order its help lists them.
SERVE_OPTIONS = (HELP, MODEL_TYPE, CONFIG_FILE, CONFIG_DIR, DEBUG)
#: The option strings that name configuration, which the operator commands take too.
CONFIG_FLAGS = (*CONFIG_FILE.flags, *CONFIG_DIR.flags)
#: Each option string of those ``serve`` takes out of the command line: ``--help`` stays
#: in it, for the backend's help.
_TAKEN = {flag: option for option in SERVE_OPTIONS if option is not HELP for flag in option.flags}


class ServeArguments(NamedTuple):
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


def _arguments(
    argv: Sequence[str],
) -> Iterator[tuple[ServeOption | None, str | None, Sequence[str]]]:
    """Each argument of *argv*: ``serve``'s option (else ``None``), its value, its arguments.

    A value comes as ``--opt V`` or ``--opt=V``; it is ``None`` for a flag
    and for an option missing its value. ``--model-type`` takes the next
    argument whatever it is, as upstream does (``--model-type -x`` names
    ``-x``); the others take one that is not an option.
    """
    index = 0
    while index < len(argv):
        arg = argv[index]
        end = index + 1
        name = arg.split("=", 1)[0]
        option = _TAKEN.get(name)
        value: str | None = None
        if option is not None and option.metavar is not None:
            if arg != name:
                value = arg[len(name) + 1 :]
            elif end < len(argv) and (option is MODEL_TYPE or not argv[end].startswith("-")):
                value = argv[end]
                end += 1
        elif arg != name:
            # A flag given a value is not serve's: --debug=1.
            option = None
        yield option, value, argv[index:end]
        index = end


def parse_host_options(argv: Sequence[str]) -> ServeArguments:
    """Remove the host's options from *argv*.

    ``--model-type`` may be given anywhere, as ``--model-type NAME`` or
    ``--model-type=NAME``; when repeated, the last one wins, as with
    argparse, and only its value must not be empty, as upstream checks it
    (the registry knows the names). ``--config-file`` (repeatable),
    ``--config-dir`` (repeatable) and ``--debug`` are ``serve``'s only while
    they lead the command line: from the model or the first other argument
    on, they are the backend's and are left in place (see :data:`SERVE_OPTIONS`).

    :raises ConfigurationError: a dangling or empty option value.
    """
    model_type: str | None = None
    config: list[str] = []
    debug = False
    rest: list[str] = []
    leading = True
    for option, value, arguments in _arguments(argv):
        if option is None or not (leading or option.anywhere):
            leading = False
            rest.extend(arguments)
        elif option is DEBUG:
            debug = True
        elif option is MODEL_TYPE and value is not None:
            # Checked once it has won.
            model_type = value
        elif not value:
            raise ConfigurationError(f"{option.flags[0]} expects a value")
        else:
            config += [option.flags[0], value]
    # Any other name is the registry's to know, as upstream defers it.
    if model_type == "":
        raise ConfigurationError("--model-type needs a backend name, got an empty value")
    return ServeArguments(model_type, tuple(config), debug, tuple(rest))


def hoisted(host: ServeArguments) -> tuple[str, ...] | None:
    """The serve arguments with ``serve``'s own options moved before the model.

    ``serve MODEL --debug`` hands ``--debug`` to the backend (only a leading
    run of them is ``serve``'s). When the backend then refuses its
    arguments, this is the command the user probably meant. ``None`` when
    no option named like ``serve``'s follows the leading run.
    """
    moved: list[str] = []
    kept: list[str] = []
    for option, value, arguments in _arguments(host.argv):
        own = option is not None and (option.metavar is None or value is not None)
        (moved if own else kept).extend(arguments)
    if not moved:
        return None
    debug = ["--debug"] if host.debug else []
    model_type = [] if host.model_type is None else ["--model-type", host.model_type]
    return (*host.config_args, *debug, *moved, *kept, *model_type)


def model_path_from(argv: Sequence[str]) -> str | None:
    """The first ``--model-path``/``--model`` value in *argv*, either form; else ``None``."""
    for index, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        if name not in _MODEL_PATH_OPTIONS:
            continue
        if equals:
            return value
        return argv[index + 1] if index + 1 < len(argv) else None
    return None


def request_fields(argv: Sequence[str]) -> tuple[tuple[str, ...], str | None, bool]:
    """The fields of the :class:`~sglang_backends.contract.ServeRequest` a backend receives
    for the (host-option free) *argv*: its ``argv``, ``model_path`` and
    ``model_path_is_positional``.

    A first argument not starting with ``-`` is the model: it becomes
    ``--model-path MODEL`` and the request is marked positional.
    """
    if argv and not argv[0].startswith("-"):
        return ("--model-path", argv[0], *argv[1:]), argv[0], True
    return tuple(argv), model_path_from(argv), False
