"""One inventory per command: installed distributions read once, each warning given once.

Every command (list, show, check, detect, serve and its help) takes its inventory with
:func:`~sglang_backends._core.inventory.take_inventory`; a registry it builds reuses it. The
commands run for real, in a subprocess against a site of installed distributions, with
:func:`importlib.metadata.distributions` (what every metadata scan starts from) counted.
"""

from __future__ import annotations

import importlib.metadata
import logging
import subprocess
import sys

import pytest
from clitools import clean_environ

from sglang_backends import errors
from sglang_backends._core.inventory import take_inventory
from sglang_backends._core.settings import Settings
from sglang_backends._sglang.builtins import default_builtins
from sglang_backends.registry import ServeBackendRegistry

#: Runs ``sglang-backends ARGV`` in this interpreter, counting metadata scans.
COUNTED = """
import atexit, importlib.metadata, sys
scans = []
real = importlib.metadata.distributions
def counted(**kwargs):
    scans.append(1)
    return real(**kwargs)
importlib.metadata.distributions = counted
atexit.register(lambda: print(f"SCANS {{len(scans)}}", file=sys.stderr, flush=True))
from sglang_backends._cli import main
sys.exit(main({argv!r}))
"""

TYPO = "'omnii' in the enabled list is not installed"
REFUSAL = "cannot replace reserved or built-in backends: llm (from llm-impostor)"
CONFLICT = "claims the built-in name 'llm'"

COMMANDS = [
    ["list"],
    ["show", "omni"],
    ["check"],
    ["detect", "/m"],
    ["serve", "--help"],
    ["serve", "--model-type", "omni", "--help"],
]


@pytest.fixture
def omni(site, install_backend):
    install_backend("omni-runtime", "omni", detect="return ServeBackendDetection.NO_MATCH")
    return site


@pytest.fixture
def impostor(omni, install_backend):
    """omni, and a plugin claiming the built-in name ``llm``."""
    install_backend("llm-impostor", "llm", version="6.6")
    return omni


def counted_run(site, argv, **env: str) -> tuple[int, subprocess.CompletedProcess[str]]:
    """Run ``sglang-backends ARGV`` seeing *site*; the metadata scans it made, and the run."""
    environ = {**clean_environ(site.environ()), **env}
    environ["XDG_CACHE_HOME"] = str(site.path.parent / "cache")
    result = subprocess.run(
        [sys.executable, "-c", COUNTED.format(argv=list(argv))],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    [scans] = [line for line in result.stderr.splitlines() if line.startswith("SCANS ")]
    return int(scans.removeprefix("SCANS ")), result


def lines_with(text: str, result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if text in line]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_each_command_reads_metadata_once_and_warns_of_a_typo_once(omni, argv):
    scans, result = counted_run(omni, argv, OS_SERVE_BACKENDS__ENABLED_BACKENDS="omni,omnii")
    assert result.returncode in (0, 1), result.stderr  # detect's llm fallback needs SGLang
    assert len(lines_with(TYPO, result)) == 1, result.stderr
    assert scans == 1, result.stderr


@pytest.mark.parametrize(
    "argv",
    [["show", "omni"], ["detect", "/m"], ["serve", "--model-type", "omni", "--help"]],
    ids=" ".join,
)
def test_a_command_refusing_a_conflict_says_it_once_after_the_other_warnings(impostor, argv):
    scans, result = counted_run(impostor, argv, OS_SERVE_BACKENDS__DISABLED_BACKENDS="omnii")
    assert result.returncode == 1, result.stderr
    assert len(lines_with("'omnii' in the disabled list", result)) == 1, result.stderr
    [refusal] = lines_with(REFUSAL, result)
    assert lines_with(CONFLICT, result) == []  # no warning saying the same first
    assert result.stderr.splitlines().index(refusal) > 0
    assert scans == 1, result.stderr


@pytest.mark.parametrize("argv", [["list"], ["serve", "--help"], ["help", "serve"]], ids=" ".join)
def test_a_listing_warns_of_a_conflict_once(impostor, argv):
    scans, result = counted_run(impostor, argv)
    assert result.returncode == 0, result.stderr
    [warning] = lines_with(CONFLICT, result)
    assert "pip uninstall llm-impostor" in warning
    assert scans == 1, result.stderr


def test_check_words_an_unknown_name_as_serve_does(omni):
    _, checked = counted_run(omni, ["check", "omin"])
    _, served = counted_run(omni, ["serve", "m", "--model-type", "omin"])
    assert (checked.returncode, served.returncode) == (2, 2)
    [line] = checked.stderr.splitlines()[:-1]  # the last is the scan count
    [error] = [e for e in served.stderr.splitlines() if e.startswith("sglang-backends serve:")]
    wording = error.removeprefix("sglang-backends serve: error: ").split(" Available values:")[0]
    assert wording == "Unknown serve backend 'omin'; did you mean 'omni'?"
    assert line.startswith(wording + " Available values: llm, diffusion, ")
    assert "omni" in line.split("Available values:")[1]


@pytest.mark.parametrize("argv", [["list"], ["show", "omni"], ["check"], ["detect", "/m"]])
def test_every_operator_command_warns_of_a_model_type_in_serves_words(omni, tmp_path, argv):
    """detect answers what serve would do: it fails with serve's own error and status."""
    conf = tmp_path / "ehco.conf"
    conf.write_text("[serve_backends]\nmodel_type = omin\n")
    _, served = counted_run(omni, ["serve", "--config-file", str(conf), "m"])
    [error] = [e for e in served.stderr.splitlines() if e.startswith("sglang-backends serve:")]
    said = error.removeprefix("sglang-backends serve: error: ").split(" It was set by")[0]
    _, result = counted_run(omni, ["--config-file", str(conf), *argv])
    if argv[0] == "detect":
        assert result.returncode == served.returncode == 2
        assert error.removeprefix("sglang-backends serve: error: ") in result.stderr
        return
    [warning] = lines_with("model_type 'omin'", result)
    assert warning == (
        f"model_type 'omin' ([serve_backends] model_type, set in {conf}) would make serve "
        f"fail: {said}"
    )


def test_a_registry_reuses_a_commands_inventory(omni, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="sglang_backends")
    settings = Settings(enabled=("omni", "omnii"))
    inventory = take_inventory(settings, default_builtins())
    assert [r.getMessage() for r in caplog.records if TYPO in r.getMessage()] != []
    caplog.clear()

    def no_scan() -> None:
        raise AssertionError("the registry read package metadata again")

    monkeypatch.setattr(importlib.metadata, "distributions", no_scan)
    registry = ServeBackendRegistry.from_settings(settings, inventory=inventory)
    assert registry.inventory is inventory
    assert registry.names() == ["llm", "diffusion", "omni"]
    assert registry["omni"].distribution == "omni-runtime"
    assert caplog.records == []
    with pytest.raises(TypeError):
        ServeBackendRegistry(default_builtins(), inventory=inventory)


def test_a_registry_given_an_inventory_still_refuses_a_conflict(impostor):
    inventory = take_inventory(Settings(), default_builtins())
    with pytest.raises(errors.BackendConflictError, match="llm-impostor"):
        ServeBackendRegistry(inventory=inventory)


def test_check_names_each_value_once_when_a_plugin_claims_a_built_in_name(impostor):
    _, checked = counted_run(impostor, ["check", "nope"])
    assert checked.returncode == 2
    [line] = checked.stderr.splitlines()[:-1]
    values = line.split("Available values: ")[1].rstrip(".").split(", ")
    assert values[:2] == ["llm", "diffusion"]
    assert values.count("llm") == 1
    assert "omni" in values
