"""The cliff application behind the operator commands, read in linear time over a long line."""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.metadata
import itertools
import logging
import sys
from typing import Any

from cliff.app import App
from cliff.command import Command
from cliff.commandmanager import CommandManager
from cliff.help import HelpCommand

from sglang_backends._core import console
from sglang_backends._operators.commands.base import SafeCommand, add_config_options, option_spans
from sglang_backends._serve.argv import CONFIG_FLAGS
from sglang_backends.errors import option_before_command


class _GlobalOptions(argparse.ArgumentParser):
    """The global options, read from anywhere on the command line in linear time.

    argparse before 3.13 is O(N²) over a long line (a detect request): only the
    global options and their values reach it here; the rest is returned as it
    came. ``--config-file`` and ``--config-dir`` are global only before the
    command name: after it they are the command's own (or the request's).
    """

    #: The global options of the line last read, as given.
    given: list[str] = []

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # The line, as argparse reads it when none is given.
        args = sys.argv[1:] if args is None else list(args)
        mine: list[str] = []
        rest: list[str] = []
        # Whether the command name has been read.
        commanded = False
        # How many arguments an option spans; a cluster of short options too: -vv, -vx.
        span_of = option_spans(self)
        tokens = iter(args)
        for token in tokens:
            # argparse reads no option after it.
            if token == "--":
                rest += [token, *tokens]
                break
            span = span_of(token)
            # Not a global option; nor, after the command name, --config-file or --config-dir.
            if span is None or (commanded and token.partition("=")[0] in CONFIG_FLAGS):
                rest.append(token)
                commanded = commanded or not token.startswith("-")
            else:
                # The option and its value: --log-file FILE.
                mine += [token, *itertools.islice(tokens, span - 1)]
        # Into a copy: should argparse read them otherwise than this scan assumed (-vx:
        # Python 3.13 takes -v and leaves -x), it reads the whole line into the original.
        found, extras = super().parse_known_args(mine, copy.copy(namespace))
        if extras:
            return super().parse_known_args(args, namespace)
        # The global options as given, for a command suggesting the line to run instead.
        self.given = mine
        if namespace is None:
            return found, rest
        vars(namespace).update(vars(found))
        return namespace, rest


#: The operator commands, as setup.cfg registers them in the ``sglang_backends.commands``
#: group; each is imported when run (or when the help lists them), as cliff imports a
#: command entry point. The group is not scanned: one malformed ``entry_points.txt`` of
#: an unrelated package would break a scan of every entry point.
COMMANDS = {
    "list": "sglang_backends._operators.commands.listing:ListBackends",
    "show": "sglang_backends._operators.commands.show:ShowBackend",
    "check": "sglang_backends._operators.commands.check:CheckBackends",
    "detect": "sglang_backends._operators.commands.detect:DetectBackend",
}


class _Commands(CommandManager):
    """The commands, found by the first word only (cliff's own search is O(N²) over the
    line); anything else, an unknown command included, is cliff's to report.
    """

    def __init__(self) -> None:
        super().__init__(None)
        for name, target in COMMANDS.items():
            self.commands[name] = importlib.metadata.EntryPoint(
                name, target, "sglang_backends.commands"
            )

    def find_command(self, argv: list[str]) -> tuple[type[Command], str, list[str]]:
        try:
            command, name, _ = super().find_command(argv[:1])
        except ValueError:
            try:
                return super().find_command(argv)
            except ValueError:
                raise ValueError(self._not_a_command(argv)) from None
        return command, name, argv[1:]

    def _not_a_command(self, argv: list[str]) -> str:
        """Why *argv* names no command, in one line: cliff's repeats the list as Python
        writes it, and takes a command's option before its name for a command."""
        word = argv[0] if argv else ""
        if not word.startswith("-"):
            return f"Unknown command {' '.join(argv)!r}"
        command = next((token for token in argv if token in self.commands), None)
        return option_before_command(word, command)


class Help(SafeCommand, HelpCommand):
    """print detailed help for another command, or for serve"""

    # "help serve" never comes here: the console script routes it as "serve --help".

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        with console.writing_output():
            try:
                return super().take_action(parsed_args)
            except ValueError as exc:
                # No such command: a usage slip, as "sglang-backends nosuch" is.
                self.app.LOG.error("%s", exc)
                return console.EXIT_USAGE


class Serve(SafeCommand):
    """Serve a model with the backend --model-type names, or the one detection picks"""

    # Routed before cliff by the console script; registered for the command list and help.

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        raise AssertionError("serve is routed before cliff")  # pragma: no cover


_DESCRIPTION = """\
Serve a model with a serve backend (serve), and inspect and check the
backends installed (list, show, check, detect).

--config-file PATH and --config-dir DIR may come before or after the command name.
Run "sglang-backends help COMMAND" or "sglang-backends COMMAND --help" for details,
"sglang-backends help serve" for serve's. Serve a model with
"sglang-backends serve MODEL [--model-type NAME] ...".
"""


class _LogFile(logging.FileHandler):
    """``--log-file``, whose failure to write (a full disk) is one line on stderr, then no
    more writing to it: logging's own report is a traceback for every record."""

    def handleError(self, record: logging.LogRecord) -> None:
        failure = sys.exc_info()[1]
        if not isinstance(failure, OSError):
            super().handleError(record)
            return
        logging.getLogger().removeHandler(self)
        # What is left in its buffer cannot be written either.
        with contextlib.suppress(OSError):
            self.close()
        OperatorApp.LOG.warning(
            "Cannot write the log file %s: %s; logging to stderr only",
            self.baseFilename,
            failure.strerror or failure,
        )


class OperatorApp(App):
    """``sglang-backends``: list, show, check and explain serve backends."""

    NAME = "sglang-backends"
    LOG = logging.getLogger(NAME)

    def __init__(self) -> None:
        try:
            own_version = importlib.metadata.version("sglang-backends")
        except importlib.metadata.PackageNotFoundError:
            own_version = "unknown"
        manager = _Commands()
        super().__init__(
            description=_DESCRIPTION,
            version=own_version,
            command_manager=manager,
            deferred_help=True,
        )
        manager.add_command("serve", Serve)
        manager.add_command("help", Help)

    def build_option_parser(
        self,
        description: str | None,
        version: str | None,
        argparse_kwargs: dict[str, Any] | None = None,
    ) -> argparse.ArgumentParser:
        """The global options, ``--config-file`` and ``--config-dir`` among them.

        No abbreviations: ``--deb`` or ``--log`` in a ``detect`` request stay the request's.
        """
        kwargs = {
            "formatter_class": argparse.RawDescriptionHelpFormatter,
            "prog": self.NAME,
            "allow_abbrev": False,
            **(argparse_kwargs or {}),
        }
        cliffs = super().build_option_parser(description, version, kwargs)
        # The same options in a parser that reads them in linear time (argparse's ``parents``).
        parser = _GlobalOptions(
            parents=[cliffs], description=cliffs.description, add_help=False, **kwargs
        )
        # As OpenStack clients take them: "sglang-backends --config-file F list".
        add_config_options(parser, documented=False)
        return parser

    def configure_logging(self) -> None:
        """Log to stderr: warnings always, information with ``-v``, everything with ``-vv``;
        control characters (in untrusted package metadata) escaped, in a ``--log-file`` too.
        """
        try:
            super().configure_logging()
        except OSError as exc:
            # A usage slip, as argparse's are; cliff's line was the errno alone, status 1.
            console.say(f"Cannot open the log file {self.options.log_file}: {exc.strerror or exc}")
            raise SystemExit(console.EXIT_USAGE) from exc
        levels = {0: logging.WARNING, 1: logging.WARNING, 2: logging.INFO}
        level = levels.get(self.options.verbose_level, logging.DEBUG)
        root = logging.getLogger()
        # As serve's: messages escaped; each is given once as each command reads metadata once.
        for handler in list(root.handlers):
            # --log-file: cliff's format, escaped, and said once when it cannot be written.
            if isinstance(handler, logging.FileHandler):
                handler.close()
                log_file = _LogFile(handler.baseFilename)
                log_file.setFormatter(handler.formatter)
                log_file.addFilter(console.printable_record)
                root.removeHandler(handler)
                root.addHandler(log_file)
            elif isinstance(handler, logging.StreamHandler):
                handler.setLevel(level)
                console.terminal_log(handler)

    def print_help_if_requested(self) -> None:
        """``--help`` alone: the help, a failure to write it said in one line."""
        with console.writing_output():
            super().print_help_if_requested()

    def get_fuzzy_matches(self, cmd: str) -> list[str]:
        """Commands close to *cmd*; none for an option, which names no command."""
        return [] if cmd.startswith("-") else super().get_fuzzy_matches(cmd)

    def interact(self) -> None:
        """No interactive shell: without a command, print the help."""
        self.parser.print_help(self.stdout)
        self.stdout.write("\nCommands: serve, list, show, check, detect, help.\n")
