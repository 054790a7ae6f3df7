"""Process titles: ``ps`` tells serve's supervisor and backend process apart.

They show as ``sglang-backends serve [ROLE] ARGS`` (the front keeps its own title), so
``pgrep -f sglang-backends`` finds all three. setproctitle is imported only when used.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["take_role", "title_for"]

LOG = logging.getLogger(__name__)

_PROG = "sglang-backends serve"


def title_for(role: str, argv: list[str]) -> str:
    """``sglang-backends serve [ROLE]`` and what follows ``serve`` in *argv*, if anything."""
    args = argv[1:]
    shown = args[args.index("serve") + 1 :] if "serve" in args else []
    return " ".join([_PROG, f"[{role}]", *shown])


def take_role(role: str) -> None:
    """Title this process after *role* (``supervisor``, ``backend NAME``) if it can; never fails."""
    try:
        from setproctitle import setproctitle

        setproctitle(title_for(role, sys.argv))
    except Exception as exc:  # noqa: BLE001 - a title must never stop serve
        LOG.debug("Process title not set: %s", exc)
