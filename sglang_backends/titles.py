"""Process titles: ``ps`` and ``top`` tell serve's three processes apart.

The supervisor and the backend process each call :func:`take_role` once and
show as ``sglang-backends serve [ROLE] ARGS``; the front keeps its own title
(it may be a program embedding :func:`sglang_backends.serve.main`). Every
title holds ``sglang-backends``, so ``pgrep -f sglang-backends`` finds all
three. setproctitle is imported only here, when a title is set.

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["take_role", "title_for"]

LOG = logging.getLogger(__name__)

_PROG = "sglang-backends serve"


def title_for(role: str, argv: list[str]) -> str:
    """The title of a process in *role*: the serve arguments of *argv*, marked with the role.

    :param argv: the process's ``sys.argv``; what follows ``serve`` in it is
        shown (nothing when ``serve`` was started by a program calling it).
    """
    args = argv[1:]
    shown = args[args.index("serve") + 1 :] if "serve" in args else []
    return " ".join([_PROG, f"[{role}]", *shown])


def take_role(role: str) -> None:
    """Title this process after *role* (``supervisor``, ``backend NAME``); never fails.

    A title is a convenience: without setproctitle (or where it cannot
    work), the process keeps the one it has.
    """
    try:
        from setproctitle import setproctitle

        setproctitle(title_for(role, sys.argv))
    except Exception as exc:  # noqa: BLE001 - a title must never stop serve
        LOG.debug("Process title not set: %s", exc)
