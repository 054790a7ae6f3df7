"""``sglang-backends show NAME``: one backend loaded and described, or one clean error line."""

from __future__ import annotations

import importlib.util
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
        "Status": "enabled",
        "API version": 1,
        "Has detector": True,
        "Requires model path": False,
        "Summary": "Omni runtime: serves any-to-any models.",
        "Unmet requirements": "",
        "Shadowed copies": "",
    }
    assert 0 <= load_seconds < 30


PARTIAL = """
import functools

from sglang_backends import ServeBackend


def _make(version):
    \"\"\"Made by a partial: this line is its summary.\"\"\"
    return ServeBackend(api_version=version, run=print)


factory = functools.partial(_make, 1)
"""


def test_the_summary_of_a_partial_factory_is_its_functions_first_line(site):
    site.install("part-rt", entry_points={"part": "part_plugin:factory"},
                 modules={"part_plugin.py": PARTIAL})  # fmt: skip
    result = run_cli(site, "show", "part", "-c", "Summary", "-f", "value")
    assert result.stdout == "Made by a partial: this line is its summary.\n", result.stderr


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang installed")
@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("llm", "needs SGLang (pip install sglang)"),
        ("diffusion", 'needs SGLang (pip install "sglang[diffusion]")'),
    ],
)
def test_a_built_in_without_sglang_looks_the_same_in_list_show_and_check(site, name, status):
    """One status, one exit status (0: SGLang is optional) from the three commands."""
    shown = run_cli(site, "show", "-f", "json", name)
    listed = run_cli(site, "list", "-f", "json")
    checked = run_cli(site, "check", "-f", "json", name)
    for result in (shown, listed, checked):
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
    assert json.loads(shown.stdout)["Status"] == status
    assert json.loads(shown.stdout)["Origin"] == "built-in"
    [row] = [r for r in json.loads(listed.stdout) if r["Name"] == name]
    assert row["Status"] == status
    [row] = json.loads(checked.stdout)
    assert (row["Name"], row["Result"]) == (name, status)


def test_show_a_built_in(site):
    result = run_cli(site, "show", "-f", "json", "diffusion")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["Origin"] == "built-in"
    assert shown["Target"] == "sglang_backends._sglang.builtins:run_diffusion"
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
    ("args", "phrase", "status"),
    [
        (
            ["nope"],
            "Unknown serve backend 'nope'. Available values: llm, diffusion, {plugins}.",
            2,
        ),
        (
            ["--disable", "omni", "omni"],
            "is disabled by --disable on the command line; remove it",
            1,
        ),
        (
            ["--enable", "other", "omni"],
            "is not enabled by --enable on the command line; add it",
            1,
        ),
        (["broken"], "Failed to load serve backend 'broken' from broken-runtime: boom", 1),
        # Not a backend but serve's request for detection: neither listed nor offered.
        (["auto"], "Unknown serve backend 'auto'. Available values: llm, diffusion, {plugins}.", 2),
        (["AUTO"], "Unknown serve backend 'AUTO'. Available values: llm, diffusion, {plugins}.", 2),
    ],
)
def test_show_errors_are_one_line(omni, args, phrase, status, preinstalled):
    phrase = phrase.format(plugins=", ".join(sorted({"broken", "omni", *preinstalled})))
    omni.install(
        "broken-runtime",
        entry_points={"broken": "broken_plugin:factory"},
        modules={"broken_plugin.py": "raise ImportError('boom')\n"},
    )
    result = run_cli(omni, "show", *args)
    assert result.returncode == status
    lines = [line for line in result.stderr.strip().splitlines() if "not installed" not in line]
    assert len(lines) == 1
    assert phrase in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


NOISY = """
import os, sys
print("importing the noisy plugin")
os.write(1, b"straight to fd 1\\n")
from sglang_backends import ServeBackend

def factory():
    print("factory says hello")
    sys.stdout.flush()
    return ServeBackend(api_version=1, run=lambda request: None)
"""


def test_what_a_plugin_prints_goes_to_stderr_not_into_the_output(site):
    site.install(
        "noisy-runtime",
        entry_points={"noisy": "noisy_plugin:factory"},
        modules={"noisy_plugin.py": NOISY},
    )
    result = run_cli(site, "show", "-f", "json", "noisy")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["Name"] == "noisy"
    for said in ("importing the noisy plugin", "straight to fd 1", "factory says hello"):
        assert said in result.stderr


def test_control_characters_in_metadata_are_escaped_in_human_output(site):
    site.install(
        "evil\x1b]0;pwned\x07-runtime",
        version="1.0\x1b[2J",
        entry_points={"evil": "evil_plugin:factory"},
        modules={"evil_plugin.py": OMNI.replace("Omni runtime", "Evil \x1b[31mred\u202e")},
    )
    for args in (
        ["show", "evil"],
        ["show", "-f", "value", "evil"],
        ["list"],
        ["list", "-f", "csv"],
    ):
        result = run_cli(site, *args)
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout, args
        assert "\u202e" not in result.stdout, args
        escaped = "evil\\x1b]0;pwned\\x07-runtime"
        if "csv" in args:  # cliff's csv formatter doubles backslashes itself
            escaped = escaped.replace("\\", "\\\\")
        assert escaped in result.stdout, args
    shown = json.loads(run_cli(site, "show", "-f", "json", "evil").stdout)
    assert shown["Version"] == "1.0\x1b[2J"  # JSON escapes it itself: the value stays exact
    assert shown["Summary"] == "Evil \x1b[31mred\u202e: serves any-to-any models."


#: A factory that starts a child and a daemon (two forks, a session of its own), each
#: holding show's stderr, and writes their pids to $PIDS.
FORKING = """
import os
import time

from sglang_backends import ServeBackend


def _linger():
    time.sleep(300)
    os._exit(0)


def factory():
    child = os.fork()
    if child == 0:
        _linger()
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        daemon = os.fork()
        if daemon == 0:
            _linger()
        os.write(write, str(daemon).encode())
        os._exit(0)
    os.close(write)
    daemon = int(os.read(read, 64))
    with open(os.environ["PIDS"], "w") as pids:
        pids.write(f"{child} {daemon}")
    return ServeBackend(api_version=1, run=lambda request: None)
"""


def _run_starting(site, tmp_path, source, *args):
    """Install *source* as backend ``starter`` and run the CLI with *args*; return the
    result and the pids of the processes still running that the plugin recorded (in
    ``$PIDS``, and ``$PIDS.2`` for a grandchild, if it got to start one)."""
    psutil = pytest.importorskip("psutil")
    site.install("starter-runtime", entry_points={"starter": "starter_plugin:factory"},
                 modules={"starter_plugin.py": source})  # fmt: skip
    pids = tmp_path / "pids"
    result = run_cli(site, *args, env={"PIDS": str(pids)}, timeout=30)
    files = [pids, tmp_path / "pids.2"]
    started = [int(pid) for path in files if path.exists() for pid in path.read_text().split()]
    running = [p for p in started if psutil.pid_exists(p)]
    return result, started, [p for p in running if psutil.Process(p).status() != "zombie"]


def test_show_leaves_nothing_the_plugin_started_running(site, tmp_path):
    """As check's workers do, show stops what the plugin started while loading: its own
    output, which those processes hold, then ends when show does."""
    result, started, running = _run_starting(
        site, tmp_path, FORKING, "show", "-f", "json", "starter"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["Name"] == "starter"
    assert (len(started), running) == (2, [])


#: A factory that starts a child, holding the output, which starts a grandchild.
STARTS_A_SERVER = """
import os
import subprocess
import sys

from sglang_backends import ServeBackend

LINGER = (
    "import os, subprocess, time; grandchild = subprocess.Popen(['sleep', '300']); "
    "open(os.environ['PIDS'] + '.2', 'w').write(str(grandchild.pid)); time.sleep(300)"
)


def factory():
    child = subprocess.Popen([sys.executable, "-c", LINGER])
    with open(os.environ["PIDS"], "w") as pids:
        pids.write(str(child.pid))
    return ServeBackend(api_version=1, run=lambda request: print("usage: started"))
"""


def test_a_backends_help_leaves_nothing_the_plugin_started_as_it_loaded(site, tmp_path):
    """Its help runs unsupervised, as in SGLang; what the plugin started at load, holding
    the help's output (| less waits for it), is killed with its own children once the help
    is written."""
    args = ("serve", "--model-type", "starter", "--help")
    result, started, running = _run_starting(site, tmp_path, STARTS_A_SERVER, *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "usage: started\n"
    assert started and running == []
