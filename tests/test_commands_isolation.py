"""check and detect workers: what serve would run, bounded, reporting promptly, leaving nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from clitools import CLI, clean_environ, run_cli
from servetools import alive

GOOD = """
from sglang_backends import ServeBackend, ServeBackendDetection

def factory():
    return ServeBackend(
        api_version=1,
        run=lambda request: None,
        detect=lambda request: ServeBackendDetection.UNKNOWN,
    )
"""

HELP_HANGS = """
import time
from sglang_backends import ServeBackend

def run(request):
    time.sleep(600)

def factory():
    return ServeBackend(api_version=1, run=run)
"""

DETECTOR_RAISES = """
from sglang_backends import ServeBackend

def detect(request):
    return {"yes": True}[request.model_path]

def factory():
    return ServeBackend(api_version=1, run=lambda request: None, detect=detect)
"""


def rows(result) -> dict[str, dict]:
    return {row["Name"]: row for row in json.loads(result.stdout)}


@pytest.fixture
def plugins(site):
    for name, source in (("good", GOOD), ("helphang", HELP_HANGS), ("raiser", DETECTOR_RAISES)):
        site.install(
            f"{name}-runtime",
            entry_points={name: f"{name}_plugin:factory"},
            modules={f"{name}_plugin.py": source},
        )
    return site


def test_check_names_only_the_plugins_asked_for(plugins):
    result = run_cli(plugins, "check", "-f", "json", "good", "raiser-runtime:raiser")
    assert result.returncode == 0, result.stderr
    assert sorted(rows(result)) == ["good", "raiser"]


def test_check_an_unknown_name_is_one_line(plugins):
    result = run_cli(plugins, "check", "nope")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "Unknown serve backend 'nope'" in line
    assert "good" in line


def test_check_says_ok_to_load_but_contract_finds_the_breaches(plugins):
    loaded = run_cli(plugins, "check", "-f", "json", "--timeout", "6")
    assert loaded.returncode == 0, loaded.stderr
    assert {n: r["Result"] for n, r in rows(loaded).items() if n in ("helphang", "raiser")} == {
        "helphang": "ok",
        "raiser": "ok",
    }
    started = time.monotonic()
    checked = run_cli(plugins, "check", "-f", "json", "--timeout", "6", "--contract")
    assert time.monotonic() - started < 60
    assert checked.returncode == 1
    found = rows(checked)
    assert found["good"]["Result"] == "ok"
    assert "contract kept" in found["good"]["Detail"]
    assert found["helphang"]["Result"] == "error"
    assert found["helphang"]["Detail"].startswith(
        "Serve backend 'helphang' from helphang-runtime: run(['--help']) did not return within 2 s"
    )
    assert found["raiser"]["Result"] == "error"
    assert "detect() raised KeyError" in found["raiser"]["Detail"]


SHADOW = "raise SystemExit('the current directory was imported, not the installed plugin')\n"


@pytest.mark.parametrize("command", [["check", "good"], ["detect", "/models/x"]])
def test_workers_import_what_serve_would_not_the_current_directory(plugins, tmp_path, command):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    (cwd / "good_plugin.py").write_text(SHADOW)
    environ = clean_environ(plugins.environ())
    result = subprocess.run(
        [CLI, command[0], "-f", "json", *command[1:]],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "current directory" not in result.stdout + result.stderr
    if command[0] == "check":
        assert rows(result)["good"]["Result"] == "ok"
    else:
        verdicts = {r["Backend"]: r["Verdict"] for r in json.loads(result.stdout)}
        assert verdicts["good"] == "unknown"


LEAVES_PROCESSES = """
import pathlib, subprocess, sys, threading, time
from sglang_backends import ServeBackend

# A daemonised grandchild in its own session, holding the worker's stderr open.
child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
)
pathlib.Path({pidfile!r}).write_text(str(child.pid))
# A thread that never ends: a normal interpreter exit would wait for it.
threading.Thread(target=time.sleep, args=(600,)).start()

def factory():
    return ServeBackend(api_version=1, run=lambda request: None)
"""


def _gone(pid: int, within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("command", [["check", "spawner"], ["detect", "/models/x"]])
def test_workers_report_promptly_and_leave_nothing_running(site, tmp_path, command):
    pidfile = tmp_path / "grandchild.pid"
    site.install(
        "spawner-runtime",
        entry_points={"spawner": "spawner_plugin:factory"},
        modules={"spawner_plugin.py": LEAVES_PROCESSES.format(pidfile=str(pidfile))},
    )
    started = time.monotonic()
    result = run_cli(site, command[0], "-f", "json", "--timeout", "40", *command[1:])
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < 30, f"took {elapsed:.1f} s: the worker's report waited for its leftovers"
    assert _gone(int(pidfile.read_text())), "the plugin's grandchild survived"


SLOW = """
import time
time.sleep(4)
from sglang_backends import ServeBackend

def factory():
    return ServeBackend(api_version=1, run=lambda request: None, detect=lambda r: None)
"""


def test_detect_does_not_blame_a_slow_but_healthy_plugin(site):
    site.install(
        "slow-runtime",
        entry_points={"slow": "slow_plugin:factory"},
        modules={"slow_plugin.py": SLOW},
    )
    result = run_cli(site, "detect", "--timeout", "2", "/models/x")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Automatic detection did not complete")
    assert "No plugin hangs or crashes" in line
    assert "'slow'" in line and "Raise --timeout" in line
    assert "hangs)" not in line and "crashes its interpreter" not in line


def test_check_dist_name_loads_that_provider_of_a_duplicate(plugins):
    plugins.install("good-fork", version="0.1", entry_points={"good": "raiser_plugin:factory"})
    both = run_cli(plugins, "check", "-f", "json", "good")
    assert both.returncode == 1
    assert {row["Result"] for row in json.loads(both.stdout)} == {"error"}
    one = run_cli(plugins, "check", "-f", "json", "good-fork:good")
    assert one.returncode == 0, one.stderr
    [row] = json.loads(one.stdout)
    assert (row["Distribution"], row["Result"]) == ("good-fork", "ok")


#: A plugin whose import starts a child, notes both pids in $MARKER, then hangs.
STUCK_AT_IMPORT = """
import json, os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["MARKER"] + ".tmp", "w") as stream:
    json.dump([os.getpid(), child.pid], stream)
os.replace(os.environ["MARKER"] + ".tmp", os.environ["MARKER"])
time.sleep(600)

def factory():
    pass
"""


def _on_a_stuck_plugin(site, tmp_path, source: str, args: list[str], **streams):
    """The CLI run with *args* in a session of its own, beside ``stuck``, a plugin of
    *source*, which notes in the file ``$MARKER`` (returned) how far it got."""
    site.install(
        "stuck-runtime",
        entry_points={"stuck": "stuck_plugin:factory"},
        modules={"stuck_plugin.py": source},
    )
    marker = tmp_path / "marker"
    environ = clean_environ(site.environ())
    environ.update(MARKER=str(marker), XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = subprocess.Popen([CLI, *args], env=environ, start_new_session=True, **streams)
    return proc, marker


def _stuck_pids(path):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


@pytest.mark.parametrize(
    ("command", "signum"),
    [
        (("check",), signal.SIGTERM),
        (("check",), signal.SIGINT),
        (("detect", "/models/x"), signal.SIGHUP),
    ],
)
def test_a_stop_signal_stops_the_command_and_its_workers_promptly(site, tmp_path, command, signum):
    """SIGINT as the terminal sends it: to the command's process group, not the workers'."""
    args = [command[0], "--timeout", "60", *command[1:]]
    silent = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proc, pids_file = _on_a_stuck_plugin(site, tmp_path, STUCK_AT_IMPORT, args, **silent)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not pids and time.monotonic() < deadline and proc.poll() is None:
            pids = _stuck_pids(pids_file) or []
            time.sleep(0.05)
        assert pids, "the plugin never started loading"
        sent = time.monotonic()
        os.killpg(proc.pid, signum)
        assert proc.wait(timeout=30) == 128 + signum
        took = time.monotonic() - sent
        deadline = time.monotonic() + 10
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(pids) == []
        assert took < 10, took  # "within 1 s": a wide margin for a loaded machine
    finally:
        for pid in alive([proc.pid, *pids]):
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_while_show_loads_a_plugin_ends_it_as_an_interrupt(site, tmp_path):
    """SIGINT to show's process group while the factory runs: 130 and no traceback, the
    user's stop, not the plugin's failure."""
    piped = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc, started = _on_a_stuck_plugin(site, tmp_path, STUCK_IN_FACTORY, ["show", "stuck"], **piped)
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert started.exists(), "the factory never ran"
        os.killpg(proc.pid, signal.SIGINT)
        err = proc.communicate(timeout=30)[1]
        assert proc.returncode == 130, err
        assert "Failed to load" not in err and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


#: A plugin whose factory notes that it started ($MARKER), then hangs.
STUCK_IN_FACTORY = """
import os, time

def factory():
    open(os.environ["MARKER"], "w").close()
    time.sleep(600)
"""


GIL_HOLDING_DETECTOR = """
import ctypes
from sglang_backends import ServeBackend

def detect(request):
    ctypes.PyDLL(None).sleep(3600)  # a C call made through PyDLL keeps the GIL throughout

def factory():
    return ServeBackend(api_version=1, run=lambda request: None, detect=detect)
"""


def test_detect_names_a_detector_that_never_releases_the_gil(site):
    site.install(
        "hog-runtime",
        entry_points={"hog": "hog_plugin:factory"},
        modules={"hog_plugin.py": GIL_HOLDING_DETECTOR},
    )
    result = run_cli(site, "detect", "--detect-timeout", "0.5", "--timeout", "4", "/models/x")
    assert result.returncode == 1, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "did not complete" in line]
    # Named with any other detector under way when it took the GIL.
    assert "still detecting: " in line and "'hog' (hog-runtime)" in line


#: A sitecustomize that leaves a marker for each interpreter that runs it.
SITECUSTOMIZE = """
import os, pathlib
pathlib.Path(os.environ["SITECUSTOMIZE_MARKERS"], str(os.getpid())).touch()
"""


@pytest.mark.parametrize("flag", ["-I", "-E"])
@pytest.mark.parametrize(
    "command", [["check", "echo"], ["detect", "/models/x"]], ids=["check", "detect"]
)
def test_workers_start_with_the_interpreters_isolation_flags(site, tmp_path, flag, command):
    """Under ``python -I`` or ``-E`` a sitecustomize on PYTHONPATH runs in no worker, as in
    no serve; the workers still import the package and the plugins (echo, installed with
    the environment) from the command's own module search path."""
    (site.path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    markers = tmp_path / "markers"
    markers.mkdir()
    environ = {**clean_environ(site.environ()), "SITECUSTOMIZE_MARKERS": str(markers)}

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, *flags, "-m", "sglang_backends", command[0], "-f", "json"]
        return subprocess.run(
            [*argv, *command[1:]],
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    unflagged = run()  # the sitecustomize runs where nothing isolates the interpreter
    assert unflagged.returncode == 0, unflagged.stderr
    assert len(list(markers.iterdir())) >= 2  # the command's and its worker's
    for marker in markers.iterdir():
        marker.unlink()
    result = run(flag)
    assert result.returncode == 0, result.stderr
    assert list(markers.iterdir()) == []
    if command[0] == "check":
        assert rows(result)["echo"]["Result"] == "ok"
    else:
        verdicts = {r["Backend"]: r["Verdict"] for r in json.loads(result.stdout)}
        assert "echo" in verdicts


#: What a worker's own flags are, as it reports them.
REPORT_FLAGS = """
import json, subprocess, sys
from sglang_backends._operators.worker import interpreter_flags

def flags():
    names = ("isolated", "ignore_environment", "no_user_site", "no_site",
             "dont_write_bytecode", "optimize", "safe_path")
    found = {name: getattr(sys.flags, name, None) for name in names}
    found["frozen_modules"] = sys._xoptions.get("frozen_modules")
    found["pycache_prefix"] = sys.pycache_prefix
    return found

if sys.argv[1:] == ["child"]:
    print(json.dumps(flags()))
else:
    child = subprocess.run(
        [sys.executable, *interpreter_flags(), sys.argv[0], "child"],
        capture_output=True, text=True, check=True,
    )
    print(json.dumps([flags(), json.loads(child.stdout)]))
"""


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["-I"],
        ["-E", "-s"],
        ["-S", "-B", "-O"],
        ["-OO", "-X", "frozen_modules=off", "-X", "pycache_prefix=PREFIX"],
    ],
    ids=["none", "isolated", "environment-user-site", "site-bytecode-optimize", "x-options"],
)
def test_a_worker_gets_the_flags_that_change_what_it_imports(tmp_path, flags):
    """The worker's interpreter flags are the command's, read from ``sys.flags``: each one
    that changes what is imported, or how, reaches the worker (sys.path is given apart)."""
    import sglang_backends

    script = tmp_path / "report.py"
    script.write_text(REPORT_FLAGS)
    flags = [flag.replace("PREFIX", str(tmp_path / "pycache")) for flag in flags]
    package = str(Path(sglang_backends.__file__).parents[1])  # -S: no site-packages
    result = subprocess.run(
        [sys.executable, *flags, str(script)],
        env={**os.environ, "PYTHONPATH": package},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    parent, child = json.loads(result.stdout)
    assert child == parent


BUILT_AT_IMPORT = """
from sglang_backends import ServeBackendDetection, portable_backend

BACKEND = portable_backend(
    api_version=1, run=lambda request: None, detect=lambda r: ServeBackendDetection.UNKNOWN
)

def factory():
    return BACKEND
"""


def test_check_contract_loads_a_backend_built_at_import_after_sglangs_contract(site):
    """As sglang serve: SGLang's contract first, so a backend portable_backend builds at
    import is SGLang's, which both hosts accept."""
    from sglang_standin import install_sglang

    install_sglang(site)
    site.install("early-rt", entry_points={"early": "early_plugin:factory"},
                 modules={"early_plugin.py": BUILT_AT_IMPORT})  # fmt: skip
    checked = run_cli(site, "check", "-f", "json", "--contract", "early")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    [row] = json.loads(checked.stdout)
    assert (row["Result"], row["SGLang"]) == ("ok", "accepted"), row


CHILD_AT_IMPORT = """
import subprocess
from sglang_backends import portable_backend

# Started by the import, which outlives a backend's --help under both hosts.
CHILD = subprocess.Popen(["sleep", "317"])


def factory():
    \"\"\"Starts a process as it is imported.\"\"\"
    return portable_backend(api_version=1, run=lambda request: print("usage: x"))
"""


def test_check_contract_finds_a_process_started_at_import_as_the_kit_does(site):
    """check's worker loads the backend within the kit's look at what it starts."""
    site.install("spawn-rt", entry_points={"spawner": "spawn_plugin:factory"},
                 modules={"spawn_plugin.py": CHILD_AT_IMPORT})  # fmt: skip
    checked = run_cli(site, "check", "-f", "json", "--contract", "spawner")
    assert checked.returncode == 1, checked.stderr
    detail = rows(checked)["spawner"]["Detail"]
    assert detail.startswith("Serve backend 'spawner' from spawn-rt: left processes running")
    found = psutil.process_iter(["cmdline"])
    sleeping = [p for p in found if p.info["cmdline"] == ["sleep", "317"]]
    assert sleeping == []
