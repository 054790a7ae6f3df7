"""Operator commands: ``sglang-backends list|show|check|detect``, on cliff (its ``-f`` and
``-c`` formatters come with them). The application adds them by name: their
``sglang_backends.commands`` entry points are for documentation tools, and a scan of
every entry point would break on an unrelated malformed one. cliff is imported by
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
