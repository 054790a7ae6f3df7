"""Process trees: find, stop and kill a process and every descendant, orphans included.

The other half of :mod:`sglang_backends._core.processes` (signals): what walks
processes, with psutil, and makes this process a subreaper. Imported by the
processes that stop trees (the supervisor, the operator commands' workers, the
kit's checks); ``serve``'s own process and the pytest plugin import it only
once they stop something.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator

import psutil

from sglang_backends._core.processes import send

LOG = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
# Seconds freeze_and_kill() keeps finding new processes.
_FREEZE_BOUND = 10.0
# Seconds SIGKILLed processes get to disappear.
_KILL_WAIT = 5.0
# Seconds between checks while waiting for processes to end.
_POLL = 0.02


def _send_all(processes: Iterable[psutil.Process], signum: int) -> None:
    for process in processes:
        try:
            process.send_signal(signum)
        except psutil.NoSuchProcess:
            pass
        except psutil.AccessDenied as exc:
            LOG.warning("Cannot stop process %s: %s", process.pid, exc)


def _prctl(option: int, value: object) -> bool:
    """Linux's ``prctl(option, value)``, *value* a number or a pointer (:func:`ctypes.byref`);
    whether it worked (elsewhere libc has none)."""
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux); whether it worked."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


@contextlib.contextmanager
def adopting_orphans() -> Iterator[bool]:
    """Within it, this process is a subreaper (:func:`become_subreaper`), so that a check
    sees, kills and reaps what a double fork left; then it is again what it was. Yields
    whether it is one: not where ``prctl`` is unavailable, where orphans go to init unseen.
    """
    was = ctypes.c_int()
    known = _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was))
    adopting = become_subreaper()
    try:
        yield adopting
    finally:
        if adopting and known and not was.value:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)


def die_with_parent() -> bool:
    """Have this process get SIGTERM when its parent exits (Linux); whether it worked."""
    return _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def running(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of *processes* that have not exited (zombies have; a reused pid is another's)."""
    found = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def descendants(pid: int | None = None, *, itself: bool = False) -> list[psutil.Process]:
    """The running descendants of process *pid* (this one by default), with it if *itself*."""
    try:
        root = psutil.Process(pid)
        found = root.children(recursive=True)
    except psutil.Error:
        return []
    return running([root, *found] if itself else found)


def trees(pids: Iterable[int]) -> list[psutil.Process]:
    """The running processes *pids* and their descendants, each once."""
    return list(dict.fromkeys(p for pid in pids for p in descendants(pid, itself=True)))


def _wait(done: Callable[[], bool], timeout: float, pause: Callable[[float], object]) -> None:
    """Wait until *done*, checked every :data:`_POLL` s, at most *timeout* s."""
    deadline = time.monotonic() + timeout
    while not done() and (left := deadline - time.monotonic()) > 0:
        pause(min(_POLL, left))


def _reaped(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Reap those of *processes* that are exited children of this one; the running rest.

    Each is reaped once it is seen to have exited, never before: one that exits between a
    reap and the look would be left a zombie.
    """
    alive = running(processes)
    for process in processes:
        if process not in alive:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(process.pid, os.WNOHANG)
    return alive


def freeze_and_kill(
    find: Callable[[], list[psutil.Process]], *, adopted: bool = False
) -> list[psutil.Process]:
    """SIGSTOP what *find* returns until nothing is new (none forks), SIGKILL all; return it.

    A process forking its successor and exiting every millisecond outruns a
    scan of ``/proc``; if it made a session of its own (``setsid``, as a
    daemon does), its process group is stopped whole, forks in flight
    included, as soon as one member is seen: running, or exited and not yet
    reaped by this process when *adopted* (a subreaper whose every child is
    the tree's).
    """
    # A Process compares by its pid and start time.
    frozen: set[psutil.Process] = set()
    groups: set[int] = set()
    deadline = time.monotonic() + _FREEZE_BOUND
    while time.monotonic() < deadline:
        # Running processes only: add our children, exited ones too.
        found = find()
        children = psutil.Process().children() if adopted else []
        new_groups = _session_groups([*found, *children]) - groups
        for group in new_groups:
            send(group, signal.SIGSTOP, group=True)
        groups |= new_groups
        new = set(running(found)) - frozen
        if not new and not new_groups:
            break
        frozen |= new
        _send_all(new, signal.SIGSTOP)
    _send_all(frozen, signal.SIGKILL)
    for group in groups:
        send(group, signal.SIGKILL, group=True)
    # Wait for every member of the groups, those never seen too.
    _wait(lambda: not _runs_in(groups), _KILL_WAIT, time.sleep)
    return list(frozen)


def _runs_in(groups: set[int]) -> bool:
    """Whether a process of *groups* still runs (one that exited waits to be reaped).

    Not reaped here: a caller may be waiting for one of its children's status.
    """
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
    own = os.getsid(0)
    groups = set()
    for process in found:
        with contextlib.suppress(OSError):
            session = os.getsid(process.pid)
            group = os.getpgid(process.pid)
            # The same process: no reused pid.
            if session != own and process.is_running():
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
        return len({*found, *killed})
    finally:
        if adopted:
            reap()


def listening(pid: int) -> set[tuple[str, int]]:
    """The sockets process *pid* listens on, ``(address, port)``; empty when psutil cannot
    tell. Its processes are :func:`descendants`."""
    try:
        conns = psutil.Process(pid).net_connections(kind="inet")
    except psutil.Error:
        return set()
    return {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}


def kill_trees(*pids: int, groups: bool = False) -> None:
    """Freeze and SIGKILL processes *pids* and their descendants, and wait for them to go.

    :param groups: each of *pids* leads a process group: stop it all first, kill it last.
    """
    for pid in pids if groups else ():
        # Nothing in the group forks from now on.
        send(pid, signal.SIGSTOP, group=True)
    stop_tree(lambda: trees(pids), 0)
    for pid in pids if groups else ():
        send(pid, signal.SIGKILL, group=True)


def kill_left(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of *processes* still running, each killed now with its descendants
    (:func:`kill_trees`): what a check reports as left running."""
    left = running(processes)
    kill_trees(*(process.pid for process in left))
    return left
