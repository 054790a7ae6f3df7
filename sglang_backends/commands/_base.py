"""What every operator command shares: configuration options, error handling, safe output."""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
from collections.abc import Iterable, Sequence
from typing import Any

import stevedore
from cliff.command import Command
from cliff.display import DisplayCommandBase

from sglang_backends.discovery import (
    InstalledDistribution,
    PluginEntryPoint,
    discover,
    distributions,
)
from sglang_backends.errors import ConfigurationError, UnknownBackendError
from sglang_backends.host import INSTALL_COMMANDS, default_builtins, sglang_installed
from sglang_backends.selection import PluginStatus
from sglang_backends.settings import MAX_TIMEOUT, Settings, configured
from sglang_backends.survey import Inventory, take_inventory
from sglang_backends.usage import printable

__all__ = [
    "ENABLED",
    "SafeCommand",
    "SelectionOptions",
    "add_config_options",
    "builtin_row",
    "builtin_status",
    "option_span",
    "plugin_row",
    "positive_seconds",
    "requirements_cell",
]


_CONFIG_EPILOG = """\
configuration:
  Options are read from the [serve_backends] group of the files given with
  --config-file and --config-dir (before or after the command name), and from
  OS_SERVE_BACKENDS__<OPTION> environment variables (e.g.
  OS_SERVE_BACKENDS__ENABLED_BACKENDS=omni,vlm), which override the files.
  --enable/--disable override both. A misspelt option, group or variable is
  a warning. Exit status 2 means the configuration is invalid.
"""

#: Global options before the command name (as OpenStack clients take them), each
#: command's own after it; the command reads both.
_CONFIG_OPTIONS: dict[str, dict[str, Any]] = {
    "--config-file": {
        "metavar": "PATH",
        "help": "read [serve_backends] options from this file; repeatable, later files win",
    },
    "--config-dir": {
        "metavar": "DIR",
        "help": "read every .conf file in DIR, in name order; repeatable, files and "
        "directories are read in the order given, later ones win",
    },
}


class _ConfigArgument(argparse.Action):
    """Appends ``FLAG VALUE`` to ``config_args``: oslo.config reads files and directories
    in their command-line order, which separate lists would lose.
    """

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        given = [self.option_strings[0], values]
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), *given])


def add_config_options(parser: Any, *, documented: bool = True) -> None:
    """Add ``--config-file`` and ``--config-dir`` to *parser* (or an argument group);
    undocumented in the global parser, whose description mentions them.
    """
    for flag, kwargs in _CONFIG_OPTIONS.items():
        help_text = kwargs["help"] if documented else argparse.SUPPRESS
        parser.add_argument(
            flag,
            **{**kwargs, "help": help_text},
            action=_ConfigArgument,
            dest="config_args",
            default=[],
        )


#: The exit status of a usage slip (bad configuration, unknown backend name), as serve's.
_EXIT_USAGE = 2

#: cliff formatters whose output goes to a terminal as it is (JSON and YAML escape).
_HUMAN_FORMATS = frozenset({"table", "value", "csv"})


class _MetadataFormatters(stevedore.ExtensionManager[Any]):
    """cliff's formatter plugins, listed by :func:`~sglang_backends.discovery.discover`
    from *installed* (through stevedore's public hook), which skips an unrelated package's
    broken metadata.
    """

    def __init__(
        self, namespace: str, installed: Sequence[InstalledDistribution], **options: Any
    ) -> None:
        self._installed = installed
        super().__init__(namespace, **options)

    def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
        found = discover(self.namespace, self._installed)
        return [plugin.entry_point for plugins in found.values() for plugin in plugins]


class SafeCommand(Command):
    """A cliff command that survives an unrelated distribution's malformed metadata: its
    constructor takes no ``cmd_name``, so cliff loads no hooks (a scan of every entry point).
    """

    def __init__(self, app: Any, app_args: argparse.Namespace | None) -> None:
        super().__init__(app, app_args)

    def get_epilog(self) -> str:
        """The configuration notes every command shares."""
        return _CONFIG_EPILOG


def _names(values: list[str] | None, flag: str) -> tuple[str, ...] | None:
    """Flatten repeated and comma-separated ``--enable``/``--disable`` values, by
    ``enabled_backends``' rule: one empty value alone is an empty list.

    :raises ConfigurationError: an empty name among others.
    """
    if values is None:
        return None
    if values == [""]:
        return ()
    names = tuple(name.strip() for value in values for name in value.split(","))
    if any(not name for name in names):
        given = " ".join(f"{flag} {value!r}" for value in values)
        raise ConfigurationError(
            f"{given} on the command line holds an empty backend name; give names "
            f"separated by commas, or {flag} '' alone for an empty list"
        )
    return names


class SelectionOptions(SafeCommand, DisplayCommandBase[Any]):
    """A display command honouring configuration, the environment and ``--enable``/``--disable``.

    Its formatters are listed by :class:`_MetadataFormatters`. A
    :class:`ConfigurationError` ends it with one line on stderr and exit
    status 2 (a traceback too with ``--debug``).
    """

    # cliff has no public way to choose how formatter plugins are found; this
    # hook, meant for tests, is the narrowest place to avoid stevedore's scan.
    def _load_formatter_plugins(self) -> Any:
        installed = self.installed_distributions
        return _MetadataFormatters(self.formatter_namespace, installed, invoke_on_load=True)

    @functools.cached_property
    def installed_distributions(self) -> tuple[InstalledDistribution, ...]:
        """Every installed distribution, read once for the formatters and the inventory."""
        return tuple(distributions())

    def safe_rows(
        self, parsed_args: argparse.Namespace, rows: Iterable[Sequence[Any]]
    ) -> list[tuple[Any, ...]]:
        """*rows* with control characters escaped when the formatter is a human one."""
        if getattr(parsed_args, "formatter", None) not in _HUMAN_FORMATS:
            return [tuple(row) for row in rows]
        return [tuple(printable(value) for value in row) for row in rows]

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        group = parser.add_argument_group("configuration and selection")
        add_config_options(group)
        for flag, effect, option in (
            ("--enable", "allow only", "enabled_backends"),
            ("--disable", "never load", "disabled_backends"),
        ):
            group.add_argument(
                flag,
                metavar="NAME",
                action="append",
                help=f"{effect} these plugins (repeatable or comma-separated); overrides {option}",
            )
        return parser

    #: Set by a command whose output reports a failure: the exit status becomes 1.
    failed = False
    #: Whether the command itself reports a plugin claiming a built-in name as an error (a
    #: registry's refusal, check's row); if not, the inventory warns of it.
    reports_conflicts = True

    def run(self, parsed_args: argparse.Namespace) -> int:
        """Run the command; exit status 2 for a usage slip (invalid configuration, a name
        nothing provides: as ``serve``), 1 if its output reports a failure.
        """
        try:
            status = super().run(parsed_args)
        except (ConfigurationError, UnknownBackendError) as exc:
            if self.app_args is not None and self.app_args.debug:
                self.app.LOG.exception(exc)
            else:
                self.app.LOG.error("%s", exc)
            return _EXIT_USAGE
        return status or (1 if self.failed else 0)

    def inventory(self, parsed_args: argparse.Namespace) -> tuple[Settings, Inventory]:
        """The settings, and the command's one inventory under their selection (imports no
        plugin), which warns of their slips: a listed name nothing provides, a ``model_type``
        serve would refuse, and a conflict the command does not report itself.
        """
        settings = self.settings(parsed_args)
        inventory = take_inventory(
            settings,
            default_builtins(),
            installed=self.installed_distributions,
            warn_conflicts=not self.reports_conflicts,
            warn_model_type=True,
        )
        return settings, inventory

    def settings(self, parsed_args: argparse.Namespace) -> Settings:
        """Read configuration and apply the command-line overrides.

        :raises ConfigurationError: a file is missing or unreadable, or a value is invalid.
        """
        before = self.app.options  # the global options, read before the command name
        args = [*before.config_args, *parsed_args.config_args]
        settings = Settings()
        if configured(args):  # else the defaults, without importing oslo.config
            from sglang_backends.config import load_settings

            settings = load_settings(args=args)
        enable = _names(parsed_args.enable, "--enable")
        disable = _names(parsed_args.disable, "--disable")
        flagged = settings.flag_origins
        if enable is not None:
            flagged += (("enabled", "--enable on the command line"),)
            settings = settings._replace(enabled=enable or None)
        if disable is not None:
            flagged += (("disabled", "--disable on the command line"),)
            settings = settings._replace(disabled=disable)
        return settings._replace(flag_origins=flagged)


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds, greater than 0 and at most MAX_TIMEOUT."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(
            f"must be greater than 0 and at most {MAX_TIMEOUT:g}: {text!r}"
        )
    return value


def option_span(parser: argparse.ArgumentParser, token: str) -> tuple[argparse.Action, int] | None:
    """*parser*'s action for option string *token* and how many strings it spans (the
    option and its values, as argparse reads them), or ``None``; linear, unlike argparse <3.13.

    argparse has no public way to ask for an option's action, and cliff adds options of
    its own, so this reads argparse's option table: the one private name the commands use.
    """
    name, joined, _ = token.partition("=")
    table: dict[str, argparse.Action] = parser._option_string_actions
    action = table.get(name) if token.startswith("-") else None
    if action is None:
        return None
    if joined or (action.nargs not in (None, "?") and not isinstance(action.nargs, int)):
        return action, 1
    return action, 2 if action.nargs in (None, "?") else 1 + int(action.nargs or 0)


#: How a usable backend's status reads, built-in or plugin.
ENABLED = PluginStatus.ENABLED.value


def builtin_status(name: str) -> str:
    """How every command shows built-in *name*: enabled, or the SGLang it needs to serve
    (not a failure: plugins serve without SGLang).
    """
    if name not in INSTALL_COMMANDS or sglang_installed():
        return ENABLED
    return f"needs SGLang ({INSTALL_COMMANDS[name]})"


def builtin_row(name: str, backend: Any) -> tuple[Any, ...]:
    """Built-in *name*'s Name, Origin, Distribution, Version, Target and Status, as ``list``
    and ``show`` give them; the target is its ``run`` (a lazy one's factory) as ``module:function``.
    """
    run = getattr(backend, "run", backend)
    target = f"{getattr(run, '__module__', '?')}:{getattr(run, '__qualname__', repr(run))}"
    return (name, "built-in", None, None, target, builtin_status(name))


def plugin_row(plugin: PluginEntryPoint, status: str, origin: str = "plugin") -> tuple[Any, ...]:
    """The same columns for *plugin*, with *status*; *origin* ``general`` for an SGLang
    general plugin.
    """
    return (plugin.name, origin, plugin.distribution_label, plugin.version, plugin.target, status)


def requirements_cell(unmet: str | None) -> str | None:
    """How ``list`` shows a distribution's requirements (:func:`~sglang_backends.foresight.
    unmet_text`): ``met``, ``unmet: …``, or nothing when its metadata could not be read.
    """
    if unmet is None:
        return None
    return f"unmet: {unmet}" if unmet else "met"
