"""The cliff application behind the operator commands."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from cliff.app import App
from cliff.commandmanager import CommandManager

__all__ = ["COMMAND_NAMESPACE", "OperatorApp"]

#: Entry-point group holding the commands.
COMMAND_NAMESPACE = "sglang_backends.commands"

_DESCRIPTION = """\
Inspect and check the serve backends sglang-backends can use.

  list     every backend, built-in and plugin, and whether it may be used (imports nothing)
  show     load one backend and show its contract
  check    load every enabled plugin in an isolated process and validate it
  detect   explain which backend automatic detection picks for a request

Run "sglang-backends help COMMAND" or "sglang-backends COMMAND --help" for details.
Serve a model with "sglang-backends serve MODEL [--model-type NAME] ...".
"""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang-backends")
    except PackageNotFoundError:
        return "unknown"


class OperatorApp(App):
    """``sglang-backends``: list, show, check and explain serve backends."""

    NAME = "sglang-backends"
    LOG = logging.getLogger(NAME)

    def __init__(self) -> None:
        super().__init__(
            description=_DESCRIPTION,
            version=_version(),
            command_manager=CommandManager(COMMAND_NAMESPACE),
            deferred_help=True,
        )

    def build_option_parser(
        self,
        description: str | None,
        version: str | None,
        argparse_kwargs: dict[str, Any] | None = None,
    ) -> argparse.ArgumentParser:
        """The global options, with the description kept as written."""
        kwargs = dict(argparse_kwargs or {})
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("prog", self.NAME)
        return super().build_option_parser(description, version, kwargs)

    def configure_logging(self) -> None:
        """Log to stderr: warnings always, information with ``-v``, everything with ``-vv``."""
        super().configure_logging()
        levels = {0: logging.WARNING, 1: logging.WARNING, 2: logging.INFO}
        level = levels.get(self.options.verbose_level, logging.DEBUG)
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler, logging.FileHandler
            ):
                handler.setLevel(level)

    def interact(self) -> None:
        """No interactive shell: without a command, print the help."""
        self.parser.print_help(self.stdout)
        self.stdout.write("\nCommands: list, show, check, detect, help (and serve).\n")
