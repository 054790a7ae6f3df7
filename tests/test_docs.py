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


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--help"],
        ["--help"],
        *(["help", name] for name in ("list", "show", "check", "detect")),
    ],
    ids=" ".join,
)
def test_cli_reference_is_the_help_the_terminal_prints(built, args):
    help_text = subprocess.run(
        [CLI, *args],
        env={**clean_environ(os.environ), "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    page = _text(built / "reference" / "cli.html")
    missing = [line for line in help_text.splitlines() if line.strip() and line not in page]
    assert missing == []
    assert "This command is provided by" not in page


def test_plugin_list_shows_the_echo_summary(built):
    if importlib.util.find_spec("sglang_echo_backend") is None:
        assert not os.environ.get("SGLANG_BACKENDS_REQUIRE_EXAMPLE"), "the echo example is missing"
        pytest.skip("the echo example is not installed: pip install ./examples/echo-backend")
    page = _text(built / "reference" / "backends.html")
    assert "Echo backend: an OpenAI-style server that returns the prompt" in page
    assert "zero-argument factory" not in page


def test_plugin_guide_says_how_to_get_the_kit(built):
    page = _text(built / "user" / "plugins.html")
    assert 'pip install "sglang-backends[testing]"' in page
