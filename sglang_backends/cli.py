"""The ``sglang-backends`` console script: routes to ``serve`` or the operator commands.

``serve`` is routed before anything else is imported, so serving a model
never pays for the operator machinery (cliff, oslo.config).

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sglang-backends ARGS`` and return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "serve":
        from sglang_backends.serve import main as serve_main

        return serve_main(args[1:])
    from sglang_backends.commands import main as commands_main

    return commands_main(args)
