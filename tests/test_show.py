"""``sglang-backends show NAME``: one backend loaded and described, or one clean error line."""

from __future__ import annotations

import json

import pytest
from clitools import run_cli

OMNI = """
from sglang_backends import ServeBackend, ServeBackendDetection

def factory():
    \"\"\"Omni runtime: serves any-to-any models.

    More text that show leaves out.
    \"\"\"
    return ServeBackend(
        api_version=1,
        run=lambda request: None,
        detect=lambda request: ServeBackendDetection.UNKNOWN,
        requires_model_path=False,
    )
"""


@pytest.fixture
def omni(site):
    site.install(
        "omni-runtime",
        version="2.3.1",
        entry_points={"omni": "omni_plugin:factory"},
        modules={"omni_plugin.py": OMNI},
    )
    return site


def test_show_loads_a_plugin_and_reports_its_contract(omni):
    result = run_cli(omni, "show", "-f", "json", "omni")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    load_seconds = shown.pop("Load seconds")
    assert shown == {
        "Name": "omni",
        "Origin": "plugin",
        "Distribution": "omni-runtime",
        "Version": "2.3.1",
        "Target": "omni_plugin:factory",
        "API version": 1,
        "Has detector": True,
        "Requires model path": False,
        "Summary": "Omni runtime: serves any-to-any models.",
    }
    assert 0 <= load_seconds < 30


def test_show_a_built_in(site):
    result = run_cli(site, "show", "-f", "json", "diffusion")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["Origin"] == "built-in"
    assert shown["Target"] == "sglang_backends.host:run_diffusion"
    assert shown["Has detector"] is True
    assert shown["Distribution"] is None


def test_show_picks_one_provider_of_a_duplicate(omni):
    omni.install("omni-fork", version="0.1", entry_points={"omni": "omni_plugin:factory"})
    duplicate = run_cli(omni, "show", "omni")
    assert duplicate.returncode == 1
    [line] = duplicate.stderr.strip().splitlines()
    assert "Multiple distributions register serve backend 'omni'" in line
    picked = run_cli(omni, "show", "-f", "json", "omni-fork:omni")
    assert picked.returncode == 0, picked.stderr
    assert json.loads(picked.stdout)["Version"] == "0.1"


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (
            ["nope"],
            "Unknown serve backend 'nope'. Available values: auto, llm, diffusion, {plugins}.",
        ),
        (["--disable", "omni", "omni"], "is disabled: it is in the disabled list"),
        (["--enable", "other", "omni"], "is disabled: it is not in the enabled list"),
        (["broken"], "Failed to load serve backend 'broken' from broken-runtime: boom"),
    ],
)
def test_show_errors_are_one_line(omni, args, phrase, preinstalled):
    phrase = phrase.format(plugins=", ".join(sorted({"broken", "omni", *preinstalled})))
    omni.install(
        "broken-runtime",
        entry_points={"broken": "broken_plugin:factory"},
        modules={"broken_plugin.py": "raise ImportError('boom')\n"},
    )
    result = run_cli(omni, "show", *args)
    assert result.returncode == 1
    lines = [line for line in result.stderr.strip().splitlines() if "not installed" not in line]
    assert len(lines) == 1
    assert phrase in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
