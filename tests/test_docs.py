"""The documentation as built: what readers copy from it, and what it tells plugin authors.

The docs are built with ``sphinx-build -W`` into a temporary directory when
Sphinx is installed (tox's ``docs`` environment has it and sets
``SGLANG_BACKENDS_REQUIRE_DOCS=1``, making its absence a failure there).
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from clitools import CLI, clean_environ

SOURCE = Path(__file__).resolve().parents[1] / "doc" / "source"

#: An option name whose leading hyphens became an en or em dash.
DASHED_OPTION = re.compile(r"[\u2013\u2014]-?[a-z][a-z-]+")


def test_testing_extra_brings_pytest():
    requirements = metadata.requires("sglang-backends") or []
    testing = [r for r in requirements if re.search(r"""extra\s*==\s*["']testing["']""", r)]
    assert [r.split(";")[0].strip() for r in testing] == ["pytest>=7.4"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The HTML documentation, built with warnings as errors."""
    if importlib.util.find_spec("sphinx") is None:
        if os.environ.get("SGLANG_BACKENDS_REQUIRE_DOCS"):
            pytest.fail("Sphinx is not installed: pip install -r doc/requirements.txt")
        pytest.skip("Sphinx is not installed (tox -e docs has it)")
    out = tmp_path_factory.mktemp("html")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", SOURCE, out],
        env=clean_environ(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return out


def _text(page: Path) -> str:
    """The text of an HTML page, markup removed."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_options_keep_their_hyphens(built):
    dashed = {
        f"{page.relative_to(built)}: {match}"
        for page in sorted(built.rglob("*.html"))
        for match in DASHED_OPTION.findall(_text(page))
    }
    # The plugin guide quotes the symptom once, on purpose.
    assert dashed == {"user/plugins.html: \u2013port"}
    assert "--config-file PATH" in _text(built / "reference" / "cli.html")
    assert "--config-file" in _text(built / "reference" / "config.html")
    assert "--model-type" in _text(built / "reference" / "config.html")


def _help(*args: str) -> str:
    """What ``sglang-backends ARGS`` prints at 80 columns, without configuration."""
    return subprocess.run(
        [CLI, *args],
        env={**clean_environ(os.environ), "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout


@pytest.mark.parametrize("args", [["serve", "--help"], ["--help"]], ids=" ".join)
def test_cli_reference_is_the_help_the_terminal_prints(built, args):
    """``serve`` (not a cliff command) and the global options are shown as printed."""
    page = _text(built / "reference" / "cli.html")
    missing = [line for line in _help(*args).splitlines() if line.strip() and line not in page]
    assert missing == []


#: Per command: words of its description, and a term its help defines.
COMMAND_TERMS = {
    "list": (["Columns:", "conflicts with a built-in", "DIST:NAME"], "Status"),
    "show": (["Fields:", "API version", "--config-dir"], "Requires model path"),
    "check": (["Result column:", "Exit status", "--jobs"], "crashed"),
    "detect": (["Verdict column:", "fallback", "[MODEL] [ARGS ...]"], "ambiguous"),
}

#: Per command: options whose entries readers look for, and its positional argument.
COMMAND_OPTIONS = {
    "list": (["--config-file PATH", "--config-dir DIR", "--enable NAME", "--disable NAME"], None),
    "show": (["--config-file PATH", "--enable NAME"], "NAME"),
    "check": (["--timeout SECONDS", "--jobs N", "--contract"], "NAME"),
    "detect": (["--detect-timeout SECONDS", "--timeout SECONDS"], "REQUEST"),
}


def _section(built: Path, name: str) -> str:
    """The HTML of the CLI reference's section for operator command *name*."""
    page = (built / "reference" / "cli.html").read_text(encoding="utf-8")
    start = page.find(f'<section id="{name}">')
    assert start >= 0, f"no section for {name!r}"
    return page[start : page.index("</section>", start)]


def test_every_registered_command_has_a_section(built):
    """cliff's directive documents each command of the group, none as another's plugin."""
    assert "This command is provided by" not in _text(built / "reference" / "cli.html")
    names = {ep.name for ep in metadata.entry_points(group="sglang_backends.commands")}
    assert names == set(COMMAND_TERMS)
    for name in names:
        assert re.match(rf'<section id="{name}">\s*<h\d>{name}<', _section(built, name))


@pytest.mark.parametrize("name", sorted(COMMAND_OPTIONS))
def test_command_section_documents_every_option(built, name):
    """Each option in the command's usage has an entry, with two hyphens and its value."""
    section = _section(built, name)
    text = html.unescape(re.sub(r"<[^>]+>", "", section))
    usage = _help("help", name).split("\n\n", 1)[0]
    options = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", usage)) - {"-h"}
    assert {"--config-file", "--config-dir", "--enable", "--disable", "-f"} <= options
    missing = [
        o
        for o in sorted(options)
        if f'id="cmdoption-sglang-backends-{name}-{o.lstrip("-")}"' not in section
    ]
    assert missing == []
    entries, positional = COMMAND_OPTIONS[name]
    for entry in entries:
        assert entry in text
    if positional:
        assert f'id="cmdoption-sglang-backends-{name}-arg-{positional}"' in section
    assert DASHED_OPTION.findall(text) == []


@pytest.mark.parametrize("name", sorted(COMMAND_TERMS))
def test_command_section_reads_as_its_help(built, name):
    """The description, definitions, examples and configuration notes, as reST renders them."""
    section = _section(built, name)
    text = html.unescape(re.sub(r"<[^>]+>", "", section))
    terminal = _help("help", name)
    [command] = metadata.entry_points(group="sglang_backends.commands", name=name)
    summary = (command.load().__doc__ or "").strip().splitlines()[0]
    assert summary in text
    words, term = COMMAND_TERMS[name]
    for word in words:
        assert word in text
        assert word in terminal
    # The aligned columns of the terminal became a definition list, not one run-on paragraph.
    assert f"<dt>{term}</dt>" in section
    examples = terminal.split("Examples::\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert examples and all(line.strip().startswith(f"sglang-backends {name}") for line in examples)
    assert "Examples::" not in text
    for line in examples:
        assert line.strip() in text
    assert "OS_SERVE_BACKENDS__ENABLED_BACKENDS=omni,vlm" in text
    assert "provided by" not in text


def test_plugin_list_shows_the_echo_summary(built):
    if importlib.util.find_spec("sglang_echo_backend") is None:
        assert not os.environ.get("SGLANG_BACKENDS_REQUIRE_EXAMPLE"), "the echo example is missing"
        pytest.skip("the echo example is not installed: pip install ./examples/echo-backend")
    page = _text(built / "reference" / "backends.html")
    assert "Echo backend: an OpenAI-style server that returns the prompt" in page
    assert "zero-argument factory" not in page


def test_plugin_guide_says_how_to_get_the_kit(built):
    """From the checkout or wheel SGLANG_BACKENDS names: the package is on no index yet."""
    page = _text(built / "user" / "plugins.html")
    assert '$ pip install "$SGLANG_BACKENDS[testing]"' in page
    assert '$ pip install "sglang-backends[testing]"' not in page
    assert '$ export SGLANG_BACKENDS="$PWD"' in page
