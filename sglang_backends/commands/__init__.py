"""Operator commands: ``sglang-backends list|show|check|detect``, on cliff.

Each command is a cliff command registered in the ``sglang_backends.commands``
entry-point group, so cliff's output formatters (``-f table|json|yaml|value|csv``,
``-c COLUMN``) come with it. This module stays light: cliff is imported by
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
