"""The backend names, the entry-point groups and serve's command name and help flags, which
every layer shares.

It imports nothing but :mod:`os`, so the general help and listing, which need these but
not the contract's classes, never import :mod:`dataclasses` (tens of
milliseconds at each start). :mod:`sglang_backends.contract` re-exports the
group and the reserved names for plugins.
"""

from __future__ import annotations

import os

# Typing itself costs milliseconds the general help need not pay.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

#: Entry-point group in which plugins register their zero-argument factory.
SERVE_BACKENDS_GROUP = "sglang.serve_backends"
#: Entry-point group of SGLang's general (hardware and hook) plugins.
GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"
#: The ``--model-type`` value asking for automatic detection.
AUTO = "auto"
#: Names no backend may take: ``auto`` means "choose for me".
RESERVED_SERVE_BACKEND_NAMES = frozenset({AUTO})
#: The backend chosen when no detector claims a request.
FALLBACK_BACKEND = "llm"
#: The command, as its usage, errors and the built-ins' help name it.
PROG = "sglang-backends serve"
#: The options asking for help, wherever they stand: serve's, a backend's and SGLang's.
HELP_FLAGS = ("-h", "--help")


def wants_help(argv: Sequence[str]) -> bool:
    """Whether ``-h`` or ``--help`` appears anywhere in *argv*."""
    return any(arg in HELP_FLAGS for arg in argv)


def general_plugins_allowed() -> frozenset[str] | None:
    """The general plugins this process's ``SGLANG_PLUGINS`` allows, as SGLang reads it:
    comma-separated names, stripped, empty ones dropped; ``None`` (all) when it is unset or
    empty, so ``SGLANG_PLUGINS=,`` allows none.
    """
    value = os.environ.get("SGLANG_PLUGINS", "")
    return frozenset(n.strip() for n in value.split(",") if n.strip()) if value else None
