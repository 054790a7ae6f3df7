"""Process cleanup: nothing ``serve`` started survives it, whatever way it ends."""

from __future__ import annotations

import signal

import pytest
from servetools import alive, descendants, kill_all, read_json, run_serve, start_serve, wait_for

#: A plugin whose run() starts a child that starts a grandchild, records their
#: pids in $SPAWN_PIDS, then does what $SPAWN_MODE says.
SPAWNER = """
import json
import os
import subprocess
import sys
import time

from sglang_backends import ServeBackend

# The child starts a grandchild and either waits or (orphan) exits at once,
# leaving the grandchild without its parent. "stubborn" children ignore SIGTERM.
CHILD = '''
import json, signal, subprocess, sys, time
mode = sys.argv[1]
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(json.dumps(grandchild.pid), flush=True)
if mode != "orphan":
    time.sleep(600)
'''


def run(request):
    mode = os.environ["SPAWN_MODE"]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True
    )
    grandchild = json.loads(child.stdout.readline())
    if mode == "orphan":
        child.wait()
    with open(os.environ["SPAWN_PIDS"] + ".tmp", "w") as stream:
        json.dump({"child": child.pid, "grandchild": grandchild}, stream)
    os.replace(os.environ["SPAWN_PIDS"] + ".tmp", os.environ["SPAWN_PIDS"])
    if mode == "raise":
        raise RuntimeError("engine crashed after start-up")
    if mode in ("block", "stubborn"):
        while True:
            time.sleep(0.1)
    if mode == "swallow":
        while True:
            try:
                time.sleep(600)
            except (KeyboardInterrupt, SystemExit):
                pass


def factory():
    return ServeBackend(api_version=1, run=run)
"""


@pytest.fixture
def spawner(site, tmp_path):
    """The spawning plugin installed; returns a function making its environment."""
    site.install(
        "spawner-dist",
        entry_points={"spawner": "spawner_plugin:factory"},
        modules={"spawner_plugin.py": SPAWNER},
    )
    pids_file = tmp_path / "pids.json"
    started: list[int] = []

    def environ(mode, **extra):
        env = site.environ()
        env.update(SPAWN_MODE=mode, SPAWN_PIDS=str(pids_file), **extra)
        return env, pids_file, started

    yield environ
    kill_all(started)


def _pids(pids_file, started):
    pids = read_json(pids_file)
    assert pids, "the plugin did not record its processes"
    started.extend(pids.values())
    return list(pids.values())


def _serving(env, pids_file, started, log):
    """Start serve on the spawner plugin; wait for its processes; return (proc, descendants)."""
    proc = start_serve(["m", "--model-type", "spawner"], env, log)
    started.append(proc.pid)
    wait_for(lambda: read_json(pids_file), process=proc, what="the plugin's processes")
    running = descendants(proc.pid)
    started.extend(running)
    return proc, running


@pytest.mark.parametrize(
    ("mode", "status", "phrase"),
    [
        ("return", 0, None),
        ("raise", 1, "engine crashed after start-up"),
        ("orphan", 0, None),
    ],
)
def test_descendants_are_gone_after_run_ends(spawner, mode, status, phrase):
    env, pids_file, started = spawner(mode)
    result = run_serve(["m", "--model-type", "spawner"], env)
    pids = _pids(pids_file, started)
    assert result.returncode == status, result.stderr
    if phrase:
        assert phrase in result.stderr and "Traceback" not in result.stderr
    assert alive(pids) == []


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stop_signal_stops_backend_and_descendants(spawner, tmp_path, signum, status):
    env, pids_file, started = spawner("block")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    assert len(running) >= 2
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == status
    assert alive([*running, *_pids(pids_file, started)]) == []
    log = (tmp_path / "serve.log").read_text()
    assert f"Received {signal.Signals(signum).name}" in log


def test_stubborn_descendants_are_killed_after_the_grace_period(spawner, tmp_path):
    env, pids_file, started = spawner("stubborn", SGLANG_BACKENDS_STOP_TIMEOUT="0.5")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert alive(running) == []
    assert "still running 0.5s after SIGTERM" in (tmp_path / "serve.log").read_text()


def test_backend_that_ignores_the_stop_is_forced(spawner, tmp_path):
    env, pids_file, started = spawner("swallow", SGLANG_BACKENDS_STOP_TIMEOUT="0.5")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert alive(running) == []
    assert "did not stop within" in (tmp_path / "serve.log").read_text()


def test_second_signal_forces_exit(spawner, tmp_path):
    env, pids_file, started = spawner("swallow")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: "Received SIGINT" in (tmp_path / "serve.log").read_text(), process=proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    assert alive(running) == []
    # Forced by the second signal, not by the watchdog (10 s with the default timeout).
    assert "did not stop within" not in (tmp_path / "serve.log").read_text()
