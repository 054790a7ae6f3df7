"""The backend names and the entry-point group that every layer shares.

It imports nothing, so the general help and listing, which need these but
not the contract's classes, never import :mod:`dataclasses` (tens of
milliseconds at each start). :mod:`sglang_backends.contract` re-exports the
group and the reserved names for plugins.
"""

from __future__ import annotations

__all__ = ["AUTO", "FALLBACK_BACKEND", "RESERVED_SERVE_BACKEND_NAMES", "SERVE_BACKENDS_GROUP"]

#: Entry-point group in which plugins register their zero-argument factory.
SERVE_BACKENDS_GROUP = "sglang.serve_backends"
#: The ``--model-type`` value asking for automatic detection.
AUTO = "auto"
#: Names no backend may take: ``auto`` means "choose for me".
RESERVED_SERVE_BACKEND_NAMES = frozenset({AUTO})
#: The backend chosen when no detector claims a request.
FALLBACK_BACKEND = "llm"
