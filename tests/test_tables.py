"""Table and value output fits a terminal: long cells shortened, empty values blank.

JSON and YAML, read by programs, keep every character and ``null``.
"""

from __future__ import annotations

import json

import pytest
from clitools import run_cli
from sglang_standin import install_sglang

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


#: A cause long enough that the lead naming the plugin would crowd it out of a 100-character
#: cell, with a ";" inside one sentence.
CAUSE = "libcuda.so.12: cannot open shared object file; install the CUDA 12 driver (r550+)"
#: What a failed load's message opens with, which the row's Name and Distribution say.
LEAD = "Failed to load serve backend 'cuda' from cuda-runtime: "


@pytest.fixture
def cuda(site):
    site.install(
        "cuda-runtime",
        entry_points={"cuda": "cuda_plugin:factory"},
        modules={"cuda_plugin.py": f"raise ImportError({CAUSE!r})\n"},
    )
    return site


@pytest.mark.parametrize(
    ("command", "extra"), [("check", ()), ("detect", ("--", "/models/cuda-7b"))]
)
def test_a_table_leaves_out_the_lead_its_row_says_and_keeps_the_cause(cuda, command, extra):
    for formatter in ("table", "value"):
        shown = run_cli(cuda, command, "-f", formatter, *extra, env={"COLUMNS": "250"})
        [row] = [line for line in shown.stdout.splitlines() if "cuda-runtime" in line]
        assert CAUSE in row, row
        assert "Failed to load" not in row, row
    whole = run_cli(cuda, command, "-f", "json", *extra)
    [found] = [r for r in json.loads(whole.stdout) if r.get("Distribution") == "cuda-runtime"]
    assert found["Detail"] == LEAD + CAUSE


def test_the_lead_stays_where_the_columns_saying_it_are_not_shown(cuda):
    value = run_cli(cuda, "check", "-f", "value", "-c", "Detail")
    [cell] = [line for line in value.stdout.splitlines() if "cuda" in line]
    assert cell.startswith(LEAD.rstrip()), cell
    assert cell.endswith("… (see check -f json)"), cell


def test_only_a_lists_items_are_counted_never_a_sentence_split_at_a_semicolon(site):
    cause = f"{CAUSE}; {CAUSE.replace('12', '13')}"
    site.install(
        "long-runtime",
        entry_points={"long": "long_plugin:factory"},
        modules={"long_plugin.py": f"raise ImportError({cause!r})\n"},
    )
    columns = ("-c", "Name", "-c", "Distribution", "-c", "Detail")
    value = run_cli(site, "check", "-f", "value", *columns)
    [cell] = [line for line in value.stdout.splitlines() if "long-runtime" in line]
    assert cell.endswith("… (see check -f json)"), cell
    assert "more;" not in cell


def test_check_contract_says_sglang_refused_a_plugin_it_was_asked_of(site, install_backend):
    install_sglang(site)
    install_backend("plain-runtime", "plainrt")  # sglang_backends' ServeBackend, not SGLang's
    checked = run_cli(site, "check", "--contract", "plainrt", "-f", "json")
    [row] = json.loads(checked.stdout)
    assert row["Detail"].startswith("SGLang's registry refuses serve backend 'plainrt'"), row
    assert row["SGLang"] == "refused"


def test_check_contract_says_sglang_was_not_asked_of_a_plugin_breaking_ours(site, install_backend):
    install_sglang(site)
    install_backend("raising-runtime", "raiser", detect="raise RuntimeError('boom')")
    checked = run_cli(site, "check", "--contract", "raiser", "-f", "json")
    [row] = json.loads(checked.stdout)
    assert row["Result"] == "error", row
    assert row["SGLang"] == "not checked: contract broken"
