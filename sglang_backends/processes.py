"""Process helpers on psutil: stop a process tree, stop descendants, stop signals.

:mod:`sglang_backends.supervisor` owns ``serve``'s process model on Linux
and uses :func:`become_subreaper` and :func:`running`; the operator commands use
:func:`kill_tree` and :func:`kill_processes` on their isolated workers.
Elsewhere ``serve`` runs the backend in its own process with
:class:`StopSignals` and :func:`terminate_descendants`, as SGLang does.

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from types import FrameType, TracebackType

import psutil

from sglang_backends.settings import DEFAULT_STOP_TIMEOUT

__all__ = [
    "StopSignals",
    "become_subreaper",
    "kill_processes",
    "kill_tree",
    "running",
    "terminate_descendants",
]

LOG = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux only).

    Returns whether it worked; elsewhere descendants whose parent exited
    early may escape :func:`terminate_descendants`, as they do in SGLang.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _signal_all(processes: list[psutil.Process], how: Callable[[psutil.Process], None]) -> None:
    for process in processes:
        try:
            how(process)
        except psutil.NoSuchProcess:
            pass
        except psutil.AccessDenied as exc:
            LOG.warning("Cannot stop process %s: %s", process.pid, exc)


def kill_processes(pids: Iterable[int], *, timeout: float = 5.0) -> None:
    """SIGKILL the processes *pids* at once and wait up to *timeout* s for them to go.

    For processes that misbehaved (a hung plugin import, a ``--help`` that
    launched something): they get no grace period.
    """
    processes = []
    for pid in pids:
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _signal_all(processes, psutil.Process.kill)
    psutil.wait_procs(processes, timeout=timeout)


def kill_tree(pid: int, *, timeout: float = 5.0) -> None:
    """SIGKILL process *pid* and every descendant of it; see :func:`kill_processes`."""
    try:
        parent = psutil.Process(pid)
        pids = [child.pid for child in parent.children(recursive=True)] + [pid]
    except psutil.NoSuchProcess:
        return
    kill_processes(pids, timeout=timeout)


def running(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of *processes* that have not exited (zombies have)."""
    found = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.NoSuchProcess:
            pass
    return found


def _reap(processes: Iterable[psutil.Process]) -> None:
    """Collect those of *processes* that are exited children of this process.

    Only these pids: an embedding program's other children keep their exit
    status for it (never ``waitpid(-1)``).
    """
    if not hasattr(os, "WNOHANG"):
        return
    for process in processes:
        try:
            os.waitpid(process.pid, os.WNOHANG)
        except ChildProcessError:
            pass


def terminate_descendants(timeout: float = DEFAULT_STOP_TIMEOUT, *, rounds: int = 3) -> int:
    """Stop every descendant of this process; return how many were found.

    Each round sends SIGTERM to all descendants, waits up to *timeout*
    seconds (``0``: SIGKILL at once), then SIGKILLs the survivors; a new
    round starts if processes appeared meanwhile (spawned during shutdown or
    re-parented here).
    """
    me = psutil.Process()
    seen: set[int] = set()
    for _ in range(rounds):
        try:
            found = running(me.children(recursive=True))
        except psutil.Error:
            break
        if not found:
            break
        seen.update(p.pid for p in found)
        LOG.debug("Terminating %d descendant process(es): %s", len(found), [p.pid for p in found])
        alive = found
        if timeout > 0:
            _signal_all(found, psutil.Process.terminate)
            _, alive = psutil.wait_procs(found, timeout=timeout)
            if alive:
                LOG.warning(
                    "Killing %d process(es) still running %.1fs after SIGTERM: %s",
                    len(alive),
                    timeout,
                    [p.pid for p in alive],
                )
        _signal_all(alive, psutil.Process.kill)
        psutil.wait_procs(alive, timeout=DEFAULT_STOP_TIMEOUT)
        _reap(found)
    return len(seen)


class StopSignals:
    """SIGTERM and SIGINT stop the backend by unwinding the main thread.

    Used where ``serve`` runs the backend in its own process (not Linux).
    Entering installs the handlers, which only record a signal; :meth:`arm`
    (called first thing inside the guarded ``try``) makes the first signal
    raise :class:`KeyboardInterrupt` (SIGINT) or :class:`SystemExit`
    (SIGTERM) in the main thread, and raises at once for a signal that came
    while the handlers were being installed, so none is lost. If ``run()``
    has not unwound *timeout* seconds later, or a second signal arrives,
    *on_force* runs and the process exits at once. Disarmed (during
    cleanup), a signal is only recorded. In a forked child the default
    action applies.

    :param timeout: how long ``run()`` may take to unwind.
    :param on_force: called before a forced exit (to kill descendants).
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, timeout: float, on_force: Callable[[], object]) -> None:
        self.timeout = timeout
        self.signum: int | None = None
        self.armed = False
        self._on_force = on_force
        self._pid = os.getpid()
        self._previous: dict[int, object] = {}
        self._watchdog: threading.Timer | None = None

    @property
    def exit_status(self) -> int | None:
        """``128 + signal number`` once a signal arrived (130 for SIGINT, 143 for SIGTERM)."""
        return None if self.signum is None else 128 + self.signum

    @property
    def signal_name(self) -> str | None:
        """The name of the signal received (``SIGTERM``), if any."""
        return None if self.signum is None else signal.Signals(self.signum).name

    def __enter__(self) -> StopSignals:
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.disarm()
        if self._watchdog is not None:
            self._watchdog.cancel()
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]

    def arm(self) -> None:
        """Raise on the first signal from now on, or now if one already came."""
        self.armed = True
        if self.signum is not None:
            self._unwind(self.signum)

    def disarm(self) -> None:
        """Stop raising: from now on a signal is only recorded."""
        self.armed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:
            # A forked child inherited this handler: behave as it would by default.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        first = self.signum is None
        if first:
            self.signum = signum
        if not self.armed:
            return
        if not first:
            self._force()
        self._unwind(signum)

    def _unwind(self, signum: int) -> None:
        LOG.info("Received %s; stopping the serve backend", signal.Signals(signum).name)
        self._watchdog = threading.Timer(self.timeout, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    def _expire(self) -> None:
        if self.armed:
            LOG.warning("The serve backend did not stop within %.1fs", self.timeout)
            self._force()

    def _force(self) -> None:
        try:
            self._on_force()
        finally:
            os._exit(self.exit_status or 1)
