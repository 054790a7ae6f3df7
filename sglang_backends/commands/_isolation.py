"""Run worker jobs in subprocesses, bounded in time and in number."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = ["WorkerResult", "default_jobs", "last_line", "run_isolated", "run_many"]


@dataclass(frozen=True)
class WorkerResult:
    """What one worker process produced.

    :param result: the job's JSON result, ``None`` if the worker produced none.
    :param failure: why there is no result: ``timeout`` or ``crashed``.
    :param detail: one line explaining the failure.
    :param seconds: wall-clock time of the worker.
    :param stderr: what the worker wrote to stderr.
    """

    result: dict[str, Any] | None
    failure: str | None
    detail: str | None
    seconds: float
    stderr: str


def default_jobs() -> int:
    """Default number of workers run at once: the CPU count, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


def _kill_tree(pid: int) -> None:
    """Kill worker *pid*, every descendant and its process group (it leads one)."""
    from sglang_backends.processes import kill_tree

    if hasattr(os, "killpg"):
        try:
            os.killpg(pid, signal.SIGSTOP)  # freeze the group: nothing new is spawned
        except (ProcessLookupError, PermissionError):
            pass
    kill_tree(pid)
    if hasattr(os, "killpg"):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        how = f"the interpreter was killed by {name}"
    else:
        how = f"the interpreter exited with status {returncode} before reporting"
    return how


def last_line(text: str) -> str:
    """The last non-blank line of *text*, or an empty string."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def run_isolated(
    job: dict[str, Any], *, timeout: float, env: dict[str, str] | None = None
) -> WorkerResult:
    """Run *job* in a fresh ``python -m sglang_backends.commands._worker``.

    The worker gets its own session (process group); on timeout the whole
    tree is killed. Never raises for the worker's fault.
    """
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "sglang_backends.commands._worker", json.dumps(job)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(process.pid)
        try:
            out, err = process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            out, err = b"", b""
        seconds = time.perf_counter() - started
        return WorkerResult(
            None,
            "timeout",
            f"did not finish within {timeout:g} s; its process tree was killed",
            seconds,
            err.decode(errors="replace"),
        )
    seconds = time.perf_counter() - started
    stderr = err.decode(errors="replace")
    try:
        result = json.loads(out.decode(errors="replace"))
    except ValueError:
        result = None
    if process.returncode != 0 or not isinstance(result, dict):
        return WorkerResult(None, "crashed", _describe_exit(process.returncode), seconds, stderr)
    return WorkerResult(result, None, None, seconds, stderr)


def run_many(
    jobs: Sequence[dict[str, Any]],
    *,
    timeout: float,
    concurrency: int,
) -> list[WorkerResult]:
    """Run *jobs* with at most *concurrency* workers at once; results in job order."""
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(lambda job: run_isolated(job, timeout=timeout), jobs))
