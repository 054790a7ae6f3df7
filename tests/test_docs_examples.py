"""The API reference's opening example runs as written and prints what its comments say."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "doc" / "source" / "reference" / "api.rst"


def _first_python_block(text: str) -> str:
    match = re.search(r"\.\. code-block:: python\n\n((?:   .*\n|\n)+)", text)
    assert match, "the API reference opens with a Python example"
    return "\n".join(line[3:] for line in match.group(1).splitlines()).strip() + "\n"


def test_the_api_reference_example_prints_what_it_says(tmp_path):
    pytest.importorskip("sglang_echo_backend")  # the README's install brings the example plugin
    code = _first_python_block(API.read_text(encoding="utf-8"))
    # The comments say what each print shows: "# echo sglang-echo-backend", ...
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    names = ast.literal_eval(lines[0])
    assert names[:2] == ["llm", "diffusion"] and "echo" in names
    assert lines[1] == "echo sglang-echo-backend"
    assert lines[2] == "examples/echo-backend/models/echo-tiny"
    assert lines[3] == "echo"
    assert "echo match" in lines[4:]
    assert "diffusion no_match" in lines[4:]
    assert "echo sglang-echo-backend enabled" in lines
