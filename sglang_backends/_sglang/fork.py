"""An ``sglang`` package that is not SGLang (a fork, or SGLang before its serve-backend
API): which distribution provides it, and how to get SGLang without overwriting it.

Read only on an error's path: the provider is looked up in every distribution's file list.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os

from sglang_backends._core.discovery import normalize_distribution
from sglang_backends._sglang.installed import (
    INSTALL_COMMANDS,
    has_serve_backend_api,
    sglang_package,
)
from sglang_backends.contract import SGLANG_CONTRACT_MODULE

LOG = logging.getLogger(__name__)


def sglang_unusable(builtin: str | None = None) -> str | None:
    """Why an installed ``sglang`` package is not SGLang as a host, naming the distribution
    that provides it, and with *builtin*, how to get SGLang for it without overwriting that
    package; ``None`` when there is no such package, or it is SGLang's.

    The provider is looked up only here (it reads every distribution's file list): an
    error's path, not serve's.
    """
    places = sglang_package()
    if places is None or has_serve_backend_api(places):
        return None
    found = _provider(places)
    source = " ".join(found) if found else "a distribution its metadata does not name"
    why = (
        f"the installed 'sglang' package (from {source}) lacks SGLang's serve-backend API "
        f"({SGLANG_CONTRACT_MODULE}, SGLang 0.5.18 or later)"
    )
    return why if builtin is None else f"{why}; {_advice(builtin, found)}"


def _provider(places: list[str]) -> tuple[str, str] | None:
    """The name and version of the distribution whose files are the ``sglang`` package at
    *places*; else the first whose ``RECORD`` lists an ``sglang`` package or whose
    ``top_level.txt`` declares one (an editable install: its ``RECORD`` lists a ``.pth``)."""
    found = {os.path.realpath(place) for place in places}
    first = None
    for dist in importlib.metadata.distributions():
        try:
            declared = (dist.read_text("top_level.txt") or "").split()
            ships = "sglang" in declared or any(p.parts[0] == "sglang" for p in dist.files or ())
        except Exception as exc:  # noqa: BLE001 - an unreadable RECORD names nothing
            LOG.debug("Cannot read the files of %r: %s", dist, exc)
            continue
        if not ships:
            continue
        named = (dist.metadata["Name"], dist.version or "")
        first = first or named
        if os.path.realpath(str(dist.locate_file("sglang"))) in found:
            return named
    return first


def _advice(name: str, found: tuple[str, str] | None) -> str:
    """How to get SGLang for built-in *name* without overwriting *found*'s ``sglang``."""
    command = INSTALL_COMMANDS[name]
    if found is not None and normalize_distribution(found[0]) == "sglang":
        # SGLang itself, before 0.5.18
        return f"upgrade it with: {command.replace('pip install', 'pip install -U', 1)}"
    whose = f"{found[0]}'s" if found else "that"
    return (
        f"installing SGLang here would overwrite {whose} 'sglang' package, so install it in "
        f"an environment of its own: python -m venv sglang-env && sglang-env/bin/{command}"
    )
