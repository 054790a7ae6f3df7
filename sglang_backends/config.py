"""Driver selection by configuration, the OpenStack way (oslo.config).

The ``[serve_backends]`` group chooses the backend (``model_type``), which
plugins may load (``enabled_backends``, ``disabled_backends``) and how long a
detector may run (``detect_timeout``) and how long a backend may take to
load during automatic detection (``load_timeout``). Values come, highest first, from the
command line, the environment (``OS_SERVE_BACKENDS__MODEL_TYPE`` and so on,
oslo.config's environment source), the configuration files, then the
defaults.

Every function works on a private :class:`~oslo_config.cfg.ConfigOpts`
(never the global ``CONF``), so loading is re-entrant. :func:`load_settings`
reads each file once (a pipe too), refuses one it cannot read rather than
skip it, and hands oslo.config a private copy of what it read. Bad configuration
becomes a one-line :class:`~sglang_backends.errors.ConfigurationError`
naming the file (or variable) and the option. Importing this module imports
oslo.config and nothing heavier; ``serve`` imports it only when
configuration is in use.
"""

from __future__ import annotations

import glob
import logging
import os
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oslo_config import cfg, types

from sglang_backends.detection import DEFAULT_DETECT_TIMEOUT, DEFAULT_LOAD_TIMEOUT, MAX_TIMEOUT
from sglang_backends.errors import ConfigurationError, did_you_mean
from sglang_backends.settings import DEFAULT_STOP_TIMEOUT, ENVIRONMENT_PREFIX, Settings

if TYPE_CHECKING:
    from sglang_backends.contract import RegisteredServeBackend, ServeBackend, ServeRequest
    from sglang_backends.registry import ServeBackendRegistry

__all__ = [
    "GROUP",
    "OPTS",
    "describe_origin",
    "list_opts",
    "load_settings",
    "make_conf",
    "register_opts",
    "registry_from_conf",
    "select_backend",
    "settings_from_conf",
    "unknown_names",
]

LOG = logging.getLogger(__name__)

#: The configuration group every option lives in.
GROUP = "serve_backends"

_GROUP_HELP = (
    "Which serve backend (driver) handles a request, and which installed plugins may be loaded."
)


def _new_group() -> cfg.OptGroup:
    """A fresh group object: an ``OptGroup`` remembers the options registered in it."""
    return cfg.OptGroup(GROUP, title="Serve backends", help=_GROUP_HELP)


class _Name(types.String):
    """A backend name: oslo.config's String, refusing an empty one."""

    def __call__(self, value: Any) -> str:
        name = str(super().__call__(value)).strip()
        if not name:
            raise ValueError("give 'auto' or a backend name")
        return name


class _Names(types.List):
    """A list of backend names: oslo.config's List, refusing an empty name (``a,,b``)."""

    def __call__(self, value: Any) -> list[Any]:
        names = super().__call__(value)
        if "" in names:
            raise ValueError("the list holds an empty backend name")
        return names


class _Seconds(types.Float):
    """Seconds: oslo.config's Float with ``max`` = MAX_TIMEOUT, and a lower bound in words.

    oslo.config's ``min`` is inclusive and words a refusal "Should be greater
    than or equal to 0"; a detection timeout must be greater than 0 (a stop
    timeout may be 0), and the messages the docs quote say what to write.
    """

    def __init__(self, *, zero: bool = False) -> None:
        super().__init__(max=MAX_TIMEOUT)
        self.zero = zero

    def __call__(self, value: Any) -> float:
        seconds = super().__call__(value)
        if seconds is None or seconds < 0 or (seconds == 0 and not self.zero):
            raise ValueError(
                "must be a number of seconds, 0 or more"
                if self.zero
                else "must be a number of seconds greater than 0"
            )
        return float(seconds)


OPTS = [
    cfg.Opt(
        "model_type",
        type=_Name(),
        default="auto",
        help="The serve backend to use. 'auto' runs every enabled backend's "
        "detector on the request and picks the one that claims it, falling "
        "back to 'llm'; any other value names a backend: a built-in ('llm', "
        "'diffusion') or an installed plugin's entry point name, or "
        "DIST:NAME to pick one distribution's plugin when several register "
        "the same name. The serve command's --model-type overrides it.",
    ),
    cfg.Opt(
        "enabled_backends",
        type=_Names(),
        default=[],
        help="Comma-separated plugin names that may be loaded; empty (the "
        "default) allows every installed plugin. Built-ins are always "
        "available. A plugin left out is never imported.",
    ),
    cfg.Opt(
        "disabled_backends",
        type=_Names(),
        default=[],
        help="Comma-separated plugin names that are never loaded, even when "
        "listed in enabled_backends. Use it to switch off a broken or "
        "unwanted plugin without uninstalling it.",
    ),
    cfg.Opt(
        "detect_timeout",
        type=_Seconds(),
        default=DEFAULT_DETECT_TIMEOUT,
        help="Seconds each backend's detector may take during automatic "
        "detection (model_type = auto) before it counts as inconclusive; "
        f"a number greater than 0, at most {MAX_TIMEOUT:g}. Detectors run "
        "concurrently. The default is "
        "generous because a detector may query a model hub (SGLang's diffusion "
        "detector asks the Hugging Face Hub); offline checks take milliseconds.",
    ),
    cfg.Opt(
        "load_timeout",
        type=_Seconds(),
        default=DEFAULT_LOAD_TIMEOUT,
        help="Seconds each backend's load (its import and factory call) may "
        "take during automatic detection (model_type = auto) before it is "
        f"skipped with a warning; a number greater than 0, at most {MAX_TIMEOUT:g}. "
        "A load still running "
        "after a few seconds is logged. The default is generous so a healthy "
        "but heavy plugin (a cold import of a torch-based runtime takes tens of "
        "seconds) is never given up on; it only ends a hung import.",
    ),
    cfg.Opt(
        "stop_timeout",
        type=_Seconds(zero=True),
        default=DEFAULT_STOP_TIMEOUT,
        help="Seconds the serve command gives its processes between SIGTERM and "
        "SIGKILL when it stops them: the backend after a stop signal, then every "
        f"process the backend left behind; 0 kills at once; at most {MAX_TIMEOUT:g}. "
        "The environment "
        "variable SGLANG_BACKENDS_STOP_TIMEOUT, when set, overrides it.",
    ),
]

_OPT_NAMES = tuple(opt.dest for opt in OPTS)


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    """The options, for ``oslo-config-generator --namespace sglang_backends``."""
    return [(_new_group(), list(OPTS))]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register the ``[serve_backends]`` options on *conf*."""
    conf.register_opts(OPTS, group=_new_group())


def make_conf(
    *,
    config_files: Sequence[str] = (),
    config_dirs: Sequence[str] = (),
    opts: Sequence[cfg.Opt] = OPTS,
) -> cfg.ConfigOpts:
    """Return a new ``ConfigOpts`` with the options registered and the sources read.

    Files are read in order, then each directory's ``*.conf`` files in name
    order; later files win, the environment (:data:`os.environ`, through
    oslo.config's own environment source) beats every file. No default
    file is searched for.

    :raises ConfigurationError: a file or directory is missing, unreadable
        or not valid INI.
    """
    conf = cfg.ConfigOpts()
    conf.register_opts(list(opts), group=_new_group())
    args: list[str] = []
    for path in config_files:
        args.append(f"--config-file={os.fspath(path)}")
    for path in config_dirs:
        args.append(f"--config-dir={os.fspath(path)}")
    _check_readable(config_files, config_dirs)
    try:
        conf(
            args=args,
            project="sglang-backends",
            prog="sglang-backends",
            default_config_files=[],
            default_config_dirs=[],
        )
    except cfg.ConfigFileParseError as exc:
        raise ConfigurationError(
            f"Cannot parse configuration file {exc.config_file}: {exc.msg}"
        ) from None
    except cfg.ConfigFilesNotFoundError as exc:
        raise ConfigurationError(
            f"Configuration file not found: {', '.join(exc.config_files)}"
        ) from None
    except cfg.ConfigFilesPermissionDeniedError as exc:
        raise ConfigurationError(
            f"Configuration file not readable: {', '.join(exc.config_files)}"
        ) from None
    except cfg.ConfigDirNotFoundError as exc:
        raise ConfigurationError(
            f"Configuration directory not found: {os.path.abspath(exc.config_dir)}"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"Cannot read configuration: a file is not UTF-8 text ({exc.reason} at byte "
            f"{exc.start}) in {', '.join(_files_named(config_files, config_dirs))}"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"Cannot read configuration file {exc.filename}: {exc.strerror}"
        ) from None
    except cfg.Error as exc:
        raise ConfigurationError(f"Invalid configuration: {exc}") from None
    return conf


def _files_named(config_files: Sequence[str], config_dirs: Sequence[str]) -> list[str]:
    """The files the arguments designate, in reading order."""
    files = [os.path.abspath(path) for path in config_files]
    for directory in config_dirs:
        files += sorted(glob.glob(os.path.join(os.path.abspath(directory), "*.conf")))
    return files


def _check_readable(config_files: Sequence[str], config_dirs: Sequence[str]) -> None:
    """Reject what oslo.config would report obscurely: a directory given as a file."""
    for path in config_files:
        if os.path.isdir(path):
            raise ConfigurationError(
                f"Configuration file {os.fspath(path)} is a directory; "
                "pass directories with --config-dir"
            )
    for path in config_dirs:
        if os.path.exists(path) and not os.path.isdir(path):
            raise ConfigurationError(
                f"Configuration directory {os.fspath(path)} is not a directory; "
                "pass files with --config-file"
            )


#: Bytes a configuration file may hold; more is not configuration (``/dev/zero``, say).
_MAX_FILE_BYTES = 1 << 20

#: A parsed file: ``{section: {option: [values, in order]}}``, as oslo.config parses it.
_Sections = dict[str, dict[str, list[str]]]


@dataclass(frozen=True)
class _Source:
    """One configuration file as it was read, once.

    :param path: the file, as messages name it (absolute).
    :param copy: the private copy oslo.config reads in its place.
    :param sections: what it held, parsed once.
    """

    path: str
    copy: str
    sections: _Sections


def _fail_reading(path: str, exc: OSError, what: str = "file") -> ConfigurationError:
    if isinstance(exc, FileNotFoundError):
        return ConfigurationError(f"Configuration {what} not found: {path}")
    if isinstance(exc, IsADirectoryError):
        return ConfigurationError(
            f"Configuration file {path} is a directory; pass directories with --config-dir"
        )
    if isinstance(exc, NotADirectoryError) and what == "directory":
        return ConfigurationError(
            f"Configuration directory {path} is not a directory; pass files with --config-file"
        )
    return ConfigurationError(f"Configuration {what} {path} is not readable: {exc.strerror}")


def _dir_files(directory: str) -> list[str]:
    """The ``*.conf`` files of *directory* in name order, as oslo.config's ``--config-dir``.

    :raises ConfigurationError: it is missing, not a directory or not readable:
        a directory that was not read must not pass for an empty one.
    """
    path = os.path.abspath(directory)
    try:
        names = os.listdir(path)
    except OSError as exc:
        raise _fail_reading(path, exc, "directory") from None
    return [
        os.path.join(path, name)
        for name in sorted(names)
        if name.endswith(".conf") and not name.startswith(".")
    ]


def _read_file(path: str, *, in_directory: bool) -> bytes:
    """The bytes of configuration file *path*, read once.

    A file named on the command line may be a pipe (``--config-file <(...)``);
    one found in a directory must be a regular file, so that a FIFO dropped
    there cannot make every command wait for a writer.

    :raises ConfigurationError: missing, unreadable, not a regular file in a
        directory, or larger than 1 MiB.
    """
    try:
        if in_directory and not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigurationError(f"Configuration file {path} is not a regular file")
        with open(path, "rb") as stream:
            data = stream.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _fail_reading(path, exc) from None
    if len(data) > _MAX_FILE_BYTES:
        raise ConfigurationError(f"Configuration file {path} is larger than 1 MiB")
    return data


def _read_sources(
    config_files: Sequence[str], config_dirs: Sequence[str], private: str
) -> list[_Source]:
    """Read every configuration file once, in oslo.config's order; copy each into *private*.

    Files first, then each directory's ``*.conf`` files in name order. Each
    is read once and parsed from what was read; oslo.config reads the copy,
    so what it uses and what messages quote are the same bytes, and a pipe
    or FIFO is read only once.

    :raises ConfigurationError: naming the file or directory that could not
        be read, decoded or parsed.
    """
    named = [(os.path.abspath(os.fspath(path)), False) for path in config_files]
    for directory in config_dirs:
        named += [(path, True) for path in _dir_files(os.fspath(directory))]
    sources = []
    for index, (path, in_directory) in enumerate(named):
        data = _read_file(path, in_directory=in_directory)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigurationError(
                f"Cannot read configuration file {path}: it is not UTF-8 text "
                f"({exc.reason} at byte {exc.start})"
            ) from None
        copy = os.path.join(private, f"{index}.conf")
        with open(copy, "wb") as stream:
            stream.write(data)
        sections: _Sections = {}
        try:
            cfg.ConfigParser(copy, sections).parse()
        except cfg.ParseError as exc:
            raise ConfigurationError(
                f"Cannot parse configuration file {path}: at line {exc.lineno}, "
                f"{exc.msg}: {exc.line!r}"
            ) from None
        sources.append(_Source(path, copy, sections))
    return sources


def _where(conf: cfg.ConfigOpts, name: str, sources: Sequence[_Source] = ()) -> str:
    """Where option *name*'s value comes from: a file, a variable or the default.

    :param sources: the files as read, to name a copy by its original.
    """
    location = conf.get_location(name, GROUP)
    if location is None or location.location is cfg.Locations.opt_default:
        return "the default"
    if location.location is cfg.Locations.environment:
        return f"environment variable {location.detail}"
    originals = {source.copy: source.path for source in sources}
    if location.location is cfg.Locations.user:
        return originals.get(str(location.detail), str(location.detail))
    return str(location.detail or location.location.name)


def _raw(name: str, sources: Sequence[_Source]) -> tuple[str, str] | None:
    """Option *name*'s text and where it was set, from what was read; ``None`` if unset.

    The environment beats every file, and a later file an earlier one, as in oslo.config.
    """
    variable = ENVIRONMENT_PREFIX + name.upper()
    if variable in os.environ:
        return os.environ[variable], f"environment variable {variable}"
    for source in reversed(sources):
        for section, options in source.sections.items():
            if section.lower() == GROUP and options.get(name):
                return options[name][-1], source.path
    return None


def _config_option(conf: cfg.ConfigOpts, name: str) -> list[str]:
    """*conf*'s ``--config-file``/``--config-dir`` values; empty if it was never called."""
    try:
        value = conf[name]
    except cfg.NoSuchOptError:
        return []
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _invalid(
    conf: cfg.ConfigOpts, name: str, cause: object, sources: Sequence[_Source] | None = None
) -> ConfigurationError:
    """A one-line error for option *name*, quoting its text and saying where it was set.

    :param sources: the files as read; without them (a service's own
        ``ConfigOpts``) its files are read again as raw text.
    """
    if sources is not None:
        found = _raw(name, sources)
        if found is None:
            return ConfigurationError(f"Invalid value for option [{GROUP}] {name}: {cause}")
        return ConfigurationError(
            f"Invalid value {found[0]!r} for option [{GROUP}] {name} in {found[1]}: {cause}"
        )
    raw = make_conf(
        config_files=_config_option(conf, "config_file"),
        config_dirs=_config_option(conf, "config_dir"),
        opts=[cfg.StrOpt(opt) for opt in _OPT_NAMES],
    )
    where = _where(raw, name)
    if where == "the default":
        return ConfigurationError(f"Invalid value for option [{GROUP}] {name}: {cause}")
    return ConfigurationError(
        f"Invalid value {raw[GROUP][name]!r} for option [{GROUP}] {name} in {where}: {cause}"
    )


def _files_read(conf: cfg.ConfigOpts) -> list[str]:
    """The configuration files *conf* read, in reading order."""
    return _files_named(_config_option(conf, "config_file"), _config_option(conf, "config_dir"))


def _describe_sources(conf: cfg.ConfigOpts, sources: Sequence[_Source] | None = None) -> str:
    """The files and variables the values came from, for messages."""
    parts = _files_read(conf) if sources is None else [source.path for source in sources]
    for name in _OPT_NAMES:
        location = conf.get_location(name, GROUP)
        if location is not None and location.location is cfg.Locations.environment:
            parts.append(f"environment variable {location.detail}")
    return ", ".join(parts) or "defaults"


def settings_from_conf(conf: cfg.ConfigOpts) -> Settings:
    """Validate *conf*'s ``[serve_backends]`` values and return them as :class:`Settings`.

    *conf* is any ``ConfigOpts`` the options were registered on (see
    :func:`register_opts`), already called.

    :raises ConfigurationError: an option has an invalid value; the message
        names the option and the file or variable that set it.
    """
    return _settings(conf, None)


def _settings(conf: cfg.ConfigOpts, sources: Sequence[_Source] | None) -> Settings:
    """:func:`settings_from_conf`; *sources* are the files as read, when this module read them."""
    values: dict[str, Any] = {}
    for name in _OPT_NAMES:
        try:
            values[name] = conf[GROUP][name]
        except ValueError as exc:  # oslo's ConfigSourceValueError and kin
            cause = str(exc).rpartition(" is not valid: ")[2]
            raise _invalid(conf, name, cause, sources) from None
    origins = {
        name: where
        for name in _OPT_NAMES
        if (where := _where(conf, name, sources or ())) != "the default"
    }
    return Settings(
        model_type=values["model_type"],
        enabled=tuple(values["enabled_backends"]) or None,
        disabled=tuple(values["disabled_backends"]),
        detect_timeout=values["detect_timeout"],
        load_timeout=values["load_timeout"],
        stop_timeout=values["stop_timeout"],
        source=_describe_sources(conf, sources),
        origins=origins,
    )


def load_settings(
    *,
    config_files: Sequence[str] = (),
    config_dirs: Sequence[str] = (),
) -> Settings:
    """Read ``[serve_backends]`` from files, directories and the environment.

    Names that nothing reads (a misspelt option, group or
    ``OS_SERVE_BACKENDS__*`` variable) are logged as WARNINGs, one line
    each, naming the file or variable and the closest known name; see
    :func:`unknown_names`.

    Each file is read once (a pipe or FIFO given as ``--config-file`` too),
    and messages quote what was read. A file or directory that cannot be
    read is an error, never skipped: a ``disabled_backends`` that was not
    read must not let its plugins run.

    :param config_files: files read in order; later ones win.
    :param config_dirs: directories whose ``*.conf`` files are read after them.
    :returns: validated :class:`Settings`; ``enabled`` is ``None`` when the
        list is empty (every plugin allowed).
    :raises ConfigurationError: a file or directory is missing, unreadable
        or malformed, or a value is invalid; the message names the file and
        option.
    """
    with tempfile.TemporaryDirectory(prefix="sglang-backends-conf-") as private:
        sources = _read_sources(config_files, config_dirs, private)
        conf = make_conf(config_files=[source.copy for source in sources])
        parsed = [(source.path, source.sections) for source in sources]
        for problem in _unknown(parsed, os.environ):
            LOG.warning("%s", problem)
        return _settings(conf, sources)


def unknown_names(files: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """Name every group, option and variable that nothing reads, one line each.

    oslo.config ignores what it does not know, so ``model_typ = echo`` or a
    ``[serve_backend]`` group would silently leave the default in place.
    Files are read with oslo.config's own parser (:class:`cfg.ConfigParser`,
    as ``oslo-config-validator`` does); a group other than
    ``[serve_backends]`` (or an empty ``[DEFAULT]``), an option not in
    :data:`OPTS` and an ``OS_SERVE_BACKENDS__*`` variable naming no option
    are reported, with the closest known name.

    :param files: the configuration files read, in order.
    :param environ: the environment.
    :returns: one message per unknown name, in file then variable order.
    """
    parsed = []
    for path in files:
        sections: _Sections = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, ValueError, cfg.Error):  # already reported by make_conf
            continue
        parsed.append((path, sections))
    return _unknown(parsed, environ)


def _unknown(parsed: Sequence[tuple[str, _Sections]], environ: Mapping[str, str]) -> list[str]:
    """:func:`unknown_names` over files already parsed: ``(path, sections)`` in order."""
    known = list(_OPT_NAMES)
    problems: list[str] = []
    for path, sections in parsed:
        for section, options in sections.items():
            if section.lower() == GROUP:  # oslo.config folds group names to lower case
                for option in options:
                    if option not in known:
                        problems.append(
                            f"Ignoring unknown option {option!r} in [{GROUP}] of {path}"
                            f"{did_you_mean(option, known)} Known options: {', '.join(known)}."
                        )
            elif section == "DEFAULT":
                for option in options:
                    where = f" (it belongs in [{GROUP}])" if option in known else ""
                    problems.append(
                        f"Ignoring option {option!r} in [DEFAULT] of {path}{where}: "
                        f"sglang-backends reads only the [{GROUP}] group."
                    )
            else:
                problems.append(
                    f"Ignoring unknown group [{section}] in {path}"
                    f"{did_you_mean(section, [GROUP])} sglang-backends reads only [{GROUP}]."
                )
    variables = {ENVIRONMENT_PREFIX + name.upper() for name in known}
    for key in sorted(environ):
        # OS_SERVE_BACKEND, not the full prefix: OS_SERVE_BACKEND__X is a slip too.
        if key.startswith("OS_SERVE_BACKEND") and key not in variables:
            problems.append(
                f"Ignoring unknown environment variable {key}"
                f"{did_you_mean(key, sorted(variables))} Known variables: "
                f"{', '.join(sorted(variables))}."
            )
    return problems


def describe_origin(settings: Settings, option: str) -> str:
    """``[serve_backends] OPTION, set in WHERE``, for messages about one option's value."""
    where = settings.origins.get(option)
    if where is None:
        return f"[{GROUP}] {option} (the default)"
    return f"[{GROUP}] {option}, set in {where}"


# -- registries --------------------------------------------------------------


def registry_from_conf(
    conf: cfg.ConfigOpts,
    builtins: Mapping[str, ServeBackend | Callable[[], ServeBackend]] | None = None,
) -> ServeBackendRegistry:
    """Build a registry from a service's ``ConfigOpts``.

    The options must have been registered with :func:`register_opts`.

    Honours ``enabled_backends``, ``disabled_backends``, ``detect_timeout``
    and ``load_timeout``.

    :raises ConfigurationError: an option has an invalid value.
    """
    from sglang_backends.registry import ServeBackendRegistry

    return ServeBackendRegistry.from_settings(settings_from_conf(conf), builtins)


def select_backend(
    conf: cfg.ConfigOpts,
    request: ServeRequest,
    registry: ServeBackendRegistry | None = None,
) -> RegisteredServeBackend:
    """Select the configured backend for *request*, as an OpenStack service selects a driver.

    ``model_type = auto`` runs automatic detection; any other value is
    looked up by name.

    :param registry: reuse one; by default built with :func:`registry_from_conf`.
    :raises ConfigurationError: an option has an invalid value.
    :raises UnknownBackendError: ``model_type`` names no available backend.
    :raises AmbiguousDetectionError: ``auto`` and several detectors matched.
    """
    settings = settings_from_conf(conf)
    if registry is None:
        registry = registry_from_conf(conf)
    if settings.model_type == "auto":
        return registry.auto_detect(request)
    return registry.get(settings.model_type)
