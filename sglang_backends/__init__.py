"""sglang-backends: SGLang's serve-backend extension API, on stevedore.

Out-of-tree runtimes register a zero-argument factory returning a
:class:`ServeBackend` in the ``sglang.serve_backends`` entry-point group; its
name becomes a ``--model-type`` value. The contract (``ServeBackend``,
``ServeRequest``, ``ServeBackendDetection`` and the constants) is importable
from here without importing stevedore or :mod:`importlib.metadata`. All
but the errors is imported on first use, so a program that needs none of
the contract's dataclasses (the general help) does not pay for them.
:func:`portable_backend` builds a backend that both hosts accept,
``sglang serve`` and ``sglang-backends serve``.
"""

from __future__ import annotations

from sglang_backends import errors as _errors
from sglang_backends._core import lazy as _lazy
from sglang_backends.errors import *  # noqa: F403 - every exception is the package's

# Typing itself costs milliseconds a plugin need not pay.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from sglang_backends._core.detection import DetectionReport
    from sglang_backends.contract import (
        RESERVED_SERVE_BACKEND_NAMES,
        SERVE_BACKEND_API_VERSION,
        SERVE_BACKENDS_GROUP,
        RegisteredServeBackend,
        ServeBackend,
        ServeBackendDetection,
        ServeRequest,
        host_contract,
        host_prog,
        portable_backend,
        stop_quietly,
    )
    from sglang_backends.registry import ServeBackendRegistry

__all__ = [
    "RESERVED_SERVE_BACKEND_NAMES",
    "SERVE_BACKENDS_GROUP",
    "SERVE_BACKEND_API_VERSION",
    "DetectionReport",
    "RegisteredServeBackend",
    "ServeBackend",
    "ServeBackendDetection",
    "ServeBackendRegistry",
    "ServeRequest",
    "host_contract",
    "host_prog",
    "portable_backend",
    "stop_quietly",
]
__all__ += _errors.__all__

#: Where each name of ``__all__`` that is not an error lives, when not in the contract.
_LAZY = {
    "DetectionReport": "sglang_backends._core.detection",
    "ServeBackendRegistry": "sglang_backends.registry",
}


def __getattr__(name: str) -> Any:
    """Import the contract, the registry and their companions on first access (the errors
    are imported already)."""
    return _lazy.attribute(globals(), name, _LAZY, "sglang_backends.contract")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
