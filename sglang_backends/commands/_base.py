"""What every operator command shares: configuration options and error handling."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cliff import _argparse as cliff_argparse
from cliff.command import Command

from sglang_backends.errors import ConfigurationError
from sglang_backends.settings import Settings

__all__ = [
    "Selection",
    "SelectionOptions",
    "Survey",
    "builtin_target",
    "summary_line",
    "warn_not_installed",
]


CONFIG_HELP = """\
configuration:
  Options are read from the [serve_backends] group of the files given with
  --config-file and --config-dir, and from OS_SERVE_BACKENDS__<OPTION>
  environment variables (e.g. OS_SERVE_BACKENDS__ENABLED_BACKENDS=omni,vlm),
  which override the files. --enable/--disable override both.
  Exit status 2 means the configuration is invalid.
"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, cliff_argparse.SmartHelpFormatter):
    """Keep descriptions and epilogs as written; wrap option help like cliff."""


@dataclasses.dataclass(frozen=True)
class Selection:
    """The effective settings of one command run and where the lists came from."""

    settings: Settings
    origins: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Survey:
    """The selection, the built-ins and every installed plugin's status under it."""

    selection: Selection
    builtins: Mapping[str, Any]
    records: Sequence[Any]


def _names(values: list[str] | None) -> tuple[str, ...] | None:
    """Flatten repeated and comma-separated ``--enable``/``--disable`` values."""
    if values is None:
        return None
    return tuple(name.strip() for value in values for name in value.split(",") if name.strip())


class SelectionOptions(Command):
    """A command honouring configuration files, the environment and ``--enable``/``--disable``.

    A :class:`ConfigurationError` ends the command with one line on stderr
    and exit status 2 (a traceback too with ``--debug``).
    """

    _epilog = CONFIG_HELP

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.formatter_class = _HelpFormatter
        group = parser.add_argument_group("configuration and selection")
        group.add_argument(
            "--config-file",
            metavar="PATH",
            action="append",
            default=[],
            help="read [serve_backends] options from this file; repeatable, later files win",
        )
        group.add_argument(
            "--config-dir",
            metavar="DIR",
            action="append",
            default=[],
            help="also read every *.conf file in DIR, in name order, after the --config-file "
            "files; repeatable",
        )
        group.add_argument(
            "--enable",
            metavar="NAME",
            action="append",
            help="allow only these plugins (repeatable or comma-separated); overrides "
            "enabled_backends",
        )
        group.add_argument(
            "--disable",
            metavar="NAME",
            action="append",
            help="never load these plugins (repeatable or comma-separated); overrides "
            "disabled_backends",
        )
        return parser

    #: Set by a command whose output reports a failure: the exit status becomes 1.
    failed = False

    def run(self, parsed_args: argparse.Namespace) -> int:
        self.failed = False
        try:
            status = super().run(parsed_args)
        except ConfigurationError as exc:
            if self.app_args is not None and self.app_args.debug:
                self.app.LOG.exception(exc)
            else:
                self.app.LOG.error("%s", exc)
            return 2
        return status or (1 if self.failed else 0)

    def survey(self, parsed_args: argparse.Namespace) -> Survey:
        """Read the selection and classify every installed plugin under it; imports none.

        Names in the lists that nothing installed provides are warned about.
        """
        from sglang_backends.discovery import discover, inventory
        from sglang_backends.host import default_builtins

        selection = self.selection(parsed_args)
        builtins = default_builtins()
        discovered = discover()
        warn_not_installed(selection, discovered, builtins)
        records = inventory(
            discovered,
            builtins,
            enabled=selection.settings.enabled,
            disabled=selection.settings.disabled,
        )
        return Survey(selection, builtins, records)

    def selection(self, parsed_args: argparse.Namespace) -> Selection:
        """Read configuration and apply the command-line overrides.

        :raises ConfigurationError: a file is missing or unreadable, or a value is invalid.
        """
        from sglang_backends.config import load_settings, option_origins

        settings = load_settings(
            config_files=parsed_args.config_file, config_dirs=parsed_args.config_dir
        )
        origins = dict(option_origins(settings.source))
        enable, disable = _names(parsed_args.enable), _names(parsed_args.disable)
        if enable is not None:
            settings = dataclasses.replace(settings, enabled=enable or None)
            origins["enabled"] = "--enable on the command line"
        if disable is not None:
            settings = dataclasses.replace(settings, disabled=disable)
            origins["disabled"] = "--disable on the command line"
        return Selection(settings, origins)


def warn_not_installed(
    selection: Selection, installed: Collection[str], builtins: Collection[str]
) -> None:
    """Warn about list names that match nothing installed, naming the option that set them."""
    from sglang_backends.discovery import warn_unknown_selection

    warn_unknown_selection(
        installed,
        builtins,
        enabled=selection.settings.enabled,
        disabled=selection.settings.disabled,
        origins=selection.origins,
    )


def builtin_target(backend: Any) -> str:
    """``module:function`` of a built-in backend's ``run``, or of a lazy built-in's factory."""
    run = getattr(backend, "run", backend)
    return f"{getattr(run, '__module__', '?')}:{getattr(run, '__qualname__', repr(run))}"


def summary_line(obj: object) -> str | None:
    """The first line of *obj*'s docstring, if it has one."""
    import inspect

    doc = inspect.getdoc(obj)
    return doc.strip().splitlines()[0] if doc and doc.strip() else None
