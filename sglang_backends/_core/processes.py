"""Process trees and stop signals: the one module that signals or stops a process.

``serve``, the operator commands' workers and the plugin-author kit stop
processes through it; the operator guide's "What serve guarantees" says how
and why (:mod:`sglang_backends._core.signals` says which signals are which). psutil
is imported only by the functions that walk processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

from sglang_backends._core import console
from sglang_backends._core.signals import signal_name, stop_signals

if TYPE_CHECKING:
    import psutil

__all__ = [
    "StopSignals",
    "become_subreaper",
    "descendants",
    "die_with_parent",
    "exit_status",
    "freeze_and_kill",
    "from_signal",
    "kill_trees",
    "log_overdue",
    "log_received",
    "log_stopped",
    "log_swept",
    "reap",
    "running",
    "send",
    "stop_tree",
]

LOG = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_FREEZE_BOUND = 10.0  # seconds freeze_and_kill() keeps finding new processes
_KILL_WAIT = 5.0  # seconds SIGKILLed processes get to disappear
_POLL = 0.02  # seconds between checks while waiting for processes to end


# -- signals ----------------------------------------------------------------------


# serve's stop messages, worded once for the supervisor and for serve's in-process path.
def log_received(signum: int) -> None:
    LOG.info("Received %s; stopping the serve backend", signal_name(signum))


def log_stopped(backend: str | None, signum: int) -> None:
    LOG.info("Serve backend %sstopped by %s", f"{backend} " if backend else "", signal_name(signum))


def log_swept(count: int) -> None:
    if count:
        LOG.info("Stopped %d remaining process(es)", count)


def log_overdue(timeout: float) -> None:
    """Say that the stop timeout ran out; a timeout of 0 asks for an immediate kill, no failure."""
    if timeout <= 0:
        LOG.info("Stop timeout 0: killing the serve backend at once")
    else:
        LOG.warning("The serve backend did not stop within %.1fs", timeout)


def exit_status(exc: SystemExit) -> int:
    """The exit status *exc* asks for, as Python's own process would end with it.

    An int keeps its low 8 bits (CPython passes ``(int)(long)code`` to ``exit()``), one
    beyond a C long means 255; ``None`` means 0; any other code is printed to stderr and
    means 1.
    """
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        bound = 1 << (8 * struct.calcsize("l") - 1)  # PyLong_AsLong's range
        return code & 0xFF if -bound <= code < bound else 0xFF
    console.say(code)  # as Python prints it, escaped: a plugin wrote it
    return 1


def send(pid: int, signum: int, *, group: bool = False) -> None:
    """Send *signum* to process *pid* (to process group *pid* with *group*); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, signum)


def _send_all(processes: Iterable[psutil.Process], signum: int) -> None:
    import psutil

    for process in processes:
        try:
            process.send_signal(signum)
        except psutil.NoSuchProcess:
            pass
        except psutil.AccessDenied as exc:
            LOG.warning("Cannot stop process %s: %s", process.pid, exc)


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux); whether it worked."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> bool:
    """Have this process get SIGTERM when its parent exits (Linux); whether it worked."""
    return _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class StopSignals:
    """While entered, a stop signal unwinds the main thread, once (SIGINT as KeyboardInterrupt).

    A signal is recorded until :meth:`arm` (then raised at once); a forked
    child takes the default action.

    :param on_signal: given the signal, just before the main thread is unwound.
    :param on_force: called, then the process exits, on a second signal or
        *timeout* seconds after the first; without it a signal is only recorded.
    """

    def __init__(
        self,
        *,
        on_signal: Callable[[int], object] | None = None,
        timeout: float = 0.0,
        on_force: Callable[[], object] | None = None,
    ) -> None:
        self.signum: int | None = None
        self.armed = False
        self._on_signal, self._timeout, self._on_force = on_signal, timeout, on_force
        self._pid = os.getpid()
        self._previous: dict[int, Any] = {}
        self._watchdog: threading.Timer | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {n: signal.signal(n, self._handle) for n in stop_signals()}
            _WATCHING.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.armed = False
        if self._watchdog is not None:
            self._watchdog.cancel()
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        if self in _WATCHING:
            _WATCHING.remove(self)

    def arm(self) -> None:
        """Raise on the first signal from now on, or now if one already came."""
        self.armed = True
        if self.signum is not None:
            self._unwind(self.signum)

    def disarm(self) -> None:
        """Stop raising (for the clean-up): from now on a signal is only recorded."""
        self.armed = False

    def _handle(self, signum: int, frame: object) -> None:
        if os.getpid() != self._pid:
            signal.signal(signum, signal.SIG_DFL)
            send(os.getpid(), signum)
        elif self.signum is None:
            self.signum = signum
            if self.armed:
                self._unwind(signum)
        elif self.armed and self._on_force is not None:
            self._force()

    def _unwind(self, signum: int) -> NoReturn:
        if self._on_signal is not None:
            self._on_signal(signum)
        if self._on_force is not None:
            self._watchdog = threading.Timer(self._timeout, self._expire)
            self._watchdog.daemon = True
            self._watchdog.start()
        raise KeyboardInterrupt() if signum == signal.SIGINT else SystemExit(128 + signum)

    def _expire(self) -> None:
        if self.armed:
            log_overdue(self._timeout)
            self._force()

    def _force(self) -> None:
        try:
            if self._on_force is not None:
                self._on_force()
        finally:
            os._exit(128 + self.signum if self.signum else 1)


#: The :class:`StopSignals` entered in the main thread, innermost last.
_WATCHING: list[StopSignals] = []


def from_signal(exc: BaseException) -> bool:
    """Whether *exc* is a stop signal's unwinding (a ``KeyboardInterrupt`` or
    ``SystemExit`` in the main thread after one came), not plugin code's own raise.

    Where no :class:`StopSignals` watches this process nothing tells them apart, so a
    ``KeyboardInterrupt`` in the main thread is taken as the user's, as Python takes it.
    """
    if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False  # signals unwind the main thread alone
    watching = [stops for stops in _WATCHING if stops._pid == os.getpid()]
    if not watching:
        return isinstance(exc, KeyboardInterrupt)
    return any(stops.signum is not None for stops in watching)


# -- process trees ----------------------------------------------------------------


def running(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of *processes* that have not exited (zombies have; a reused pid is another's)."""
    import psutil

    found = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def descendants(pid: int | None = None, *, itself: bool = False) -> list[psutil.Process]:
    """The running descendants of process *pid* (this one by default), with it if *itself*."""
    import psutil

    try:
        root = psutil.Process(pid)
        found = root.children(recursive=True)
    except psutil.Error:
        return []
    return running([root, *found] if itself else found)


def _wait(done: Callable[[], bool], timeout: float, pause: Callable[[float], object]) -> None:
    """Wait until *done*, checked every :data:`_POLL` s, at most *timeout* s."""
    deadline = time.monotonic() + timeout
    while not done() and (left := deadline - time.monotonic()) > 0:
        pause(min(_POLL, left))


def _reaped(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Reap those of *processes* that are exited children of this one; the running rest."""
    for process in processes if hasattr(os, "WNOHANG") else ():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(process.pid, os.WNOHANG)
    return running(processes)


def freeze_and_kill(
    find: Callable[[], Iterable[psutil.Process]], *, adopted: bool = False
) -> list[psutil.Process]:
    """SIGSTOP what *find* returns until nothing is new (none forks), SIGKILL all; return it.

    A process forking its successor and exiting every millisecond outruns a
    scan of ``/proc``; if it made a session of its own (``setsid``, as a
    daemon does), its process group is stopped whole, forks in flight
    included, as soon as one member is seen: running, or exited and not yet
    reaped by this process when *adopted* (a subreaper whose every child is
    the tree's).
    """
    import psutil

    frozen: dict[psutil.Process, None] = {}  # a Process is its pid and start time
    groups: set[int] = set()
    deadline = time.monotonic() + _FREEZE_BOUND
    while time.monotonic() < deadline:
        found = list(find())  # running processes only: add our children, exited ones too
        children = psutil.Process().children() if adopted else []
        new_groups = _session_groups([*found, *children]) - groups
        for group in new_groups:
            send(group, signal.SIGSTOP, group=True)
        groups |= new_groups
        new = [process for process in running(found) if process not in frozen]
        if not new and not new_groups:
            break
        frozen.update(dict.fromkeys(new))
        _send_all(new, signal.SIGSTOP)
    _send_all(frozen, signal.SIGKILL)
    for group in groups:
        send(group, signal.SIGKILL, group=True)
    _wait(lambda: not _runs_in(groups), _KILL_WAIT, time.sleep)  # members never seen too
    return list(frozen)


def _runs_in(groups: set[int]) -> bool:
    """Whether a process of *groups* still runs (one that exited waits to be reaped).

    Not reaped here: a caller may be waiting for one of its children's status.
    """
    import psutil

    for process in psutil.process_iter() if groups else ():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) in groups and process.status() != psutil.STATUS_ZOMBIE:
                return True
    return False


def reap() -> dict[int, int]:
    """Reap every exited child (adopted orphans too: none is left to init); statuses by pid."""
    statuses = {}
    with contextlib.suppress(ChildProcessError):
        for pid, status in iter(lambda: os.waitpid(-1, os.WNOHANG), (0, 0)):
            statuses[pid] = status
    return statuses


def _session_groups(found: Iterable[psutil.Process]) -> set[int]:
    """The process groups of *found* outside this process's session.

    Only the tree's processes can be in a session one of them made, so such
    a group is the tree's to stop whole.
    """
    own, groups = os.getsid(0), set()
    for process in found:
        with contextlib.suppress(OSError):
            session, group = os.getsid(process.pid), os.getpgid(process.pid)
            if session != own and process.is_running():  # the same process: no reused pid
                groups.add(group)
    return groups


def stop_tree(
    find: Callable[[], list[psutil.Process]],
    timeout: float,
    *,
    pause: Callable[[float], object] = time.sleep,
    forced: Callable[[], bool] = lambda: False,
    adopted: bool = False,
) -> int:
    """SIGTERM what *find* returns, *timeout* s later freeze and kill what is left; how many.

    :param pause: waits between checks (the supervisor takes signals meanwhile).
    :param forced: whether a forced stop came meanwhile: the grace period ends.
    :param adopted: as for :func:`freeze_and_kill`; then every exited child
        is reaped at the end, so that none is left to init.
    """
    try:
        found = find()
        if not found:
            return 0
        LOG.debug("Stopping %d process(es): %s", len(found), [p.pid for p in found])
        if timeout > 0 and not forced():
            _send_all(found, signal.SIGTERM)
            _wait(lambda: not _reaped(found) or forced(), timeout, pause)
            survivors = running(found)
            if survivors and not forced():
                LOG.warning(
                    "Killing %d process(es) still running %.1fs after SIGTERM: %s",
                    len(survivors),
                    timeout,
                    [p.pid for p in survivors],
                )
        killed = freeze_and_kill(find, adopted=adopted)
        _wait(lambda: not _reaped(killed), _KILL_WAIT, pause)
        return len({p.pid for p in [*found, *killed]})
    finally:
        if adopted:
            reap()


def kill_trees(*pids: int, groups: bool = False) -> None:
    """Freeze and SIGKILL processes *pids* and their descendants, and wait for them to go.

    :param groups: each of *pids* leads a process group: stop it all first, kill it last.
    """
    for pid in pids if groups else ():
        send(pid, signal.SIGSTOP, group=True)  # nothing in the group forks from now on
    stop_tree(lambda: [p for pid in pids for p in descendants(pid, itself=True)], 0)
    for pid in pids if groups else ():
        send(pid, signal.SIGKILL, group=True)
