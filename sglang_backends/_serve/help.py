"""What every command shows of the installed backends, from package metadata only.

The general ``serve --help`` (:func:`metadata_help`), from the
inventory (:mod:`~sglang_backends._core.inventory`) alone, which still prints when a
plugin claims a built-in name, with a warning.
"""

from __future__ import annotations

import argparse
import textwrap

from sglang_backends._core import selection
from sglang_backends._core.console import printable
from sglang_backends._core.inventory import Inventory, take_inventory
from sglang_backends._core.names import AUTO, PROG
from sglang_backends._core.settings import Settings
from sglang_backends._serve.argv import HELP, MODEL_TYPE, SERVE_OPTIONS
from sglang_backends._sglang.installed import BUILTIN_NOTES, install_hint


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


def _backend_lines(inventory: Inventory) -> list[str]:
    """One line per backend; a duplicate's labelled with the ``DIST:NAME`` that picks it."""
    rows = [(name, f"{note} ({install_hint(name)})") for name, note in BUILTIN_NOTES.items()]
    for record in inventory.records:
        plugin = record.plugin
        label = plugin.name
        if record.status is selection.PluginStatus.DUPLICATE:
            label = selection.qualified(plugin, inventory.discovered) or label
        note = f"from {plugin.release}"
        if record.status is not selection.PluginStatus.ENABLED:
            note += f" ({record.status.value})"
        rows.append((label, note))
    rows = [(printable(label), printable(note)) for label, note in rows]
    width = max(len(label) for label, _ in rows)
    return [f"  {label.ljust(width)}  {note}" for label, note in rows]


def metadata_help(settings: Settings) -> str:
    """The general help under *settings*: usage, serve's own options, then every backend
    and its provider. The inventory warns of what it shows (a name in a list that is not
    installed, a plugin claiming a built-in name).

    Names are printed as they come: argparse %-formats the usage line (and an
    epilog holding ``%(prog)``), so the usage's ``%`` are doubled and the
    backends list is added after argparse's text rather than given to it.
    """
    inventory = take_inventory(settings, dict.fromkeys(BUILTIN_NOTES), warn_conflicts=True)
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=textwrap.fill(
            "Serve a model with the backend chosen by --model-type, which may come "
            "anywhere. --config-file, --config-dir and --debug are serve's only "
            "before MODEL and any backend argument; every other argument is passed "
            "to the backend verbatim, in order, which parses it; a MODEL given "
            "first is passed as --model-path MODEL.",
            width=78,
            # Never "--model-" then "path".
            break_on_hyphens=False,
        ),
        formatter_class=_UnbrokenOptionsFormatter,
        add_help=False,
    )
    parser.add_argument("MODEL", nargs="?", help="model path or hub id (same as --model-path)")
    # The leading run's options, and those taken anywhere.
    usage: dict[bool, list[str]] = {False: [], True: []}
    for option in SERVE_OPTIONS:
        metavar = option.metavar
        # --model-type's value shows the backend names.
        if option is MODEL_TYPE:
            metavar = f"{{{printable(','.join((AUTO, *inventory.available_names)))}}}"
        if metavar is None:
            parser.add_argument(*option.flags, action="store_true", help=option.help)
        else:
            parser.add_argument(*option.flags, metavar=metavar, help=option.help)
        if option is not HELP:
            shown = option.flags[-1] if metavar is None else f"{option.flags[-1]} {metavar}"
            usage[option.anywhere].append(f"[{shown}]")
    leading = " ".join(usage[False])
    anywhere = " ".join(usage[True])
    parser.usage = f"{PROG} {leading} [MODEL] {anywhere} [BACKEND ARGS...]".replace("%", "%%")
    epilog = [
        "backends:",
        *_backend_lines(inventory),
        "",
        "Each backend has its own options; show them with:",
        f"  {PROG} --model-type NAME --help",
    ]
    return "\n".join([parser.format_help(), *epilog, ""])
