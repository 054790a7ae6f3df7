"""Lazy public faces (PEP 562): a name of a package's ``__all__`` imported from its home on
first access, so that importing the face costs only what is used."""

from __future__ import annotations

import importlib

# Typing itself costs milliseconds a plugin need not pay.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping
    from typing import Any


def attribute(
    face: MutableMapping[str, Any], name: str, homes: Mapping[str, str], home: str
) -> Any:
    """*name* of the package whose globals are *face*, imported from ``homes[name]`` (else
    *home*) and kept there, so that it is imported once.

    :raises AttributeError: *name* is not in the package's ``__all__``.
    """
    if name not in face["__all__"]:
        raise AttributeError(f"module {face['__name__']!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(homes.get(name, home)), name)
    face[name] = value
    return value
