"""The ``sglang-backends`` console script: routes to ``serve`` or the operator commands.

This is the one route to ``serve``: it is taken before anything else is
imported, so serving a model never pays for the operator machinery (cliff,
oslo.config), and ``serve`` is never a cliff command (cliff reads its
global options anywhere on the line, a backend's arguments included).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from sglang_backends._core.console import EXIT_USAGE, error, run_command
from sglang_backends._core.names import HELP_FLAGS, PROG
from sglang_backends._serve.argv import CONFIG_FLAGS, DEBUG
from sglang_backends.errors import option_before_command

#: Options before a command name that take a value: serve's (kept for it), then cliff's.
_VALUED = (*CONFIG_FLAGS, "--log-file")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sglang-backends ARGS`` and return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    index = 0
    # serve's options before the command name, kept for it, and the others.
    kept = []
    others = []
    while index < len(args) and args[index].startswith("-"):
        name, sep, _ = args[index].partition("=")
        width = 2 if not sep and name in _VALUED else 1
        if name in DEBUG.flags:
            kept.append(name)
        elif name in CONFIG_FLAGS:
            kept += args[index : index + width]
        else:
            others.append(name)
        index += width
    # "help serve ARGS" is "serve ARGS --help", the same by construction.
    helped = args[index : index + 2] == ["help", "serve"]
    index += helped
    # --version answers before any command, as cliff reads it; --help asks serve's.
    if index < len(args) and args[index] == "serve" and "--version" not in others:
        served = [*kept, *args[index + 1 :]]
        if helped or {*others} & {*HELP_FLAGS}:
            served.append("--help")
        elif others:
            error(PROG, option_before_command(others[0], "serve"))
            return EXIT_USAGE
        from sglang_backends._serve.main import main as serve_main

        return run_command(PROG, lambda: serve_main(served))
    from sglang_backends._operators.app import OperatorApp

    # cliff words a failed write itself; what it left buffered is flushed as it ends, not at exit.
    return run_command(OperatorApp.NAME, lambda: OperatorApp().run(args))
