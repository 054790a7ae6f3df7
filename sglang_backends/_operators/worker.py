"""Worker processes that load plugins for ``check`` and ``detect``: the job, its result,
and the command's end.

:func:`run_isolated` runs a :class:`Job` in a fresh interpreter, in a session
of its own, bounded in time, so a plugin that hangs or crashes at import
costs only that process. The worker
(:mod:`sglang_backends._operators.worker_process`) writes one JSON
:class:`Result` to its original stdout and exits at once. A stop signal
reaching the command kills every worker's tree and group, starts no further
worker and ends the command with
``128 + N`` (130 for SIGINT): Ctrl+C never reaches the workers' sessions.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import IO, Literal, NamedTuple

from sglang_backends._core.processes import StopSignals, send
from sglang_backends._core.settings import Settings
from sglang_backends._core.signals import signal_name


@dataclasses.dataclass(frozen=True)
class Job:
    """What one worker does (``load`` backend :attr:`name`, check its ``contract`` too, or
    ``explain`` detection for the request *argv*, host options removed, which the worker
    normalizes as serve does), under which *settings* (the registry's selection and
    timeouts, sent as a JSON array); *progress* is the file an ``explain`` job notes each load
    and detector in, read should the worker not finish.
    """

    action: Literal["load", "contract", "explain"]
    settings: Settings
    name: str = ""
    contract_timeout: float = 0.0
    argv: Sequence[str] = ()
    progress: str = ""


class Outcome(NamedTuple):
    """One backend's verdict on an ``explain`` job's request (a JSON array)."""

    name: str
    distribution: str | None
    verdict: str
    seconds: float
    detail: str | None


@dataclasses.dataclass(frozen=True)
class Result:
    """What one job found: the loaded backend's declarations, detection's outcomes, or an error."""

    seconds: float = 0.0
    error: str | None = None
    #: A loaded backend's declarations, and with ``contract`` the checks it passed, as
    #: ``check`` words them.
    detail: str = ""
    #: With ``contract``: whether SGLang's own host accepted the backend, refused it, or why it
    #: was not asked.
    sglang: str | None = None
    outcomes: Sequence[Outcome] = ()
    matches: Sequence[str] = ()
    selected: str | None = None
    fallback: bool = False


@dataclasses.dataclass(frozen=True)
class WorkerResult:
    """What one worker process produced: its result, or the *failure* (``timeout``,
    ``crashed``, ``stopped``) and a one-line *detail*; its wall-clock *seconds* and stderr.
    """

    result: Result | None
    failure: str | None
    detail: str | None
    seconds: float
    stderr: str


# -- the command's end ------------------------------------------------------------


def _kill(*pids: int) -> None:
    """Kill workers *pids*, each with its tree and group."""
    # psutil: only to kill, not to run.
    from sglang_backends._core.tree import kill_trees

    kill_trees(*pids, groups=True)


#: Guards :data:`_RUNNING` and :data:`_STOPPING`; re-entrant: the stop handler runs in the
#: main thread, maybe inside :func:`_started`.
_LOCK = threading.RLock()
#: The workers running now, so that a stop signal can kill them all.
_RUNNING: set[int] = set()
#: Set once a stop signal reached the command: no further worker starts.
_STOPPING = threading.Event()


def _started(pid: int) -> bool:
    """Count worker *pid* as running; ``False`` (and the worker killed) once stopped."""
    with _LOCK:
        if not _STOPPING.is_set():
            _RUNNING.add(pid)
            return True
    _kill(pid)
    return False


def _stop(signum: int) -> None:
    """On stop signal *signum*: start no further worker and kill every running one."""
    with _LOCK:
        _STOPPING.set()
        pids = list(_RUNNING)
    _kill(*pids)


#: What a job comes to once a stop signal has ended the command.
_STOPPED = WorkerResult(None, "stopped", "the command was stopped", 0.0, "")


def last_line(text: str) -> str:
    """The last non-blank line of *text*, or an empty string."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def interpreter_flags() -> list[str]:
    """This interpreter's options that change what is imported, or how, for a worker.

    Read from :data:`sys.flags` and :data:`sys.pycache_prefix`: ``-I`` (or
    ``-E``, ``-s`` and, from Python 3.11, ``-P`` apart), ``-S``, ``-B``,
    ``-O``/``-OO`` and ``-X pycache_prefix``, so that a ``sitecustomize`` on
    ``PYTHONPATH`` or a user site runs in no worker when it runs in no
    ``serve``. ``-X frozen_modules`` has no public flag: it is read from
    :data:`sys._xoptions`, the ``-X`` options as given (documented, though
    CPython's own). ``-X importtime`` and other diagnostics are left out:
    they change no import, and their output would be the worker's.
    """
    flags = sys.flags
    # -I gives -E, -s and -P (safe_path, from Python 3.11) too.
    apart = not flags.isolated
    found = [
        flag
        for flag, given in (
            ("-I", flags.isolated),
            ("-E", apart and flags.ignore_environment),
            ("-s", apart and flags.no_user_site),
            ("-P", apart and getattr(flags, "safe_path", False)),
            ("-S", flags.no_site),
            ("-B", flags.dont_write_bytecode),
            ("-" + "O" * flags.optimize, flags.optimize),
        )
        if given
    ]
    if sys.pycache_prefix is not None:
        found += ["-X", f"pycache_prefix={sys.pycache_prefix}"]
    # The one private name: sys._xoptions, documented, the only place -X frozen_modules
    # can be read (a str, or True for a bare -X frozen_modules); tests check it reaches
    # the worker.
    frozen = sys._xoptions.get("frozen_modules")
    if frozen is not None:
        found += ["-X", "frozen_modules" if frozen is True else f"frozen_modules={frozen}"]
    return found


def _command() -> list[str]:
    """The worker's command line: this interpreter with its flags that change imports
    (:func:`interpreter_flags`) and this process's exact ``sys.path``, not ``python -m``'s
    (the current directory first), so it imports what ``serve`` would.
    """
    code = (
        f"import sys; sys.path[:] = {list(sys.path)!r}; "
        "from sglang_backends._operators.worker_process import main; main()"
    )
    return [sys.executable, *interpreter_flags(), "-c", code]


def _read(stream: IO[bytes]) -> str:
    stream.seek(0)
    return stream.read().decode(errors="replace")


def run_isolated(job: Job, *, timeout: float) -> WorkerResult:
    """Run *job* in a fresh worker; never raises for its fault. On timeout its tree and
    group are killed; output goes to files, which an inheriting process cannot hold up.
    """
    started = time.perf_counter()
    with (
        # A stop signal kills them all (main thread only).
        StopSignals(on_signal=_stop),
        # The job, on the worker's stdin.
        tempfile.TemporaryFile() as given,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        if _STOPPING.is_set():
            return _STOPPED
        given.write(json.dumps(dataclasses.asdict(job)).encode())
        given.seek(0)
        process = subprocess.Popen(
            _command(), stdin=given, stdout=out, stderr=err, start_new_session=True
        )
        try:
            if not _started(process.pid):
                process.wait()
                return _STOPPED
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(process.pid)
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
            detail = f"did not finish within {timeout:g} s; its process tree was killed"
            return WorkerResult(None, "timeout", detail, time.perf_counter() - started, _read(err))
        finally:
            with _LOCK:
                _RUNNING.discard(process.pid)
            # Kill what is left of its group.
            send(process.pid, signal.SIGKILL, group=True)
        seconds = time.perf_counter() - started
        stderr = _read(err)
        try:
            result = json.loads(_read(out))
        except ValueError:
            result = None
    code = process.returncode
    if code != 0 or not isinstance(result, dict):
        if code < 0:
            detail = f"the interpreter was killed by {signal_name(-code)}"
        else:
            detail = f"the interpreter exited with status {code} before reporting"
        return WorkerResult(None, "crashed", detail, seconds, stderr)
    # Outcomes come as JSON arrays.
    outcomes = [Outcome(*o) for o in result.get("outcomes", ())]
    return WorkerResult(Result(**{**result, "outcomes": outcomes}), None, None, seconds, stderr)


def run_loads(
    job: Job, names: Sequence[str], *, timeout: float, concurrency: int
) -> dict[str, WorkerResult]:
    """Run *job* once for each of *names*, at most *concurrency* workers at once."""
    jobs = [dataclasses.replace(job, name=name) for name in names]
    with StopSignals(on_signal=_stop), ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = pool.map(lambda one: run_isolated(one, timeout=timeout), jobs)
        return dict(zip(names, results, strict=True))
