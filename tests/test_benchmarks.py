"""The benchmarks name only what the package has: they run rarely, so a moved or renamed
name would otherwise surface only when someone measures."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda path: path.name)
def test_every_name_a_benchmark_imports_from_the_package_exists(script):
    imported = [
        (node.module, alias.name)
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang_backends")
        for alias in node.names
    ]
    missing = [
        f"{module}.{name}"
        for module, name in imported
        if not hasattr(importlib.import_module(module), name)
    ]
    assert missing == []
