"""Driver selection by configuration, the OpenStack way (oslo.config).

oslo.config reads the ``[serve_backends]`` group and validates its typed options; this adds a
pipe read once, no FIFO in a directory hanging a command, and warnings about misspelt names
and options set twice in a file.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from oslo_config import cfg, types

import sglang_backends
from sglang_backends._core.settings import (
    ENVIRONMENT_PREFIX,
    MAX_TIMEOUT,
    MIN_TIMEOUT,
    STOP_TIMEOUT_ENV,
    Settings,
    environment_variables,
    seconds,
)
from sglang_backends.errors import (
    ConfigurationError,
    DisabledBackendError,
    UnknownBackendError,
    did_you_mean,
    refuse_string,
    set_in_configuration,
)

if TYPE_CHECKING:
    from sglang_backends.contract import RegisteredServeBackend, ServeBackend, ServeRequest
    from sglang_backends.registry import ServeBackendRegistry

__all__ = [
    "Settings",
    "list_opts",
    "load_settings",
    "read_settings",
    "register_opts",
    "registry_from_conf",
    "select_backend",
    "settings_from_conf",
]

LOG = logging.getLogger(__name__)

#: The configuration group every option lives in.
_GROUP = "serve_backends"
#: The options naming a source, each followed by its path in *args*.
_SOURCE_FLAGS = ("--config-file", "--config-dir")


class _Seconds(types.Float):
    """oslo.config's Float (its bounds shown in generated samples), checked by the one rule
    every timeout follows (:func:`~sglang_backends._core.settings.seconds`), NaN and no
    value refused.
    """

    def __init__(self, least: float) -> None:
        super().__init__(min=least, max=MAX_TIMEOUT)
        self.least = least

    def __call__(self, value: Any) -> float:
        return seconds(value, least=self.least)


class _Name(types.String):
    """oslo.config's String for a backend name, refused in words an operator can act on
    (oslo.config's quote a regular expression): never blank; in a list, with no comma or
    white space, which separate names there (``a,,b`` is read as ``a`` and ``,b``).
    """

    def __init__(self, *, listed: bool) -> None:
        super().__init__()
        self.listed = listed

    def __call__(self, value: Any) -> str:
        name = super().__call__(value)
        if not name.strip() or (self.listed and name.startswith(",")):
            raise ValueError("an empty backend name")
        if self.listed and any(char.isspace() or char == "," for char in name):
            raise ValueError(
                f"{name!r} is not one backend name: names are separated by commas, and a "
                "configuration file has no comments at the end of a line"
            )
        return name


_NAME = _Name(listed=True)
_POSITIVE = _Seconds(MIN_TIMEOUT)
#: The defaults without configuration, which the options share.
_DEFAULT = Settings()
#: The variable setting ``stop_timeout``, as oslo.config names it; :data:`STOP_TIMEOUT_ENV`
#: is its deprecated name, read in its place only while it is not set.
_STOP_TIMEOUT_VARIABLE = f"{ENVIRONMENT_PREFIX}STOP_TIMEOUT"

_OPTS = [
    cfg.Opt(
        "model_type",
        # Any name, as --model-type takes it: plugins decide.
        type=_Name(listed=False),
        default=_DEFAULT.model_type,
        help="The serve backend to use: 'auto' (automatic detection, falling back to 'llm'), a "
        "built-in ('llm', 'diffusion'), an installed plugin's name, or DIST:NAME to pick one "
        "distribution's plugin. The serve command's --model-type overrides it.",
    ),
    cfg.ListOpt(
        "enabled_backends",
        item_type=_NAME,
        default=[],
        help="Comma-separated plugin names that may be loaded; empty (the default) allows every "
        "installed plugin. A plugin left out is never imported.",
    ),
    cfg.ListOpt(
        "disabled_backends",
        item_type=_NAME,
        default=[],
        help="Comma-separated plugin names never loaded, even when listed in enabled_backends.",
    ),
    cfg.ListOpt(
        "preferred_backends",
        item_type=_NAME,
        default=[],
        help="Backends in order of preference: of several detectors' matches, the first wins.",
    ),
    cfg.Opt(
        "detect_timeout",
        type=_POSITIVE,
        default=_DEFAULT.detect_timeout,
        help="Seconds each backend's detector may take during automatic detection before it "
        "counts as inconclusive; generous, as a detector may query a model hub.",
    ),
    cfg.Opt(
        "load_timeout",
        type=_POSITIVE,
        default=_DEFAULT.load_timeout,
        help="Seconds each backend's import and factory call may take during automatic "
        "detection before it is skipped with a warning.",
    ),
    cfg.Opt(
        "stop_timeout",
        type=_Seconds(0),
        default=_DEFAULT.stop_timeout,
        help="Seconds the serve command gives its processes between SIGTERM and SIGKILL; 0 kills "
        f"at once. {STOP_TIMEOUT_ENV} is its deprecated variable, read (with a warning) when "
        f"{_STOP_TIMEOUT_VARIABLE} is not set.",
    ),
]

#: The environment variables, as oslo.config names them.
_VARIABLES = tuple(ENVIRONMENT_PREFIX + opt.dest.upper() for opt in _OPTS)
#: A file, as oslo.config's parser reads it.
_Sections = dict[str, dict[str, list[str]]]
#: ``(path, sections)`` per file read, in order; ``None`` for a pipe, which is read only once.
_Parsed = list[tuple[str, "_Sections | None"]]


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    """The options, for ``oslo-config-generator --namespace sglang_backends``."""
    help = "Which serve backend (driver) handles a request, and which plugins may be loaded."
    return [(cfg.OptGroup(_GROUP, title="Serve backends", help=help), list(_OPTS))]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register the ``[serve_backends]`` options on *conf*."""
    conf.register_opts(_OPTS, group=_GROUP)


def load_settings(
    *, config_files: Sequence[str] = (), config_dirs: Sequence[str] = (), args: Sequence[str] = ()
) -> Settings:
    """Read ``[serve_backends]`` from *args* (``--config-file``/``--config-dir`` pairs, in
    command-line order), *config_files*, *config_dirs* (a later one winning) and the environment.

    :raises ConfigurationError: a source is missing, unreadable or malformed, or a value is
        invalid: every such problem, a line each, naming the file (or variable) and option;
        or the sources are given in another shape (a string for a list of paths, say).
    """
    _check_pairs(args)
    refuse_string(config_files, "config_files must be a sequence of paths")
    refuse_string(config_dirs, "config_dirs must be a sequence of paths")
    settings, problems = read_settings([*args, *_args(config_files, config_dirs)])
    if problems:
        raise ConfigurationError("\n".join(problems))
    return settings


def read_settings(args: Sequence[str]) -> tuple[Settings, list[str]]:
    """:func:`load_settings` of *args*, and every problem instead of the first: a line each,
    the settings then reading a source in trouble as absent and a refused value as its default.

    :raises ConfigurationError: *args* are not ``--config-file PATH`` and ``--config-dir DIR``
        pairs: the caller's mistake, not a source's problem.
    """
    _check_pairs(args)
    problems: list[str] = []
    parsed = _read(args, problems)
    # Exactly the files checked.
    checked = _args([path for path, _ in parsed], ())
    conf = cfg.ConfigOpts()
    register_opts(conf)
    try:
        conf(args=checked, prog="sglang-backends", default_config_files=[], default_config_dirs=[])
    # A pipe's problem; or a file changed since it was checked.
    except UnicodeDecodeError as exc:
        pipes = " or ".join(path for path, sections in parsed if sections is None)
        return Settings(), [*problems, _not_text(pipes or "file", exc)]
    except (cfg.Error, OSError, ValueError) as exc:
        return Settings(), [*problems, f"Invalid configuration: {exc}"]
    for problem in _slips(parsed):
        LOG.warning("%s", problem)
    legacy = os.environ.get(STOP_TIMEOUT_ENV)
    if legacy is not None and _STOP_TIMEOUT_VARIABLE in os.environ:
        LOG.warning("%s is ignored: %s is set", STOP_TIMEOUT_ENV, _STOP_TIMEOUT_VARIABLE)
    elif legacy is not None:
        LOG.warning("%s is deprecated; set %s instead", STOP_TIMEOUT_ENV, _STOP_TIMEOUT_VARIABLE)
        try:
            conf.set_override("stop_timeout", legacy, _GROUP)
        except ValueError as exc:
            where = f"environment variable {STOP_TIMEOUT_ENV}"
            problems.append(_invalid("stop_timeout", legacy, where, exc))
    return _settings(conf, parsed, problems), problems


def settings_from_conf(conf: cfg.ConfigOpts) -> Settings:
    """The ``[serve_backends]`` values of a called *conf* (see :func:`register_opts`).

    :raises ConfigurationError: a value is invalid: every such value, a line each, naming the
        option and where it was set; or *conf* lacks the options, or was never called.
    """
    # oslo.config's own error would name an option, not the step left out.
    if _GROUP not in conf:
        raise ConfigurationError(f"conf has no [{_GROUP}] options: register_opts(conf) first")
    if "config_file" not in conf:
        raise ConfigurationError("conf has read no configuration: call it, conf(args), first")
    problems: list[str] = []
    # The files before the directories: oslo.config keeps no order.
    parsed = _read(_args(conf.config_file, conf.config_dirs), problems)
    settings = _settings(conf, parsed, problems)
    if problems:
        raise ConfigurationError("\n".join(problems))
    return settings


def _check_pairs(args: Sequence[str]) -> None:
    """Refuse *args* that are not ``--config-file PATH`` and ``--config-dir DIR`` pairs."""
    if isinstance(args, str) or len(args) % 2 or any(f not in _SOURCE_FLAGS for f in args[::2]):
        raise ConfigurationError(
            f"args must be --config-file PATH and --config-dir DIR pairs, got {args!r}"
        )


def _args(files: Sequence[str], dirs: Sequence[str]) -> list[str]:
    """``--config-file`` for each of *files*, then ``--config-dir`` for each of *dirs*."""
    args: list[str] = []
    for path in files:
        args += ["--config-file", path]
    for path in dirs:
        args += ["--config-dir", path]
    return args


def _settings(conf: cfg.ConfigOpts, parsed: _Parsed, problems: list[str]) -> Settings:
    """:func:`settings_from_conf`, knowing the files *conf* read, in its order; a value its
    type refuses is added to *problems* and read as its default.
    """
    values = {opt.dest: opt.default for opt in _OPTS}
    located: list[tuple[str, str]] = []
    for name in values:
        try:
            values[name] = conf[_GROUP][name]
        # A value its type refuses, a $substitution naming nothing or referring back to it.
        except (cfg.Error, RecursionError) as exc:
            problems.append(_refused(name, exc, parsed))
        else:
            if where := _where(conf.get_location(name, _GROUP), name, parsed):
                located.append((name, where))
    variables = [name for name in _VARIABLES if name in os.environ]
    if STOP_TIMEOUT_ENV in os.environ and _STOP_TIMEOUT_VARIABLE not in variables:
        # The deprecated variable, read in its place.
        variables.append(STOP_TIMEOUT_ENV)
    sources = [path for path, _ in parsed] + [f"environment variable {v}" for v in variables]
    return Settings(
        model_type=values["model_type"],
        enabled=tuple(values["enabled_backends"]) or None,
        disabled=tuple(values["disabled_backends"]),
        detect_timeout=values["detect_timeout"],
        load_timeout=values["load_timeout"],
        stop_timeout=values["stop_timeout"],
        preferred=tuple(values["preferred_backends"]),
        source=", ".join(sources) or "defaults",
        located=tuple(located),
    )


def _where(location: cfg.LocationInfo | None, name: str, parsed: _Parsed) -> str | None:
    """Where option *name* was set: a file, ``environment variable NAME``, or ``None`` for a
    default. oslo.config names, for a file, the last one holding the group (or none when the
    group is spelt otherwise), whichever set the option: the file is looked up in *parsed*.
    """
    if location is None or location.location is cfg.Locations.opt_default:
        return None
    kind = location.location
    if kind is cfg.Locations.set_override and STOP_TIMEOUT_ENV in os.environ:
        # read_settings sets the deprecated variable's value as an override.
        return f"environment variable {STOP_TIMEOUT_ENV}"
    # The file or variable that set it, which _set_by finds.
    if kind in (cfg.Locations.user, cfg.Locations.environment) and (
        where := _set_by(name, parsed)[1]
    ):
        return where
    if location.detail:
        return str(location.detail)
    # A service's own doing, which oslo.config locates nowhere: say which call.
    if kind is cfg.Locations.command_line:
        return "the service's command line"
    return f"the service's {kind.name}()"


def _invalid(name: str, text: str, where: str, cause: object) -> str:
    shown = f" {text!r}" if text else ""
    return f"Invalid value{shown} for option [{_GROUP}] {name} in {where}: {cause}"


def _refused(name: str, exc: Exception, parsed: _Parsed) -> str:
    """The error for option *name*, refused with *exc*, and where it was set."""
    # oslo.config raises its source error while handling the type's ValueError: the cause.
    cause: object = exc.__context__ if isinstance(exc.__context__, ValueError) else exc
    # oslo.config substitutes until the stack runs out.
    if isinstance(exc, RecursionError):
        cause = "its $ substitutions refer back to it; write $$ for a literal $"
    value, where = _set_by(name, parsed)
    # In "configuration" when no file or variable set it: a service's override, say.
    return _invalid(name, value, where or "configuration", cause)


def _set_by(name: str, parsed: _Parsed) -> tuple[str, str]:
    """The value option *name* was given and where, as oslo.config looks: its environment
    variable, else the last file of *parsed* (or a pipe, which may have) setting it;
    ``("", "")`` when none does."""
    variable = ENVIRONMENT_PREFIX + name.upper()
    found = [("", "")]
    for path, sections in parsed:
        # A pipe, which may have set it.
        if sections is None:
            found.append(("", path))
        for section, options in (sections or {}).items():
            if section.lower() == _GROUP and options.get(name):
                found.append((options[name][-1], path))
    if variable in os.environ:
        found.append((os.environ[variable], f"environment variable {variable}"))
    return found[-1]


def _unreadable(what: str, path: str, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"Configuration {what} not found: {path}"
    return f"Configuration {what} {path} is not readable: {exc.strerror}"


def _read(args: Sequence[str], problems: list[str]) -> _Parsed:
    """Every file *args* name (``--config-file``/``--config-dir`` pairs), in oslo.config's
    order, by absolute path, parsed: only a regular file, or a pipe given as one; none skipped
    (its ``disabled_backends`` apply). A file or directory in trouble is left out, its
    problem added to *problems*."""
    parsed: _Parsed = []
    for flag, given in zip(args[::2], args[1::2], strict=True):
        as_file = flag == "--config-file"
        what = "file" if as_file else "directory"
        # oslo.config finds none: never the working directory.
        if not given:
            problems.append(f"Configuration {what} not found: ''")
            continue
        # An unreadable directory is an error, never an empty one.
        try:
            path = os.path.abspath(os.path.expanduser(given))
            names = [] if as_file else sorted(os.listdir(path))
        # No filename when the working directory is gone.
        except OSError as exc:
            problems.append(_unreadable(what, exc.filename or given, exc))
            continue
        # As oslo.config's glob finds them.
        names = [n for n in names if n.endswith(".conf") and n[0] != "."]
        found = [path] if as_file else [os.path.join(path, n) for n in names]
        refused = len(problems)
        read = [(name, _parse(name, problems, as_file=as_file)) for name in found]
        # Else oslo.config could not read it either.
        if len(problems) == refused:
            parsed += read
    return parsed


def _parse(path: str, problems: list[str], *, as_file: bool) -> _Sections | None:
    """The file at *path*, by oslo.config's parser; ``None`` for a pipe (oslo.config reads it).
    A file in trouble adds its problem to *problems*, what it gives then to be left out.
    """
    sections: _Sections = {}
    try:
        # Raises for a broken link in a directory, say.
        mode = os.stat(path).st_mode
        if stat.S_ISFIFO(mode) and as_file:
            return None
        if stat.S_ISDIR(mode) and as_file:
            problems.append(
                f"Configuration file {path} is a directory; pass directories with --config-dir"
            )
        elif not stat.S_ISREG(mode):
            problems.append(f"Configuration file {path} is not a regular file")
        else:
            cfg.ConfigParser(path, sections).parse()
    except OSError as exc:
        problems.append(_unreadable("file", path, exc))
    except cfg.ParseError as exc:
        problems.append(f"Cannot parse configuration file {path}: {exc}")
    except UnicodeDecodeError as exc:
        problems.append(_not_text(path, exc))
    return sections


def _not_text(path: str, exc: UnicodeDecodeError) -> str:
    """The line for a configuration file (or pipe) at *path* that is not UTF-8."""
    return (
        f"Cannot read configuration file {path}: it is not {exc.encoding} text "
        f"({exc.reason} at byte {exc.start})"
    )


def _slips(parsed: _Parsed) -> Iterator[str]:
    """A line for each group, option and ``OS_SERVE_BACKENDS__*`` variable nothing reads, with
    the closest known name, and for each option a section of a file sets more than once,
    with the value read (the last): oslo.config passes over both silently."""
    known = [opt.dest for opt in _OPTS]
    for path, sections in parsed:
        for section, options in (sections or {}).items():
            # oslo.config folds group names to lower case.
            if section.lower() == _GROUP:
                for option, values in options.items():
                    if option not in known:
                        yield (
                            f"Ignoring unknown option {option!r} in [{_GROUP}] of {path}"
                            f"{did_you_mean(option, known)} Known options: {', '.join(known)}."
                        )
                    elif len(values) > 1:
                        yield (
                            f"Option {option!r} is set {len(values)} times in [{section}] of "
                            f"{path}; the last, {values[-1]!r}, overrides the others"
                        )
            elif section == "DEFAULT":
                yield from (
                    f"Ignoring option {option!r} in [DEFAULT] of {path}"
                    f"{f' (it belongs in [{_GROUP}])' if option in known else ''}: "
                    f"sglang-backends reads only the [{_GROUP}] group."
                    for option in options
                )
            else:
                yield (
                    f"Ignoring unknown group [{section}] in {path}"
                    f"{did_you_mean(section, [_GROUP])} sglang-backends reads only [{_GROUP}]."
                )
    variables = sorted(_VARIABLES)
    yield from (
        f"Ignoring unknown environment variable {key}{did_you_mean(key, variables)} "
        f"Known variables: {', '.join(variables)}."
        for key in environment_variables()
        if key not in _VARIABLES
    )


def registry_from_conf(
    conf: cfg.ConfigOpts,
    builtins: Mapping[str, ServeBackend | Callable[[], ServeBackend]] | None = None,
) -> ServeBackendRegistry:
    """The registry a service's called ``ConfigOpts`` describes (see :func:`register_opts`)."""
    return sglang_backends.ServeBackendRegistry.from_settings(settings_from_conf(conf), builtins)


def select_backend(
    conf: cfg.ConfigOpts,
    request: ServeRequest,
    registry: ServeBackendRegistry | None = None,
) -> RegisteredServeBackend:
    """The configured backend for *request*, as an OpenStack service selects a driver:
    ``auto`` runs detection (in *registry*, by default built from *conf*), else by name.

    :raises UnknownBackendError, DisabledBackendError: as the registry's, saying which file
        set ``model_type``.
    """
    # The files read once.
    settings = settings_from_conf(conf)
    if registry is None:
        registry = sglang_backends.ServeBackendRegistry.from_settings(settings)
    if settings.model_type == "auto":
        return registry.auto_detect(request)
    try:
        return registry.get(settings.model_type)
    except (UnknownBackendError, DisabledBackendError) as exc:
        raise set_in_configuration(exc, settings.set_in("model_type"), flag=False) from None
