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
    "cliff.sphinxext",
    "oslo_config.sphinxext",
]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False
intersphinx_mapping = {}

# Readers copy options from these pages: "--config-file" must stay two
# hyphens, not become an en dash, and quotes must stay straight.
smartquotes = False

# _generated/ holds the command-line help written at build time (below):
# included by reference/cli.rst, not documents of their own.
exclude_patterns = ["_build", "_generated"]

# The operator commands (reference/cli.rst) are documented by cliff's
# autoprogram-cliff directive from their parsers: their descriptions, epilogs
# and option help are written as reStructuredText that also reads well in a
# terminal. The commands ship with the application, so cliff's "provided by
# the ... plugin" sentence does not apply.
autoprogram_cliff_application = "sglang-backends"
autoprogram_cliff_app_dist_name = "sglang-backends"

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
    """Write the help of what cliff's directive cannot document, as the terminal shows it.

    ``serve`` is not a cliff command; its general help lists the backends
    installed here. The global options are the cliff application's. Both
    are plain text laid out for a terminal, so reference/cli.rst shows them
    as literal text.
    """
    _write("serve-help.txt", _cli_help("serve", "--help"))
    _write("global-help.txt", _cli_help("--help"))


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", write_command_help)
