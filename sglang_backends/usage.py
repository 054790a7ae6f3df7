"""The general ``sglang-backends serve --help``, built from package metadata only.

Shown for ``--model-type auto``: it names every available backend and its
provider without importing a single plugin, and says how to reach a
backend's own help, since each backend parses its own arguments.
"""

from __future__ import annotations

import argparse
import textwrap

from sglang_backends.discovery import PluginStatus
from sglang_backends.dispatch import AUTO
from sglang_backends.registry import FALLBACK_BACKEND, ServeBackendRegistry

__all__ = ["PROG", "general_help", "usage_line"]

PROG = "sglang-backends serve"

_BUILTIN_NOTES = {
    "llm": "built-in, SGLang's LLM server (pip install sglang)",
    "diffusion": 'built-in, SGLang\'s diffusion server (pip install "sglang[diffusion]")',
}


def usage_line() -> str:
    """The one-line usage SGLang prints when a model path is missing."""
    return (
        f"Usage: {PROG} <model-name-or-path> [OPTIONS] "
        f"or {PROG} --model-path <model-name-or-path> [OPTIONS]"
    )


def _backend_lines(registry: ServeBackendRegistry) -> list[str]:
    rows = [(name, _BUILTIN_NOTES.get(name, "built-in")) for name in registry.builtin_names]
    for record in registry.plugins:
        plugin = record.plugin
        label = plugin.name
        if record.status is PluginStatus.DUPLICATE and plugin.distribution:
            label = f"{plugin.distribution}:{plugin.name}"
        version = f" {plugin.version}" if plugin.version else ""
        note = f"from {plugin.provider}{version}"
        if record.status is not PluginStatus.ENABLED:
            note += f" ({record.status.value})"
        rows.append((label, note))
    width = max(len(label) for label, _ in rows)
    return [f"  {label.ljust(width)}  {note}" for label, note in rows]


def general_help(registry: ServeBackendRegistry) -> str:
    """The help text for ``serve --help`` with automatic selection."""
    choices = ",".join((AUTO, *registry.available_names))
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
                *_backend_lines(registry),
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
