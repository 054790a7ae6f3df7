"""Running ``sglang-backends serve`` in a subprocess and checking what it left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from clitools import CLI, clean_environ

#: A plugin whose backends write the request they receive to $SERVE_RECORD.
RECORDER = """
import json
import os

from sglang_backends import ServeBackend, ServeBackendDetection


def record(request):
    with open(os.environ["SERVE_RECORD"], "w", encoding="utf-8") as stream:
        json.dump(
            {
                "argv": list(request.argv),
                "model_path": request.model_path,
                "model_path_is_positional": request.model_path_is_positional,
            },
            stream,
        )


def detect(request):
    if (request.model_path or "").endswith("recordable"):
        return ServeBackendDetection.MATCH
    return ServeBackendDetection.UNKNOWN


def recorder():
    return ServeBackend(api_version=1, run=record, detect=detect)


def config_only():
    return ServeBackend(api_version=1, run=record, requires_model_path=False)
"""


@dataclass
class Result:
    """A finished ``serve`` run."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        """The ``sglang-backends serve: error:`` lines of stderr."""
        return [
            line for line in self.stderr.splitlines() if line.startswith("sglang-backends serve:")
        ]


def run_serve(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    console_script: bool = False,
    timeout: float = 60,
) -> Result:
    """Run ``serve ARGS`` to completion."""
    command = [CLI] if console_script else [sys.executable, "-m", "sglang_backends"]
    # Files, not pipes: a leaked descendant holding a pipe open would make
    # reading it hang instead of letting the test report the leak.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.run(
            [*command, "serve", *args],
            env=clean_environ(env),
            stdout=out,
            stderr=err,
            timeout=timeout,
            check=False,
        )
        out.seek(0)
        err.seek(0)
        return Result(proc.returncode, out.read().decode(), err.read().decode())


def start_serve(args: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``serve ARGS`` in the background, its output going to *log*."""
    with open(log, "wb") as stream:
        return subprocess.Popen(
            [CLI, "serve", *args],
            env=clean_environ(env),
            stdout=stream,
            stderr=subprocess.STDOUT,
        )


def wait_for(
    condition: Callable[[], object],
    *,
    timeout: float = 30,
    process: subprocess.Popen[bytes] | None = None,
    what: str = "condition",
) -> object:
    """Poll *condition* until it is truthy; fail if *process* exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError(f"serve exited with {process.returncode} before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def single_error(result: Result, status: int) -> str:
    """Assert a clean failure: *status*, one error line, no traceback; return the line."""
    assert result.returncode == status, result.stderr
    assert len(result.error_lines) == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.error_lines[0]


def read_json(path: Path) -> object:
    """The JSON in *path*, or ``None`` while it is missing or incomplete."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def descendants(pid: int) -> list[int]:
    """Pids of every live descendant of *pid*."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def alive(pids: Iterable[int]) -> list[int]:
    """Those of *pids* still running (zombies count as gone)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def kill_all(pids: Iterable[int]) -> None:
    """Test teardown: SIGKILL whatever of *pids* survived, so a failure leaks nothing."""
    for pid in alive(pids):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
