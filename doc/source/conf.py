"""Sphinx configuration for sglang-backends."""

import argparse
import os
from collections.abc import Callable, Iterable
from pathlib import Path

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
autodoc_preserve_defaults = True  # show "opts=OPTS", not the option objects
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False
intersphinx_mapping = {}

exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = "sglang-backends"

# The operator commands are documented by cliff's autoprogram-cliff directive.
autoprogram_cliff_application = "sglang-backends"

Formatter = Callable[[argparse.Action], Iterable[str]]

GENERATED = Path(__file__).parent / "_generated"


def write_serve_help(app: object) -> None:
    """Write ``sglang-backends serve --help`` as this environment prints it.

    ``serve`` is not a cliff command, so its general help (which lists the
    installed backends) is generated here and included with literalinclude.
    """
    from sglang_backends.host import default_builtins
    from sglang_backends.registry import ServeBackendRegistry
    from sglang_backends.usage import general_help

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"  # argparse wraps to the terminal; make it fixed
    try:
        text = general_help(ServeBackendRegistry(default_builtins()))
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    GENERATED.mkdir(exist_ok=True)
    target = GENERATED / "serve-help.txt"
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


def _plain_text_help() -> None:
    """Render the commands' help as the terminal shows it, not as reST.

    The commands' descriptions and epilogs are plain text laid out for the
    terminal (argparse's RawDescriptionHelpFormatter): show them as literal
    blocks, escape reST markup characters in option help (``*.conf``) and keep
    bracketed metavars whole.
    """
    import copy
    import re

    from cliff import sphinxext

    def literal(text: str | None) -> list[str]:
        if not text:
            return []
        return ["::", "", *("   " + line if line else "" for line in text.splitlines())]

    def escaped(format_action: Formatter) -> Formatter:
        def wrapper(action: argparse.Action) -> Iterable[str]:
            action = copy.copy(action)
            if isinstance(action.help, str):
                action.help = re.sub(r"([*`|_\\])", r"\\\1", action.help)
            if isinstance(action.metavar, str):  # "[MODEL] [ARGS ...]": cliff strips the ends
                action.metavar = action.metavar.replace("[", "").replace("]", "")
            return format_action(action)

        return wrapper

    sphinxext._format_description = lambda parser: literal(parser.description)
    sphinxext._format_epilog = lambda parser: literal(parser.epilog)
    sphinxext._format_optional_action = escaped(sphinxext._format_optional_action)
    sphinxext._format_positional_action = escaped(sphinxext._format_positional_action)


def setup(app: object) -> None:
    _plain_text_help()
    app.connect("builder-inited", write_serve_help)
