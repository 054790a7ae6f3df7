"""What every operator command shares: configuration options, error handling, safe output."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import io
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

import stevedore
from cliff.command import Command
from cliff.display import DisplayCommandBase

from sglang_backends._core.console import EXIT_USAGE, printable, writing_output
from sglang_backends._core.discovery import (
    InstalledDistribution,
    PluginEntryPoint,
    discover,
    distributions,
)
from sglang_backends._core.inventory import Inventory, model_type_problems, take_inventory
from sglang_backends._core.selection import PluginStatus
from sglang_backends._core.settings import Settings, configured, seconds
from sglang_backends._serve.argv import CONFIG_DIR, CONFIG_FILE
from sglang_backends._sglang.builtins import default_builtins
from sglang_backends._sglang.installed import INSTALL_COMMANDS, install_hint, sglang_installed
from sglang_backends.errors import ConfigurationError, UnknownBackendError, naming_lead

_CONFIG_EPILOG = """\
configuration:
  Options are read from the [serve_backends] group of the files given with
  --config-file and --config-dir (before or after the command name), and from
  OS_SERVE_BACKENDS__<OPTION> environment variables (e.g.
  OS_SERVE_BACKENDS__ENABLED_BACKENDS=omni,vlm), which override the files.
  --enable/--disable override both. A misspelt option, group or variable is
  a warning. Exit status 2 means the configuration is invalid: every
  problem is reported, a line each.
"""


class _ConfigArgument(argparse.Action):
    """Appends ``FLAG VALUE`` to ``config_args``: oslo.config reads files and directories
    in their command-line order, which separate lists would lose. An empty value is refused,
    as serve refuses it, never read as the working directory (``--config-dir "$UNSET"``).
    """

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        if not values:
            raise argparse.ArgumentError(self, "expects a value")
        setattr(
            namespace, self.dest, [*getattr(namespace, self.dest), self.option_strings[0], values]
        )


def add_config_options(parser: Any, *, documented: bool = True) -> None:
    """Add ``--config-file`` and ``--config-dir`` to *parser* (or an argument group), as
    serve declares them; undocumented in the global parser, whose description mentions them.

    Global options before the command name (as OpenStack clients take them), each
    command's own after it; the command reads both.
    """
    for option in (CONFIG_FILE, CONFIG_DIR):
        parser.add_argument(
            *option.flags,
            metavar=option.metavar,
            help=option.help if documented else argparse.SUPPRESS,
            action=_ConfigArgument,
            dest="config_args",
            default=[],
        )


#: cliff formatters whose output goes to a terminal as it is (JSON and YAML escape).
_HUMAN_FORMATS = frozenset({"table", "value", "csv", "shell"})
#: The formats read on a terminal, row by row: a long cell is shortened (JSON, YAML
#: and CSV, read by programs, keep every character).
_TERMINAL_FORMATS = frozenset({"table", "value"})
#: The longest cell table and value formats show whole: a row of a few such cells
#: still fits a wide terminal.
MAX_CELL = 100


class Cell(str):
    """A cell's text, knowing what a terminal may leave out of it (table and value formats;
    the others show every character): its *lead* (:func:`~sglang_backends.errors.naming_lead`),
    when the row's *said_by* columns, shown, give the backend and distribution it names; and,
    shortened, which items of *items*, the ``"; "``-joined list it ends with, it leaves out
    (``+30 more``). The message stays worded where it is made; this only marks its parts.
    """

    lead: str
    items: str
    said_by: tuple[str, ...]

    def __new__(
        cls, text: str, *, lead: str = "", items: str = "", said_by: tuple[str, ...] = ()
    ) -> Cell:
        cell = super().__new__(cls, text)
        cell.lead = lead
        cell.items = items
        cell.said_by = said_by
        return cell


class _MetadataFormatters(stevedore.ExtensionManager[Any]):
    """cliff's formatter plugins, listed by :func:`~sglang_backends._core.discovery.discover`
    from *installed* (through stevedore's public hook), which skips an unrelated package's
    broken metadata.
    """

    def __init__(self, namespace: str, installed: Sequence[InstalledDistribution]) -> None:
        self._installed = installed
        super().__init__(namespace, invoke_on_load=True)

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


def _names(values: list[str] | None, flag: str, problems: list[str]) -> tuple[str, ...] | None:
    """Flatten repeated and comma-separated ``--enable``/``--disable`` values, each read as
    oslo.config reads ``enabled_backends``: white space and trailing commas dropped, so that
    an empty value alone is an empty list. An empty name among others is a problem, added to
    *problems* (then ``None``: no override).
    """
    if values is None:
        return None
    parts = [value.strip().rstrip(",") for value in values]
    names = tuple(name.strip() for part in parts if part for name in part.split(","))
    if all(names):
        return names
    given = " ".join(f"{flag} {value!r}" for value in values)
    problems.append(
        f"{given} on the command line holds an empty backend name; give names "
        f"separated by commas, or {flag} '' alone for an empty list"
    )
    return None


class SelectionOptions(SafeCommand, DisplayCommandBase[Any]):
    """A display command honouring configuration, the environment and ``--enable``/``--disable``.

    Its formatters are listed by :class:`_MetadataFormatters`. A
    :class:`ConfigurationError` ends it with one line on stderr and exit
    status 2 (a traceback too with ``--debug``).
    """

    # cliff has no public way to choose how formatter plugins are found; this
    # hook, meant for tests, is the narrowest place to avoid stevedore's scan.
    def _load_formatter_plugins(self) -> Any:
        return _MetadataFormatters(self.formatter_namespace, self.installed_distributions)

    def produce_output(self, parsed_args: argparse.Namespace, column_names: Any, data: Any) -> int:
        """The output, a failure to write it said in one line (cliff's is the errno alone)."""
        with writing_output():
            # Lister's and ShowOne's, which every command mixes in after this class.
            return super().produce_output(parsed_args, column_names, data)  # type: ignore[safe-super]

    @functools.cached_property
    def installed_distributions(self) -> tuple[InstalledDistribution, ...]:
        """Every installed distribution, read once for the formatters and the inventory."""
        return tuple(distributions())

    #: The command's name, for the pointer ending a shortened cell (``see list -f json``);
    #: empty for a command whose cells are never shortened (``show``: its one row is the
    #: full text).
    command_name = ""

    def safe_rows(
        self, parsed_args: argparse.Namespace, rows: Iterable[Sequence[Any]]
    ) -> list[tuple[Any, ...]]:
        """*rows* as the formatter should print them: unchanged for JSON and YAML (``null``
        stays); for a human one, with control characters escaped and no value blank (not
        ``None``); for table and value, a :class:`Cell`'s lead left out where its row's
        columns say it, and each cell longer than :data:`MAX_CELL` shortened; for shell,
        quoted for its double quotes.
        """
        # Read by programs (JSON, YAML): a Cell as the plain text it is.
        if parsed_args.formatter not in _HUMAN_FORMATS:
            return [tuple(str(v) if isinstance(v, Cell) else v for v in row) for row in rows]
        short = self.command_name and parsed_args.formatter in _TERMINAL_FORMATS
        pointer = f"see {self.command_name} -f json" if short else ""
        shown = set(parsed_args.columns or ())
        cells = [tuple(_shown(value, pointer, shown) for value in row) for row in rows]
        if parsed_args.formatter == "shell":
            return [tuple(map(_shell_quoted, row)) for row in cells]
        return cells

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

    def run(self, parsed_args: argparse.Namespace) -> int:
        """Run the command; exit status 2 for a usage slip (invalid configuration, a name
        nothing provides: as ``serve``), 1 if its output reports a failure.
        """
        try:
            status = super().run(parsed_args)
        except (ConfigurationError, UnknownBackendError) as exc:
            if self.app.options.debug:
                self.app.LOG.exception(exc)
            else:
                # A configuration's problems, a line each.
                for line in str(exc).splitlines():
                    self.app.LOG.error("%s", line)
            # Exit status 2 for a usage slip (bad configuration, unknown name), as serve's.
            return EXIT_USAGE
        return status or (1 if self.failed else 0)

    def inventory(
        self,
        parsed_args: argparse.Namespace,
        *,
        warn_conflicts: bool = False,
        warn_model_type: bool = True,
    ) -> tuple[Settings, Inventory]:
        """The settings (configuration, then the command-line overrides), and the command's
        one inventory under their selection (imports no plugin), which warns of their slips
        (:func:`take_inventory`): a listed name nothing provides, with *warn_model_type* a
        ``model_type`` serve would refuse, and with *warn_conflicts* a plugin claiming a
        built-in name (which a registry refuses, and check reports as an error).

        :raises ConfigurationError: a file is missing or unreadable, or a value is invalid:
            every such problem, with the ``model_type`` serve would refuse, a line each.
        """
        # The global options (read before the command name), then the command's.
        args = [*self.app.options.config_args, *parsed_args.config_args]
        settings = Settings()
        problems: list[str] = []
        # Without configuration, the defaults, without importing oslo.config.
        if configured(args):
            from sglang_backends.config import read_settings

            settings, problems = read_settings(args)
        enable = _names(parsed_args.enable, "--enable", problems)
        disable = _names(parsed_args.disable, "--disable", problems)
        flagged = settings.flag_origins
        if enable is not None:
            flagged += (("enabled", "--enable on the command line"),)
            settings = settings._replace(enabled=enable or None)
        if disable is not None:
            flagged += (("disabled", "--disable on the command line"),)
            settings = settings._replace(disabled=disable)
        settings = settings._replace(flag_origins=flagged)
        inventory = take_inventory(
            settings,
            default_builtins(),
            installed=self.installed_distributions,
            warn_conflicts=warn_conflicts and not problems,
            warn_model_type=warn_model_type and not problems,
        )
        # With the model_type serve would refuse next: every problem at once.
        if problems:
            problems += model_type_problems(settings, inventory)
            raise ConfigurationError("\n".join(problems))
        return settings, inventory


def _shell_quoted(value: Any) -> Any:
    """*value* ready for cliff's shell format, which puts it between double quotes and
    escapes only ``"``: its other characters special there (``\\``, ``$``, a backquote)
    escaped too, so that evaluating the output assigns the text and runs nothing.
    """
    if not isinstance(value, str):
        return value
    return value.replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`")


def _shown(value: Any, pointer: str, shown: set[str]) -> Any:
    """*value* as a human format shows it: blank for ``None``, escaped (:func:`printable`);
    with a *pointer* (table, value), a :class:`Cell` without its lead when *shown* (``-c``;
    empty: every column) holds the columns that say it; then :func:`shortened`.
    """
    if value is None:
        return ""
    if not isinstance(value, Cell):
        return shortened(printable(value), pointer)
    text = printable(str(value))
    if pointer and (not shown or shown.issuperset(value.said_by)):
        text = text.removeprefix(printable(value.lead))
    return shortened(text, pointer, printable(value.items))


def shortened(value: Any, pointer: str, items: str = "") -> Any:
    """*value*, or when *pointer* is given and its text is longer than :data:`MAX_CELL`, its
    beginning (to the end of a ``"; "``-separated part if that loses a few characters only,
    else of a word), ``…`` and *pointer*; with how many of *items* (the ``"; "``-joined list
    the text ends with, if any) are not shown whole: ``unmet: a (installed: 1); b… (+30
    more; see list -f json)``. Only a list's items are counted: elsewhere a ``;`` may join
    one sentence.
    """
    text = str(value)
    if not pointer or len(text) <= MAX_CELL:
        return value
    budget = MAX_CELL - len(pointer) - len(" (+999 more; )…")
    head = text[:budget]
    if head.rfind("; ") >= budget - 12:
        head = head[: head.rfind("; ")]
    elif " " in head[budget // 2 :]:
        # Else at a word's end, not in the middle of a word.
        head = head[: head.rindex(" ")].removesuffix(";")
    more = ""
    # The list ends the text, so is cut: count its items.
    if items and text.endswith(items):
        # What of it is shown, maybe nothing.
        listed = head[len(text) - len(items) :]
        whole = listed.count("; ") + bool(listed and text[len(head) :].startswith("; "))
        more = f"+{items.count('; ') + 1 - whole} more; "
    return f"{head.rstrip()}… ({more}{pointer})"


def detail_cell(
    text: str | None,
    name: str,
    distribution: str | None,
    said_by: tuple[str, ...],
    items: str = "",
) -> Cell | None:
    """*text*, about plugin *name* from *distribution*, as a cell of a row whose *said_by*
    columns give both, which its lead (:func:`naming_lead`) need not repeat; ending with
    *items*, a ``"; "``-joined list. ``None`` without a *text*.
    """
    if text is None:
        return None
    lead = naming_lead(text, name, distribution) if distribution else ""
    return Cell(text, lead=lead, items=items, said_by=said_by)


#: Default number of plugin-loading workers run at once: the CPU count, at most 4.
DEFAULT_JOBS = min(4, os.cpu_count() or 1)


def positive_seconds(text: str) -> float:
    """An argparse type: a timeout, by the rule every timeout follows (see :func:`seconds`)."""
    try:
        return seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: {exc}") from None


class _Probe(argparse.ArgumentParser):
    """A parser that raises its errors (:class:`argparse.ArgumentError`) instead of exiting,
    on every Python: what ``exit_on_error=False`` covers has changed between releases."""

    def error(self, message: str) -> NoReturn:
        raise argparse.ArgumentError(None, message)


def option_spans(parser: argparse.ArgumentParser) -> Callable[[str], int | None]:
    """How many arguments an argument spans if it is one of *parser*'s options (the option
    and its value), as argparse reads it; ``None`` if it is not one of them.

    argparse keeps no public table of a parser's options, and cliff adds options of its own,
    so this asks argparse: a copy of *parser*'s options (``parents``; the copy must hold no
    positional), raising its errors instead of exiting, parses the argument alone, once per
    distinct argument, which keeps a long command line linear. An option wanting values is
    taken to want one, as every option here and in cliff does, unless the argument carries
    it (``--opt=V``, ``-fjson``).
    """
    probe = _Probe(parents=[parser], add_help=False, allow_abbrev=False)

    @functools.cache
    def span(token: str) -> int | None:
        if not token.startswith("-") or token == "-":
            # One of argparse's positionals.
            return None
        try:
            # --help and --version print: not here.
            with contextlib.redirect_stdout(io.StringIO()):
                _, extras = probe.parse_known_args([token])
        except SystemExit:
            # --help or --version, which take nothing.
            return 1
        except argparse.ArgumentError:
            # Its value is missing (or refused if joined).
            joined = "=" in token if token.startswith("--") else len(token) > 2
            return 1 if joined else 2
        return None if extras == [token] else 1

    return span


#: How a usable backend's status reads, built-in or plugin.
ENABLED = PluginStatus.ENABLED.value


def needs_sglang(name: str) -> str | None:
    """How every command shows built-in *name* when it cannot serve here: the SGLang it needs
    (not a failure: plugins serve without SGLang); ``None`` when it can.
    """
    if name not in INSTALL_COMMANDS or sglang_installed():
        return None
    return f"needs SGLang ({install_hint(name)})"


def builtin_row(name: str, backend: Any) -> tuple[Any, ...]:
    """Built-in *name*'s Name, Origin, Distribution, Version, Target and Status, as ``list``
    and ``show`` give them; the target is its ``run`` (a lazy one's factory) as ``module:function``.
    """
    run = getattr(backend, "run", backend)
    target = f"{getattr(run, '__module__', '?')}:{getattr(run, '__qualname__', repr(run))}"
    return (name, "built-in", None, None, target, needs_sglang(name) or ENABLED)


def plugin_row(plugin: PluginEntryPoint, status: str, origin: str = "plugin") -> tuple[Any, ...]:
    """The same columns for *plugin*, with *status*; *origin* ``general`` for an SGLang
    general plugin.
    """
    return (plugin.name, origin, plugin.distribution_label, plugin.version, plugin.target, status)
