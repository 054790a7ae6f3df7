"""The general ``serve --help``: option names are never split across lines."""

from __future__ import annotations

import re

import pytest
from clitools import run_cli

from sglang_backends.settings import Settings
from sglang_backends.usage import metadata_help

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
