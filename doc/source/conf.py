"""Sphinx configuration for sglang-backends."""

import os
import subprocess
import sys
from pathlib import Path

from sphinx.application import Sphinx

project = "sglang-backends"
copyright = "sglang-backends authors"
author = "sglang-backends authors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "stevedore.sphinxext",
    "oslo_config.sphinxext",
]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_preserve_defaults = True  # show "opts=OPTS", not the option objects
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False
intersphinx_mapping = {}

# Readers copy options from these pages: "--config-file" must stay two
# hyphens, not become an en dash, and quotes must stay straight.
smartquotes = False

# _generated/ holds the command-line help written at build time (below):
# included by reference/cli.rst, not documents of their own.
exclude_patterns = ["_build", "_generated"]
html_theme = "alabaster"
html_title = "sglang-backends"

GENERATED = Path(__file__).parent / "_generated"


def _write(name: str, text: str) -> None:
    """Write ``_generated/NAME`` unless it already holds *text* (keeps rebuilds incremental)."""
    GENERATED.mkdir(exist_ok=True)
    target = GENERATED / name
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


def _environ() -> dict[str, str]:
    """This environment at a fixed width (argparse wraps to the terminal), without configuration."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OS_SERVE_BACKENDS__")}
    environ["COLUMNS"] = "80"
    return environ


def _cli_help(*args: str) -> str:
    """What ``sglang-backends ARGS`` prints, run as users run it."""
    result = subprocess.run(
        [sys.executable, "-m", "sglang_backends", *args],
        env=_environ(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"sglang-backends {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def write_command_help(app: Sphinx) -> None:
    """Write the commands' help exactly as the terminal shows it.

    It is plain text laid out for a terminal, not reStructuredText, so
    reference/cli.rst shows it as literal text: what a reader copies from
    the page is what the command accepts. ``serve --help`` lists the
    backends installed here. The operator commands get one section each,
    for every command registered in the ``sglang_backends.commands`` group,
    in ``_generated/commands.rst``.
    """
    from cliff.commandmanager import CommandManager

    from sglang_backends.commands.app import COMMAND_NAMESPACE

    _write("serve-help.txt", _cli_help("serve", "--help"))
    _write("global-help.txt", _cli_help("--help"))
    sections = []
    for name in sorted(CommandManager(COMMAND_NAMESPACE).get_command_names()):
        _write(f"{name}-help.txt", _cli_help("help", name))
        title = f"sglang-backends {name}"
        sections.append(
            f"{title}\n{'-' * len(title)}\n\n"
            f".. literalinclude:: /_generated/{name}-help.txt\n   :language: text\n"
        )
    _write("commands.rst", "\n".join(sections))


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", write_command_help)
