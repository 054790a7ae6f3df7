"""list, check and detect against a zoo of broken plugins, installed as real distributions."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest
from clitools import run_cli

GOOD = """
from sglang_backends import ServeBackend

def factory():
    \"\"\"A well-behaved runtime.\"\"\"
    return ServeBackend(api_version=1, run=lambda request: None)
"""

# Every broken module first leaves a marker, so a test can tell whether it was imported.
MARKED = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
"""

ZOO = {
    "importerr": "import no_such_module_for_the_zoo\n",
    "hang": "import time\nwhile True:\n    time.sleep(1)\n",
    "abort": "import os\nos.abort()\n",
    "exit3": "import os\nos._exit(3)\n",
    "raiser": "def factory():\n    raise RuntimeError('no accelerator found')\n",
    "wrongtype": "def factory():\n    return 42\n",
    "oldapi": (
        "from sglang_backends import ServeBackend\n"
        "def factory():\n    return ServeBackend(api_version=0, run=print)\n"
    ),
}

#: What check reports for each broken plugin: result and a phrase of the detail.
EXPECTED_CHECK = {
    "importerr": ("error", "No module named 'no_such_module_for_the_zoo'"),
    "hang": ("timeout", "did not finish within 2 s"),
    "abort": ("crashed", "SIGABRT"),
    "exit3": ("crashed", "exited with status 3"),
    "raiser": ("error", "no accelerator found"),
    "wrongtype": ("error", "factory returned int"),
    "oldapi": ("error", "uses API version 0"),
    "twin": ("error", "Multiple distributions register serve backend 'twin'"),
    "llm": ("error", "claims the built-in name 'llm'; every serve fails until you uninstall"),
    "good": ("ok", "API version 1"),
}


@pytest.fixture
def markers(tmp_path) -> Path:
    path = tmp_path / "markers"
    path.mkdir()
    return path


@pytest.fixture
def zoo(site, markers):
    """Every kind of broken plugin, each in its own distribution, plus one good one."""
    site.install(
        "good-runtime",
        entry_points={"good": "good_plugin:factory"},
        modules={"good_plugin.py": GOOD},
    )
    for name, source in ZOO.items():
        marked = MARKED.format(marker=str(markers / name)) + source
        site.install(
            f"{name}-runtime",
            entry_points={name: f"{name}_plugin:factory"},
            modules={f"{name}_plugin.py": marked},
        )
    for dist in ("twin-a", "twin-b"):
        site.install(dist, entry_points={"twin": "good_plugin:factory"})
    conflict = MARKED.format(marker=str(markers / "llm")) + GOOD
    site.install(
        "llm-impostor",
        entry_points={"llm": "impostor_plugin:factory"},
        modules={"impostor_plugin.py": conflict},
    )
    return site


def rows(result) -> list[dict]:
    return json.loads(result.stdout)


def assert_nothing_left(zoo) -> None:
    """No process that could have imported the zoo's plugins (its site on PYTHONPATH) remains."""
    site_path = str(zoo.path)
    leftovers = []
    for process in psutil.process_iter(["pid", "environ"]):
        try:
            env = process.info["environ"] or {}
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if site_path in env.get("PYTHONPATH", "") and process.pid != os.getpid():
            leftovers.append(process)
    assert [p for p in leftovers if p.status() != psutil.STATUS_ZOMBIE] == []


def test_list_shows_the_whole_zoo_and_imports_nothing(zoo, markers):
    result = run_cli(zoo, "list", "-f", "json")
    assert result.returncode == 0, result.stderr
    listed = {(r["Name"], r["Distribution"]): r for r in rows(result)}
    assert listed[("llm", None)]["Origin"] == "built-in"
    assert listed[("llm", "llm-impostor")]["Status"] == "conflicts with a built-in"
    assert listed[("twin", "twin-a")]["Status"] == "duplicate"
    assert listed[("twin", "twin-b")]["Status"] == "duplicate"
    for name in ZOO:
        row = listed[(name, f"{name}-runtime")]
        assert row == {
            "Name": name,
            "Origin": "plugin",
            "Distribution": f"{name}-runtime",
            "Version": "1.0",
            "Target": f"{name}_plugin:factory",
            "Status": "enabled",
            "Requirements": "met",
        }
    assert list(markers.iterdir()) == []


def test_list_reports_disabled_plugins_from_configuration(zoo, tmp_path):
    conf = tmp_path / "x.conf"
    conf.write_text("[serve_backends]\ndisabled_backends = hang, llm\n")
    result = run_cli(zoo, "list", "-f", "json", "--config-file", str(conf))
    listed = {(r["Name"], r["Distribution"]): r["Status"] for r in rows(result)}
    assert listed[("hang", "hang-runtime")] == "disabled"
    assert listed[("llm", "llm-impostor")] == "disabled"
    assert listed[("abort", "abort-runtime")] == "enabled"


def test_check_reports_every_failure_and_survives_them(zoo, preinstalled):
    started = time.monotonic()
    result = run_cli(zoo, "check", "-f", "json", "--timeout", "2", "--jobs", "4")
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert elapsed < 60  # the hanging plugin did not hang the check
    checked = rows(result)
    by_name: dict[str, list[dict]] = {}
    for row in checked:
        if row["Origin"] == "plugin" and row["Name"] not in preinstalled:
            by_name.setdefault(row["Name"], []).append(row)
    assert set(by_name) == set(EXPECTED_CHECK)
    for name, (outcome, phrase) in EXPECTED_CHECK.items():
        for row in by_name[name]:
            assert row["Result"] == outcome, row
            assert phrase in row["Detail"], row
    for name in ZOO:
        [row] = by_name[name]
        assert row["Distribution"] == f"{name}-runtime"
        if row["Result"] != "ok":
            assert f"{name}-runtime" in row["Detail"] or row["Result"] == "timeout"
    assert len(by_name["twin"]) == 2
    builtins = [r for r in checked if r["Origin"] == "built-in"]
    assert [r["Name"] for r in builtins] == ["llm", "diffusion"]
    assert all(r["Result"] == "ok" or r["Result"].startswith("needs SGLang") for r in builtins)
    assert_nothing_left(zoo)  # not even the interpreter that imported the hanging plugin


def test_check_skips_disabled_plugins_and_passes_when_the_rest_is_good(zoo):
    broken = ",".join([*ZOO, "twin", "llm"])
    result = run_cli(zoo, "check", "-f", "json", "--disable", broken)
    assert result.returncode == 0, result.stderr
    results = {(r["Name"], r["Distribution"]): r["Result"] for r in rows(result)}
    assert results[("good", "good-runtime")] == "ok"
    assert results[("hang", "hang-runtime")] == "skipped"
    assert results[("llm", "llm-impostor")] == "skipped"
    # Which list left it out, and where that list was set, as serve and show say it.
    details = {r["Name"]: r["Detail"] for r in rows(result)}
    assert details["hang"] == "disabled by --disable on the command line; not loaded"


def test_check_never_imports_plugins_in_its_own_process(zoo, markers):
    """Markers appear (workers imported them) but the check process survived abort and exit."""
    result = run_cli(
        zoo,
        "check",
        "-f",
        "value",
        "-c",
        "Name",
        "-c",
        "Result",
        "--timeout",
        "2",
        "--enable",
        "abort,exit3,good",
    )
    assert result.returncode == 1
    assert "abort crashed" in result.stdout
    assert "exit3 crashed" in result.stdout
    assert "good ok" in result.stdout
    assert sorted(p.name for p in markers.iterdir()) == ["abort", "exit3"]


def test_check_kills_the_whole_worker_tree_on_timeout(site, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    source = f"""
    import subprocess, sys, time, pathlib
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    pathlib.Path({str(pidfile)!r}).write_text(str(child.pid))
    time.sleep(600)
    """
    site.install(
        "spawner-runtime",
        entry_points={"spawner": "spawner_plugin:factory"},
        modules={"spawner_plugin.py": source},
    )
    result = run_cli(site, "check", "-f", "json", "--timeout", "2")
    assert result.returncode == 1
    [row] = [r for r in rows(result) if r["Name"] == "spawner"]
    assert row["Result"] == "timeout"
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    assert not alive, "the plugin's child process survived the check"


def test_detect_reports_broken_plugins_as_errors(zoo):
    result = run_cli(zoo, "detect", "-f", "json", "--disable", "hang,abort,exit3,llm", "/models/x")
    assert result.returncode == 0, result.stderr
    verdicts = {r["Backend"]: r for r in rows(result)}
    for name in ("importerr", "raiser", "wrongtype", "oldapi"):
        assert verdicts[name]["Verdict"] == "error"
        assert f"{name}-runtime" in verdicts[name]["Detail"]
    assert verdicts["twin"]["Verdict"] == "error"
    assert "Multiple distributions" in verdicts["twin"]["Detail"]
    assert verdicts["good"]["Verdict"] == "no detector"
    assert rows(result)[-1]["Verdict"] == "fallback"
    assert rows(result)[-1]["Backend"] == "llm"


@pytest.mark.parametrize(
    ("enable", "cause"),
    [("hang", "does not load within 10 s (it hangs)"), ("abort", "SIGABRT"), ("exit3", "status 3")],
)
def test_detect_survives_a_plugin_that_hangs_or_crashes_and_names_it(zoo, enable, cause):
    result = run_cli(zoo, "detect", "--timeout", "2", "--enable", enable, "--disable", "llm", "/m")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Automatic detection did not complete")
    assert f"'{enable}'" in line
    assert cause in line
    assert result.stdout == ""
    assert_nothing_left(zoo)


def test_detect_with_a_conflicting_plugin_fails_like_serve(zoo):
    result = run_cli(zoo, "detect", "--disable", "hang,abort,exit3", "/m")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "cannot replace reserved or built-in backends: llm (from llm-impostor)" in line


CONCURRENT = """
import os, pathlib, time
running = pathlib.Path({running!r})
me = running / str(os.getpid())
me.touch()
seen = 0
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    seen = max(seen, len(list(running.iterdir())))
    if seen >= 2:
        break
    time.sleep(0.02)
time.sleep(0.2)
seen = max(seen, len(list(running.iterdir())))
(pathlib.Path({seen!r}) / {name!r}).write_text(str(seen))
me.unlink()
from sglang_backends import ServeBackend

def factory():
    return ServeBackend(api_version=1, run=lambda request: None)
"""


def test_check_loads_plugins_in_parallel_but_bounded_by_jobs(site, tmp_path):
    running, seen = tmp_path / "running", tmp_path / "seen"
    running.mkdir()
    seen.mkdir()
    for name in ("p1", "p2", "p3"):
        source = CONCURRENT.format(running=str(running), seen=str(seen), name=name)
        site.install(
            f"{name}-runtime",
            entry_points={name: f"{name}_plugin:factory"},
            modules={f"{name}_plugin.py": source},
        )
    result = run_cli(site, "check", "-f", "json", "--jobs", "2", "--timeout", "20")
    assert result.returncode == 0, result.stderr
    observed = sorted(int(p.read_text()) for p in seen.iterdir())
    assert len(observed) == 3
    assert max(observed) == 2  # two workers overlapped, never three
