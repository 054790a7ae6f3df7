"""Operator commands: ``sglang-backends list|show|check|detect``, on cliff.

Each command is a cliff command, so cliff's output formatters (``-f
table|json|yaml|value|csv``, ``-c COLUMN``) come with it. The application adds
them by name rather than scanning entry points, so a malformed
``entry_points.txt`` of an unrelated distribution cannot break them; they
are also declared in the ``sglang_backends.commands`` entry-point group, for
documentation tools. This module stays light: cliff is imported by
:func:`main`, not here.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sglang-backends COMMAND ...`` (any command but ``serve``) and return its status."""
    import sys

    from sglang_backends.commands.app import OperatorApp

    return OperatorApp().run(list(sys.argv[1:] if argv is None else argv))
