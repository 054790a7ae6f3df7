"""Run worker jobs in subprocesses, bounded in time and in number.

A stop signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT) that reaches the command
while workers run kills every worker's tree and process group at once,
starts no further worker, and ends the command with ``128 + N`` (SIGINT as
``KeyboardInterrupt``, which cliff turns into ``130``): the workers lead
sessions of their own, so the terminal's Ctrl+C and a signal to the
command's process group never reach them by themselves.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from sglang_backends.commands._worker import Job, Result
from sglang_backends.processes import StopSignals, kill_trees, send, signal_name

__all__ = ["WorkerResult", "default_jobs", "last_line", "run_isolated", "run_loads"]


@dataclass(frozen=True)
class WorkerResult:
    """What one worker process produced.

    :param result: the job's result, ``None`` if the worker produced none.
    :param failure: why there is no result: ``timeout``, ``crashed``, or ``stopped``
        (a stop signal ended the command first).
    :param detail: one line explaining the failure.
    :param seconds: wall-clock time of the worker.
    :param stderr: what the worker wrote to stderr.
    """

    result: Result | None
    failure: str | None
    detail: str | None
    seconds: float
    stderr: str


def default_jobs() -> int:
    """Default number of workers run at once: the CPU count, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


class _Workers:
    """The workers running now, so that a stop signal can kill them all."""

    def __init__(self) -> None:
        # Re-entrant: the stop handler runs in the main thread, maybe inside add().
        self.lock = threading.RLock()
        self.running: set[int] = set()
        self.stopped = False

    def add(self, pid: int) -> bool:
        """Count worker *pid* as running; ``False`` (and the worker killed) once stopped."""
        with self.lock:
            if not self.stopped:
                self.running.add(pid)
                return True
        kill_trees(pid, groups=True)
        return False

    def discard(self, pid: int) -> None:
        with self.lock:
            self.running.discard(pid)

    def stop(self) -> None:
        """Start no further worker and kill every running one."""
        with self.lock:
            self.stopped = True
            pids = list(self.running)
        kill_trees(*pids, groups=True)


_WORKERS = _Workers()


@contextmanager
def _stop_signals_kill_workers() -> Iterator[None]:
    """While workers run, a stop signal kills them, then ends the command (main thread only)."""
    with StopSignals(on_signal=lambda signum: _WORKERS.stop()) as stops:
        stops.arm()
        yield


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        return f"the interpreter was killed by {signal_name(-returncode)}"
    return f"the interpreter exited with status {returncode} before reporting"


def last_line(text: str) -> str:
    """The last non-blank line of *text*, or an empty string."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def _command() -> list[str]:
    """The worker's command line: this interpreter, with this process's exact ``sys.path``.

    ``python -m`` would put the current directory first on ``sys.path``, which
    the ``sglang-backends`` console script does not: a module there could
    shadow a plugin and the worker would test something ``serve`` never runs.
    Only the built-in ``sys`` is imported before the path is replaced.
    """
    code = (
        f"import sys; sys.path[:] = {list(sys.path)!r}; "
        "from sglang_backends.commands._worker import main; main()"
    )
    return [sys.executable, "-c", code]


def _read(stream: IO[bytes]) -> str:
    stream.seek(0)
    return stream.read().decode(errors="replace")


def run_isolated(job: Job, *, timeout: float) -> WorkerResult:
    """Run *job* in a fresh worker interpreter (see :mod:`._worker`).

    The worker gets its own session (process group) and kills whatever its
    plugin started before it reports; on timeout its whole tree and group
    are killed. Output goes to files, not pipes, so a process that inherited
    them cannot hold up the report. Never raises for the worker's fault.
    """
    with _stop_signals_kill_workers():
        return _run_isolated(job, timeout=timeout)


def _run_isolated(job: Job, *, timeout: float) -> WorkerResult:
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        if _WORKERS.stopped:
            return WorkerResult(None, "stopped", "the command was stopped", 0.0, "")
        with tempfile.TemporaryFile() as given:  # the job, on the worker's stdin
            given.write(json.dumps(job.to_json()).encode())
            given.seek(0)
            process = subprocess.Popen(
                _command(), stdin=given, stdout=out, stderr=err, start_new_session=True
            )
        try:
            if not _WORKERS.add(process.pid):
                process.wait()
                return WorkerResult(None, "stopped", "the command was stopped", 0.0, "")
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_trees(process.pid, groups=True)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            return WorkerResult(
                None,
                "timeout",
                f"did not finish within {timeout:g} s; its process tree was killed",
                time.perf_counter() - started,
                _read(err),
            )
        finally:
            _WORKERS.discard(process.pid)
            send(process.pid, signal.SIGKILL, group=True)  # what is left of its group
        seconds = time.perf_counter() - started
        stdout, stderr = _read(out), _read(err)
    try:
        result = json.loads(stdout)
    except ValueError:
        result = None
    if process.returncode != 0 or not isinstance(result, dict):
        return WorkerResult(None, "crashed", _describe_exit(process.returncode), seconds, stderr)
    return WorkerResult(Result.from_json(result), None, None, seconds, stderr)


def run_loads(
    job: Job, names: Sequence[str], *, timeout: float, concurrency: int
) -> dict[str, WorkerResult]:
    """Run *job* once for each of *names*, at most *concurrency* workers at once."""
    jobs = [dataclasses.replace(job, name=name) for name in names]
    with (
        _stop_signals_kill_workers(),
        ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool,
    ):
        results = pool.map(lambda one: run_isolated(one, timeout=timeout), jobs)
        return dict(zip(names, results, strict=True))
