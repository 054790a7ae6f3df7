"""The general ``serve --help``: option names are never split across lines."""

from __future__ import annotations

import re

import pytest
from clitools import run_cli

from sglang_backends._core.settings import Settings
from sglang_backends._serve.help import metadata_help

#: Every option name the general help mentions.
OPTIONS = ("--model-path", "--model-type", "--config-file", "--config-dir")
#: A line ending inside a hyphenated word: ``--model-`` with ``path`` on the next line.
SPLIT = re.compile(r"[\w-]-\n\s*\w")


@pytest.mark.parametrize("columns", range(20, 161, 7))
def test_no_option_name_is_split_at_any_width(site, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    text = metadata_help(Settings())
    assert SPLIT.search(text) is None, text
    for option in OPTIONS:
        assert option in text


def test_serve_help_keeps_model_path_whole(site):
    """The reported case: ``--model-`` then ``path`` at 80 columns."""
    result = run_cli(site, "serve", "--help", env={"COLUMNS": "80"}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "--model-\n" not in result.stdout
    assert SPLIT.search(result.stdout) is None
    assert "passed as --model-path MODEL" in " ".join(result.stdout.split())


#: Names argparse would read as %-formats: in the usage line (always formatted) and in
#: the backends list (formatted when it holds ``%(prog)``).
PERCENT_NAMES = ("50%off", "%(prog)s-runtime")


@pytest.mark.parametrize(
    "args", [("serve", "--help"), ("help", "serve")], ids=["serve-help", "help-serve"]
)
def test_a_percent_sign_in_a_name_is_printed_verbatim(site, args):
    for name in PERCENT_NAMES:
        site.install(f"dist-{len(name)}", entry_points={name: "nowhere:factory"})
    result = run_cli(site, *args, env={"COLUMNS": "200"}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    usage, *_ = result.stdout.split("\n\n")
    backends = result.stdout.split("backends:\n", 1)[1]
    for name in PERCENT_NAMES:
        assert name in " ".join(usage.split()), usage
        [line] = [line for line in backends.splitlines() if line.startswith(f"  {name} ")]
        assert f"from dist-{len(name)} 1.0" in line
