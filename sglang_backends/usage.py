"""What every command shows of the installed backends, from package metadata only.

The general ``serve --help`` (:func:`metadata_help`), from the
inventory (:mod:`~sglang_backends.survey`) alone, which still prints when a
plugin claims a built-in name, with a warning; and how every command keeps package
metadata from a terminal (:func:`printable`).

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

import argparse
import logging
import re
import textwrap
import traceback
from collections.abc import Sequence
from typing import Any

from sglang_backends.dispatch import PROG
from sglang_backends.host import BUILTIN_NOTES
from sglang_backends.names import AUTO, FALLBACK_BACKEND
from sglang_backends.selection import PluginRecord, PluginStatus
from sglang_backends.settings import Settings
from sglang_backends.survey import take_inventory

__all__ = [
    "LOG_FORMAT",
    "PrintableRecords",
    "metadata_help",
    "printable",
    "printable_traceback",
    "usage_line",
]

#: How every command (``serve`` and the operator commands) shows a log record on
#: stderr: the message alone, as cliff does, so a warning reads the same
#: whichever command gave it. Each message says what it is about by itself.
LOG_FORMAT = "%(message)s"

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


class _UnbrokenOptionsFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's raw-description formatter, never breaking a line at a hyphen.

    argparse wraps option help with :func:`textwrap.wrap`, which breaks
    hyphenated words, so ``--model-path`` could be printed as
    ``--model-`` and ``path`` on two lines: copied from the terminal, it
    becomes a wrong option. argparse offers no public way to change how it
    wraps; ``_split_lines`` is the one method to override (its signature has
    been stable since Python 3.2), and tests/test_usage.py checks the
    result at every width.
    """

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class PrintableRecords(logging.Filter):
    """A logging filter passing each message through :func:`printable`.

    Log lines quote package metadata (a distribution's name, an entry point's
    name or target, a version) and what plugins raised: whatever a handler
    writes to a terminal goes through it. A traceback keeps its lines, each
    escaped (see :func:`printable_traceback`).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = printable(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = printable_traceback(record.exc_info[1]).rstrip("\n")
        return True


def printable_traceback(exc: BaseException | None) -> str:
    """*exc*'s traceback as :func:`traceback.print_exception` writes it, each line escaped.

    Its messages quote package metadata too; the lines stay lines.
    """
    lines = "".join(traceback.format_exception(exc)).splitlines()
    return "".join(f"{printable(line)}\n" for line in lines)


def usage_line() -> str:
    """The one-line usage SGLang prints when a model path is missing."""
    return (
        f"Usage: {PROG} <model-name-or-path> [OPTIONS] "
        f"or {PROG} --model-path <model-name-or-path> [OPTIONS]"
    )


def _backend_lines(records: Sequence[PluginRecord]) -> list[str]:
    rows = list(BUILTIN_NOTES.items())
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


def metadata_help(settings: Settings) -> str:
    """The general help under *settings*; the inventory warns of what it shows (a name in
    a list that is not installed, a plugin claiming a built-in name).
    """
    inventory = take_inventory(settings, dict.fromkeys(BUILTIN_NOTES), warn_conflicts=True)
    return _render(inventory.available_names, inventory.records)


def _render(available: Sequence[str], records: Sequence[PluginRecord]) -> str:
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
            break_on_hyphens=False,  # never "--model-" then "path"
        ),
        epilog="\n".join(
            [
                "backends:",
                *_backend_lines(records),
                "",
                "Each backend has its own options; show them with:",
                f"  {PROG} --model-type NAME --help",
            ]
        ),
        formatter_class=_UnbrokenOptionsFormatter,
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
