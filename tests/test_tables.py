"""Table and value output fits a terminal: long cells shortened, empty values blank.

JSON and YAML, read by programs, keep every character and ``null``.
"""

from __future__ import annotations

import json

import pytest
from clitools import run_cli

GOOD = """
from sglang_backends import ServeBackend

def factory():
    return ServeBackend(api_version=1, run=lambda request: None)
"""

#: 32 requirements nothing installed meets, as sglang-omni 0.1.9's beside SGLang 0.5.23.
UNMET = [f"missing-package-{index:02d}==1.{index}" for index in range(32)]


@pytest.fixture
def heavy(site):
    site.install(
        "heavy-runtime",
        entry_points={"heavy": "heavy_plugin:factory"},
        modules={"heavy_plugin.py": GOOD},
        requires=UNMET,
    )
    return site


@pytest.mark.parametrize(("command", "column"), [("list", "Requirements"), ("check", "Detail")])
def test_a_long_cell_is_shortened_with_a_pointer_to_the_whole(heavy, command, column):
    table = run_cli(heavy, command, "-f", "table", "--enable", "heavy")
    assert table.returncode == 0, table.stderr
    widest = max(len(line) for line in table.stdout.splitlines())
    assert widest < 300, table.stdout
    [row] = [line for line in table.stdout.splitlines() if "heavy-runtime" in line]
    assert "unmet" in row
    assert "missing-package-31" not in row
    assert f"more; see {command} -f json)" in row

    value = run_cli(heavy, command, "-f", "value", "-c", column, "--enable", "heavy")
    [cell] = [line for line in value.stdout.splitlines() if "unmet" in line]
    assert len(cell) <= 100 and cell.endswith(f"; see {command} -f json)"), cell
    left_out = int(cell.rsplit("(+", 1)[1].split(" more", 1)[0])
    assert left_out == 32 - cell.count("(not installed)")

    whole = run_cli(heavy, command, "-f", "json", "--enable", "heavy")
    [found] = [r for r in json.loads(whole.stdout) if r.get("Distribution") == "heavy-runtime"]
    assert all(f"{requirement} (not installed)" in found[column] for requirement in UNMET)


def test_show_keeps_every_requirement(heavy):
    result = run_cli(heavy, "show", "heavy", "-f", "value", "-c", "Unmet requirements")
    assert result.returncode == 0, result.stderr
    assert all(f"{requirement} (not installed)" in result.stdout for requirement in UNMET)


@pytest.mark.parametrize("command", [["list"], ["check"], ["show", "llm"]])
def test_built_ins_have_blank_cells_not_none_and_json_keeps_null(site, command):
    table = run_cli(site, *command, "-f", "table")
    assert table.returncode == 0, table.stderr
    assert "None" not in table.stdout
    value = run_cli(site, *command, "-f", "value", "-c", "Distribution", "-c", "Version")
    assert "None" not in value.stdout
    data = json.loads(run_cli(site, *command, "-f", "json").stdout)
    built_in = data if isinstance(data, dict) else next(r for r in data if r["Name"] == "llm")
    assert built_in["Distribution"] is None and built_in["Version"] is None
