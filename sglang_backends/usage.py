"""The general ``sglang-backends serve --help``, built from package metadata only.

Shown for ``--model-type auto``: it names every available backend and its
provider without importing a single plugin, and says how to reach a
backend's own help, since each backend parses its own arguments. A plugin
claiming a built-in name makes every ``serve`` fail, but not this help:
:func:`metadata_help` prints it and reports the clash as a warning.

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Collection, Sequence
from typing import Any

from sglang_backends.detection import FALLBACK_BACKEND
from sglang_backends.dispatch import AUTO
from sglang_backends.selection import PluginRecord, PluginStatus
from sglang_backends.settings import Settings

__all__ = [
    "LOG_FORMAT",
    "PROG",
    "conflict_warnings",
    "metadata_help",
    "printable",
    "usage_line",
]

PROG = "sglang-backends serve"

#: How every command (``serve`` and the operator commands) shows a log record on
#: stderr: the message alone, as cliff does, so a warning reads the same
#: whichever command gave it. Each message says what it is about by itself.
LOG_FORMAT = "%(message)s"

_BUILTIN_NOTES = {
    "llm": "built-in, SGLang's LLM server (pip install sglang)",
    "diffusion": 'built-in, SGLang\'s diffusion server (pip install "sglang[diffusion]")',
}


# C0 and C1 controls, DEL, and the bidirectional overrides that reorder a terminal line.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(value: Any) -> Any:
    """*value* with control characters escaped (``\\x1b``) if it is a string.

    Package metadata is untrusted: a distribution name, a version, an entry
    point or a docstring may carry terminal escape sequences. Whatever shows
    it to a terminal as text passes it through here first.
    """
    if not isinstance(value, str):
        return value
    return _UNPRINTABLE.sub(_escape, value)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def usage_line() -> str:
    """The one-line usage SGLang prints when a model path is missing."""
    return (
        f"Usage: {PROG} <model-name-or-path> [OPTIONS] "
        f"or {PROG} --model-path <model-name-or-path> [OPTIONS]"
    )


def _backend_lines(builtin_names: Sequence[str], records: Sequence[PluginRecord]) -> list[str]:
    rows = [(name, _BUILTIN_NOTES.get(name, "built-in")) for name in builtin_names]
    for record in records:
        plugin = record.plugin
        label = plugin.name
        if record.status is PluginStatus.DUPLICATE and plugin.distribution:
            label = f"{plugin.distribution}:{plugin.name}"
        version = f" {plugin.version}" if plugin.version else ""
        note = f"from {plugin.provider}{version}"
        if record.status is not PluginStatus.ENABLED:
            note += f" ({record.status.value})"
        rows.append((label, note))
    rows = [(printable(label), printable(note)) for label, note in rows]
    width = max(len(label) for label, _ in rows)
    return [f"  {label.ljust(width)}  {note}" for label, note in rows]


def conflict_warnings(records: Collection[PluginRecord]) -> list[str]:
    """One line per plugin claiming a built-in or reserved name: who, and how to fix it."""
    return [
        printable(
            f"Plugin {record.plugin.name!r} from {record.plugin.provider}"
            f"{' ' + record.plugin.version if record.plugin.version else ''} claims the built-in "
            f"name {record.plugin.name!r}; every serve fails until you uninstall it "
            f"(pip uninstall {record.plugin.distribution or '...'}) or add {record.plugin.name!r} "
            "to disabled_backends"
        )
        for record in records
        if record.status is PluginStatus.CONFLICT
    ]


def metadata_help(settings: Settings) -> tuple[str, list[str]]:
    """The general help under *settings*, from package metadata alone, and its warnings.

    Unlike a registry, this never refuses: a plugin that claims a built-in
    name is listed as conflicting and reported in the warnings (see
    :func:`conflict_warnings`), so ``serve --help`` still works.

    :returns: the help text and the warning lines to log.
    """
    from sglang_backends.discovery import discover
    from sglang_backends.host import default_builtins
    from sglang_backends.selection import inventory

    builtin_names = tuple(default_builtins())
    records = inventory(
        discover(), builtin_names, enabled=settings.enabled, disabled=settings.disabled
    )
    usable = (PluginStatus.ENABLED, PluginStatus.DUPLICATE)
    plugins = sorted({r.plugin.name for r in records if r.status in usable})
    text = _render((*builtin_names, *plugins), builtin_names, records)
    return text, conflict_warnings(records)


def _render(
    available: Sequence[str], builtin_names: Sequence[str], records: Sequence[PluginRecord]
) -> str:
    """The help text: usage, serve's own options, then every backend and its provider."""
    choices = printable(",".join((AUTO, *available)))
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=(
            f"{PROG} [--config-file PATH] [--config-dir DIR] [--debug] [MODEL] "
            f"[--model-type {{{choices}}}] [BACKEND ARGS...]"
        ),
        description=textwrap.fill(
            "Serve a model with the backend chosen by --model-type, which may come "
            "anywhere. --config-file, --config-dir and --debug are serve's only "
            "before MODEL and any backend argument; every other argument is passed "
            "to the backend verbatim, in order, which parses it; a MODEL given "
            "first is passed as --model-path MODEL.",
            width=78,
        ),
        epilog="\n".join(
            [
                "backends:",
                *_backend_lines(builtin_names, records),
                "",
                "Each backend has its own options; show them with:",
                f"  {PROG} --model-type NAME --help",
            ]
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    parser.add_argument("MODEL", nargs="?", help="model path or hub id (same as --model-path)")
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    parser.add_argument(
        "--model-type",
        metavar=f"{{{choices}}}",
        default=AUTO,
        help=(
            f"the serve backend (default: {AUTO}: the one backend whose detector "
            f"claims the model, else {FALLBACK_BACKEND}); DIST:NAME picks one provider"
        ),
    )
    parser.add_argument(
        "--config-file",
        metavar="PATH",
        action="append",
        help="read backend selection settings from this file (repeatable)",
    )
    parser.add_argument(
        "--config-dir", metavar="DIR", action="append", help="read every *.conf file in DIR"
    )
    parser.add_argument(
        "--debug", action="store_true", help="log at DEBUG level and show tracebacks"
    )
    return parser.format_help()
