"""Driver selection by configuration, the OpenStack way (oslo.config).

The ``[serve_backends]`` group chooses the backend (``model_type``), which plugins may
load (``enabled_backends``, ``disabled_backends``) and how long detection and stopping may
take (``detect_timeout``, ``load_timeout``, ``stop_timeout``). Values come, highest first,
from the environment (``OS_SERVE_BACKENDS__MODEL_TYPE`` and so on), the configuration
files, then the defaults; each option's type validates them. Every function works on a
private :class:`~oslo_config.cfg.ConfigOpts` (never ``CONF``); bad configuration is a
one-line :class:`~sglang_backends.errors.ConfigurationError` naming where and the option.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from oslo_config import cfg, types

from sglang_backends.configfiles import Source, ordered, parse, read_sources
from sglang_backends.errors import ConfigurationError, did_you_mean
from sglang_backends.settings import (
    DEFAULT_DETECT_TIMEOUT,
    DEFAULT_LOAD_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    ENVIRONMENT_PREFIX,
    MAX_TIMEOUT,
    Settings,
)

if TYPE_CHECKING:
    from sglang_backends.contract import RegisteredServeBackend, ServeBackend, ServeRequest
    from sglang_backends.registry import ServeBackendRegistry

__all__ = [
    "GROUP",
    "OPTS",
    "list_opts",
    "load_settings",
    "register_opts",
    "registry_from_conf",
    "select_backend",
    "settings_from_conf",
]

LOG = logging.getLogger(__name__)

#: The configuration group every option lives in.
GROUP = "serve_backends"


def _new_group() -> cfg.OptGroup:
    """A fresh group: an ``OptGroup`` remembers the options registered in it."""
    return cfg.OptGroup(
        GROUP,
        title="Serve backends",
        help="Which serve backend (driver) handles a request, and which installed plugins "
        "may be loaded.",
    )


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
    """Seconds: oslo.config's Float with ``max`` = MAX_TIMEOUT, and a lower bound (0
    excluded unless *zero*) worded as the docs quote it: oslo.config's ``min`` is inclusive.
    """

    def __init__(self, *, zero: bool = False) -> None:
        super().__init__(max=MAX_TIMEOUT)
        self.zero = zero

    def __call__(self, value: Any) -> float:
        seconds = super().__call__(value)
        if seconds is None or not (seconds > 0 or (self.zero and seconds == 0)):  # NaN too
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
        help="The serve backend to use. 'auto' runs every enabled backend's detector on the "
        "request and picks the one that claims it, falling back to 'llm'; any other value "
        "names a backend: a built-in ('llm', 'diffusion') or an installed plugin's entry point "
        "name, or DIST:NAME to pick one distribution's plugin when several register the same "
        "name. The serve command's --model-type overrides it.",
    ),
    cfg.Opt(
        "enabled_backends",
        type=_Names(),
        default=[],
        help="Comma-separated plugin names that may be loaded; empty (the default) allows every "
        "installed plugin. Built-ins are always available. A plugin left out is never imported.",
    ),
    cfg.Opt(
        "disabled_backends",
        type=_Names(),
        default=[],
        help="Comma-separated plugin names that are never loaded, even when listed in "
        "enabled_backends. Use it to switch off a broken or unwanted plugin without "
        "uninstalling it.",
    ),
    cfg.Opt(
        "detect_timeout",
        type=_Seconds(),
        default=DEFAULT_DETECT_TIMEOUT,
        help="Seconds each backend's detector may take during automatic detection (model_type "
        "= auto) before it counts as inconclusive; a number greater than 0, at most "
        f"{MAX_TIMEOUT:g}. Detectors run concurrently. The default is generous because a "
        "detector may query a model hub (SGLang's diffusion detector asks the Hugging Face "
        "Hub); offline checks take milliseconds.",
    ),
    cfg.Opt(
        "load_timeout",
        type=_Seconds(),
        default=DEFAULT_LOAD_TIMEOUT,
        help="Seconds each backend's load (its import and factory call) may take during "
        "automatic detection (model_type = auto) before it is skipped with a warning; a number "
        f"greater than 0, at most {MAX_TIMEOUT:g}. A load still running after a few seconds is "
        "logged. The default is generous so a healthy but heavy plugin (a cold import of a "
        "torch-based runtime takes tens of seconds) is never given up on; it only ends a hung "
        "import.",
    ),
    cfg.Opt(
        "stop_timeout",
        type=_Seconds(zero=True),
        default=DEFAULT_STOP_TIMEOUT,
        help="Seconds the serve command gives its processes between SIGTERM and SIGKILL when it "
        "stops them: the backend after a stop signal, then every process the backend left "
        f"behind; 0 kills at once; at most {MAX_TIMEOUT:g}. The environment variable "
        "SGLANG_BACKENDS_STOP_TIMEOUT, when set, overrides it.",
    ),
]

_OPT_NAMES = tuple(opt.dest for opt in OPTS)
#: The options' environment variables (oslo.config's own source).
_VARIABLES = tuple(ENVIRONMENT_PREFIX + name.upper() for name in _OPT_NAMES)


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    """The options, for ``oslo-config-generator --namespace sglang_backends``."""
    return [(_new_group(), list(OPTS))]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register the ``[serve_backends]`` options on *conf*."""
    conf.register_opts(OPTS, group=_new_group())


def _files_read(conf: cfg.ConfigOpts) -> list[str]:
    """The configuration files a service's *conf* read, in reading order."""
    files, dirs = getattr(conf, "config_file", None), getattr(conf, "config_dir", None)
    return [path for path, _ in ordered(files or (), dirs or ())]


def _locator(conf: cfg.ConfigOpts, sources: Sequence[Source]) -> Callable[[str], str | None]:
    """Where an option was set, asked of *conf* when a message needs it (``None``: the
    default); a private copy among *sources* is named by its original.
    """
    originals = {source.copy: source.path for source in sources}

    def where(option: str) -> str | None:
        location = conf.get_location(option, GROUP)
        if location is None or location.location is cfg.Locations.opt_default:
            return None
        if location.location is cfg.Locations.environment:
            return f"environment variable {location.detail}"
        detail = str(location.detail or location.location.name)
        return originals.get(detail, detail)

    return where


def _invalid(name: str, cause: str, sources: Sequence[Source]) -> ConfigurationError:
    """A one-line error for option *name*, quoting its text and where it was set: found as
    oslo.config finds it (``get_location()`` converts a value, and fails on a bad one).
    """
    variable = ENVIRONMENT_PREFIX + name.upper()
    found = None
    for source in sources:
        for section, options in source.sections.items():
            if section.lower() == GROUP and options.get(name):
                found = options[name][-1], source.path
    if variable in os.environ:
        found = os.environ[variable], f"environment variable {variable}"
    if found is None:
        return ConfigurationError(f"Invalid value for option [{GROUP}] {name}: {cause}")
    return ConfigurationError(
        f"Invalid value {found[0]!r} for option [{GROUP}] {name} in {found[1]}: {cause}"
    )


def settings_from_conf(conf: cfg.ConfigOpts) -> Settings:
    """*conf*'s ``[serve_backends]`` values as :class:`Settings`; *conf* is any called
    ``ConfigOpts`` the options were registered on (:func:`register_opts`).

    :raises ConfigurationError: a value is invalid, naming the option and where it was set.
    """
    return _settings(conf, None)


def _settings(conf: cfg.ConfigOpts, sources: Sequence[Source] | None) -> Settings:
    """:func:`settings_from_conf`; *sources* are the files, if read here (a service's are
    read only to quote a value its types refused).
    """
    values: dict[str, Any] = {}
    for name in _OPT_NAMES:
        try:
            values[name] = conf[GROUP][name]
        except ValueError as exc:  # oslo's ConfigSourceValueError and kin
            if sources is None:
                sources = [Source(path, path, parse(path, path)) for path in _files_read(conf)]
            raise _invalid(name, str(exc).rpartition(" is not valid: ")[2], sources) from None
    files = [source.path for source in sources] if sources is not None else _files_read(conf)
    files += [f"environment variable {name}" for name in _VARIABLES if name in os.environ]
    return Settings(
        model_type=values["model_type"],
        enabled=tuple(values["enabled_backends"]) or None,
        disabled=tuple(values["disabled_backends"]),
        detect_timeout=values["detect_timeout"],
        load_timeout=values["load_timeout"],
        stop_timeout=values["stop_timeout"],
        source=", ".join(files) or "defaults",
        locate=_locator(conf, sources or ()),
    )


def load_settings(
    *,
    config_files: Sequence[str] = (),
    config_dirs: Sequence[str] = (),
) -> Settings:
    """Read ``[serve_backends]`` from files, directories and the environment.

    Names that nothing reads (a misspelt option, group or ``OS_SERVE_BACKENDS__*``
    variable) are logged as WARNINGs, one line each, with the closest known name. Each
    file is read once (a pipe or FIFO too). A file or directory that cannot be read is
    an error, never skipped: a ``disabled_backends`` not read must not let its plugins run.

    :param config_files: files read in order; later ones win.
    :param config_dirs: directories whose ``*.conf`` files are read after them.
    :returns: validated :class:`Settings`; ``enabled`` is ``None`` for an empty list.
    :raises ConfigurationError: a source is missing, unreadable or malformed, or a value
        is invalid; the message names the file and option.
    """
    with tempfile.TemporaryDirectory(prefix="sglang-backends-conf-") as private:
        sources = read_sources(config_files, config_dirs, private)
        conf = cfg.ConfigOpts()
        register_opts(conf)
        try:
            conf(
                args=[f"--config-file={source.copy}" for source in sources],
                project="sglang-backends",
                prog="sglang-backends",
                default_config_files=[],
                default_config_dirs=[],
            )
        except cfg.Error as exc:  # the copies were read and parsed above; not expected
            raise ConfigurationError(f"Invalid configuration: {exc}") from None
        for problem in _unknown(sources, os.environ):
            LOG.warning("%s", problem)
        return _settings(conf, sources)


def _unknown(sources: Sequence[Source], environ: Mapping[str, str]) -> list[str]:
    """Name every group, option and ``OS_SERVE_BACKENDS__*`` variable that nothing reads,
    one line each with the closest known name: oslo.config ignores them silently, and
    ``oslo-config-validator`` is a command, without the closest name or the environment.
    """
    known = list(_OPT_NAMES)
    problems: list[str] = []
    for source in sources:
        path = source.path
        for section, options in source.sections.items():
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
    for key in sorted(environ):
        # OS_SERVE_BACKEND, not the full prefix: OS_SERVE_BACKEND__X is a slip too.
        if key.startswith("OS_SERVE_BACKEND") and key not in _VARIABLES:
            problems.append(
                f"Ignoring unknown environment variable {key}"
                f"{did_you_mean(key, sorted(_VARIABLES))} Known variables: "
                f"{', '.join(sorted(_VARIABLES))}."
            )
    return problems


def registry_from_conf(
    conf: cfg.ConfigOpts,
    builtins: Mapping[str, ServeBackend | Callable[[], ServeBackend]] | None = None,
) -> ServeBackendRegistry:
    """The registry a service's ``ConfigOpts`` describes (options from :func:`register_opts`).

    :raises ConfigurationError: an option has an invalid value.
    """
    from sglang_backends.registry import ServeBackendRegistry

    return ServeBackendRegistry.from_settings(settings_from_conf(conf), builtins)


def select_backend(
    conf: cfg.ConfigOpts,
    request: ServeRequest,
    registry: ServeBackendRegistry | None = None,
) -> RegisteredServeBackend:
    """Select the configured backend for *request*, as an OpenStack service selects a driver:
    ``model_type = auto`` runs automatic detection, any other value is looked up by name.

    :param registry: reuse one; by default built from the same settings.
    :raises ConfigurationError: an option has an invalid value.
    :raises UnknownBackendError: ``model_type`` names no available backend.
    :raises AmbiguousDetectionError: ``auto`` and several detectors matched.
    """
    settings = settings_from_conf(conf)
    if registry is None:
        from sglang_backends.registry import ServeBackendRegistry

        registry = ServeBackendRegistry.from_settings(settings)
    if settings.model_type == "auto":
        return registry.auto_detect(request)
    return registry.get(settings.model_type)
