"""Process titles: front, supervisor and backend are told apart in ``ps``, found by ``pgrep``."""

from __future__ import annotations

import shutil
import signal
import subprocess

import psutil
import pytest
from servetools import alive, descendants, kill_all, start_serve, wait_for

from sglang_backends._serve.supervise import supervisor
from sglang_backends._serve.supervise.backend import title_for

pytestmark = pytest.mark.skipif(not supervisor.SUPPORTED, reason="serve supervises on Linux only")

WAITER = """
import os, pathlib, time
from sglang_backends import ServeBackend

def run(request):
    pathlib.Path(os.environ["READY"]).write_text(str(os.getpid()))
    time.sleep(60)

def factory():
    return ServeBackend(api_version=1, run=run)
"""


def _title(pid: int) -> str:
    """What ``ps -o args`` shows for *pid* (setproctitle pads the area with NULs)."""
    return " ".join(part for part in psutil.Process(pid).cmdline() if part)


def test_title_keeps_the_serve_arguments():
    argv = ["/venv/bin/sglang-backends", "serve", "/m", "--port", "1"]
    assert title_for("supervisor", argv) == "sglang-backends serve [supervisor] /m --port 1"
    assert title_for("backend omni", ["python", "-c"]) == "sglang-backends serve [backend omni]"


def test_front_supervisor_and_backend_show_their_roles(site, tmp_path):
    site.install(
        "waiter-runtime",
        entry_points={"waiter": "waiter_plugin:factory"},
        modules={"waiter_plugin.py": WAITER},
    )
    ready = tmp_path / "ready"
    env = {**site.environ(), "READY": str(ready)}
    proc = start_serve(["/m", "--model-type", "waiter", "--x", "1"], env, tmp_path / "log")
    started: list[int] = []
    try:
        wait_for(ready.exists, process=proc, what="the backend to run")
        started = descendants(proc.pid)
        [supervisor_process] = psutil.Process(proc.pid).children()
        backend = int(ready.read_text())
        assert psutil.Process(backend).ppid() == supervisor_process.pid
        front = _title(proc.pid)
        assert "[" not in front and "sglang-backends serve /m --model-type waiter" in front
        assert _title(supervisor_process.pid) == (
            "sglang-backends serve [supervisor] /m --model-type waiter --x 1"
        )
        assert (
            _title(backend) == "sglang-backends serve [backend waiter] /m --model-type waiter --x 1"
        )
        for pid in (supervisor_process.pid, backend):
            assert psutil.Process(pid).name() == "sglang-backends"  # top's default column
        pgrep = shutil.which("pgrep")
        if pgrep:
            found = subprocess.run(
                [pgrep, "-f", "sglang-backends serve"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout.split()
            assert {proc.pid, supervisor_process.pid, backend} <= {int(pid) for pid in found}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait(timeout=30)
        kill_all(started)
    assert alive(started) == []
