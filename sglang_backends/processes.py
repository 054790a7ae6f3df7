"""Process helpers on psutil: stop signals, and stopping process trees so nothing escapes.

:mod:`sglang_backends.supervisor` owns ``serve``'s process model on Linux
and uses :func:`stop_signals`, :func:`become_subreaper`, :func:`running`,
:func:`freeze_and_kill` and :func:`sweep`; the operator commands use
:func:`kill_tree` and :func:`kill_group` on their isolated workers. Elsewhere ``serve`` runs the
backend in its own process with :class:`StopSignals` and
:func:`terminate_descendants`, as SGLang does.

Why freeze before killing: a process that forks continuously can replace
itself faster than a scan-then-kill pass finds it. A stopped process
cannot fork, so SIGSTOP to every process found, scanning again until a
scan finds no new one, leaves a set that SIGKILL then ends for good.

Freezing also keeps a tree whole while it is walked: a process killed
before its children were found would hand them to init.

Why a marker: once ``serve``'s supervisor (the subreaper) is gone, a
process that double-forked or called ``setsid()`` has init as its parent
and no tree leads to it. :func:`mark` marks a process and everything it
starts, in two ways, and :func:`sweep` finds either: :data:`MARKER` in the
environment, which ``exec`` keeps (as Jenkins' ProcessTreeKiller marks
builds), and a one-page shared memory mapping named after the token, which
``fork`` keeps (``/proc/PID/environ`` of a forked copy still shows the
environment its ancestor was started with).

psutil is imported only by the functions that walk processes, so that
``serve``'s own process can ask for :func:`stop_signals` without it.

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

from sglang_backends.settings import DEFAULT_STOP_TIMEOUT

if TYPE_CHECKING:
    import psutil

__all__ = [
    "MARKER",
    "StopRequested",
    "StopSignals",
    "become_subreaper",
    "freeze_and_kill",
    "kill_group",
    "kill_processes",
    "kill_tree",
    "mark",
    "marked",
    "running",
    "stop_signals",
    "sweep",
    "terminate_descendants",
    "wait_gone",
]

LOG = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36

#: The environment variable every process ``serve``'s backend starts carries:
#: the tree's token, so :func:`sweep` finds processes that left the tree.
MARKER = "SGLANG_BACKENDS_SERVE_TREE"

# Seconds freeze_and_kill() keeps finding new processes before it kills what it has.
_FREEZE_BOUND = 10.0
# Seconds between checks while waiting for processes to end.
_WAIT_POLL = 0.02


class StopRequested(SystemExit):
    """Raised in the backend's main thread by a stop signal: ``SystemExit(128 + N)``.

    Its own class, so that code guarding plugin calls (which turns a
    plugin's ``sys.exit()`` into a load error) lets the operator's stop
    through: a SIGTERM during an import is ``serve`` being stopped, not the
    plugin exiting.
    """


def stop_signals() -> tuple[int, ...]:
    """The signals that stop ``serve`` and the commands' workers: SIGTERM, SIGINT, SIGQUIT, SIGHUP.

    SIGHUP only when it is not ignored: ``nohup`` ignores it on purpose, so
    that closing the terminal does not stop the program. SIGINT and SIGQUIT
    are stop signals even when inherited ignored, as a shell starts a
    background job.
    """
    found = [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        found.append(signal.SIGHUP)
    return tuple(found)


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
    import psutil

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
    import psutil

    processes = []
    for pid in pids:
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _signal_all(processes, psutil.Process.kill)
    wait_gone(processes, timeout)


def kill_tree(pid: int, *, timeout: float = 5.0, group: bool = False) -> None:
    """Freeze and SIGKILL process *pid* and every descendant of it; wait up to *timeout* s.

    :param group: *pid* leads a process group (a session of its own): its
        members get SIGSTOP first and SIGKILL last too, even those that left
        the tree.
    """
    import psutil

    def tree() -> list[psutil.Process]:
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    if group:
        _signal_group(pid, signal.SIGSTOP)  # nothing in the group forks from now on
    killed = freeze_and_kill(tree)
    if group:
        _signal_group(pid, signal.SIGKILL)
    wait_gone(killed, timeout)


def kill_group(pgid: int) -> None:
    """SIGKILL what is left of process group *pgid*."""
    _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    if hasattr(os, "killpg"):
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def freeze_and_kill(find: Callable[[], Iterable[psutil.Process]]) -> list[psutil.Process]:
    """SIGKILL every process *find* returns, freezing them first so none can fork meanwhile.

    Each process found gets SIGSTOP; *find* is called again until it returns
    no process not yet stopped (or :data:`_FREEZE_BOUND` seconds pass), then
    every one gets SIGKILL. Does not wait for them: the caller reaps or
    waits as it must (a supervisor keeps its own child's exit status).
    Returns the processes signalled.
    """
    import psutil

    frozen: dict[tuple[int, float], psutil.Process] = {}
    deadline = time.monotonic() + _FREEZE_BOUND
    while time.monotonic() < deadline:
        new = []
        for process in running(find()):
            try:
                key = (process.pid, process.create_time())
            except psutil.Error:
                continue
            if key not in frozen:
                frozen[key] = process
                new.append(process)
        if not new:
            break
        _signal_all(new, lambda p: p.send_signal(signal.SIGSTOP))
    processes = list(frozen.values())
    _signal_all(processes, psutil.Process.kill)
    return processes


# The marks made here: a mapping must outlive the call that made it.
_MARKS: list[object] = []


def mark(token: str) -> None:
    """Mark this process and every process it starts from now on as *token*'s (Linux).

    Adds *token* to :data:`MARKER` in the environment (tokens separated by
    spaces, so a ``serve`` run by a backend keeps the outer tree's mark),
    and maps a page of a memory file named ``MARKER=token``
    (``/proc/PID/maps`` shows it in every forked copy).
    """
    os.environ[MARKER] = " ".join([*os.environ.get(MARKER, "").split(), token])
    if not hasattr(os, "memfd_create"):
        return
    import mmap

    try:
        fd = os.memfd_create(f"{MARKER}={token}", 0)
    except OSError:
        return
    try:
        os.ftruncate(fd, mmap.PAGESIZE)
        _MARKS.append(mmap.mmap(fd, mmap.PAGESIZE))
    except OSError:
        pass
    finally:
        os.close(fd)


def _carries(process: psutil.Process, token: str) -> bool:
    """Whether *process* carries *token*'s mark (see :func:`mark`)."""
    import psutil

    try:
        if token in process.environ().get(MARKER, "").split():
            return True
    except (psutil.Error, OSError, ValueError):
        return False
    try:
        with open(f"/proc/{process.pid}/maps", "rb") as maps:
            return f"/memfd:{MARKER}={token} ".encode() in maps.read()
    except OSError:
        return False


def marked(token: str) -> list[psutil.Process]:
    """Live processes, other than this one, that carry *token*'s mark (those readable here)."""
    import psutil

    me = os.getpid()
    return running(p for p in psutil.process_iter() if p.pid != me and _carries(p, token))


def sweep(roots: Iterable[psutil.Process], token: str | None, *, timeout: float) -> int:
    """Stop *roots*, their descendants and every process marked *token*; return how many.

    For when the process that watched them has gone (the ``serve``
    supervisor, killed): none of them need be this process's child. They
    get SIGTERM and *timeout* seconds to end, then the survivors and any
    newcomers are frozen and killed (:func:`freeze_and_kill`).
    """
    import psutil

    roots = list(roots)

    def find() -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        for top in [*running(roots), *(marked(token) if token is not None else ())]:
            found[top.pid] = top
            try:
                found.update((p.pid, p) for p in top.children(recursive=True))
            except psutil.Error:
                pass
        return running(found.values())

    first = find()
    if not first:
        return 0
    seen = {p.pid for p in first}
    if timeout > 0:
        _signal_all(first, psutil.Process.terminate)
        wait_gone(first, timeout)
    killed = freeze_and_kill(find)
    seen.update(p.pid for p in killed)
    wait_gone(killed, DEFAULT_STOP_TIMEOUT)
    return len(seen)


def wait_gone(processes: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to *timeout* s until none of *processes* runs; return those still running.

    A zombie counts as gone (unlike for ``psutil.wait_procs``, which waits
    until its parent reaps it: init may take its time); those that are this
    process's children are reaped.
    """
    deadline = time.monotonic() + timeout
    while True:
        _reap(processes)
        alive = running(processes)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(_WAIT_POLL)


def running(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of *processes* that have not exited (zombies have)."""
    import psutil

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
    import psutil

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
            alive = wait_gone(found, timeout)
            if alive:
                LOG.warning(
                    "Killing %d process(es) still running %.1fs after SIGTERM: %s",
                    len(alive),
                    timeout,
                    [p.pid for p in alive],
                )
        _signal_all(alive, psutil.Process.kill)
        wait_gone(alive, DEFAULT_STOP_TIMEOUT)
        _reap(found)
    return len(seen)


class StopSignals:
    """The stop signals (:func:`stop_signals`) stop the backend by unwinding the main thread.

    Used where ``serve`` runs the backend in its own process (not Linux).
    Entering installs the handlers, which only record a signal; :meth:`arm`
    (called first thing inside the guarded ``try``) makes the first signal
    raise :class:`KeyboardInterrupt` (SIGINT) or :class:`StopRequested`
    (the others) in the main thread, and raises at once for a signal that came
    while the handlers were being installed, so none is lost. If ``run()``
    has not unwound *timeout* seconds later, or a second signal arrives,
    *on_force* runs and the process exits at once. Disarmed (during
    cleanup), a signal is only recorded. In a forked child the default
    action applies.

    :param timeout: how long ``run()`` may take to unwind.
    :param on_force: called before a forced exit (to kill descendants).
    """

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
        for signum in stop_signals():
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
        raise StopRequested(128 + signum)

    def _expire(self) -> None:
        if self.armed:
            LOG.warning("The serve backend did not stop within %.1fs", self.timeout)
            self._force()

    def _force(self) -> None:
        try:
            self._on_force()
        finally:
            os._exit(self.exit_status or 1)
