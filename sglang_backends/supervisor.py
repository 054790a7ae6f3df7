"""``serve``'s process model on Linux: nothing the backend starts outlives ``serve``.

:func:`supervise` runs the work in three processes, as tini and dumb-init do
(the operator guide's "Supervision" tells the whole story), each apart for a
requirement:

``serve`` (the *front*)
    Waits for the supervisor and relays stop signals to it. Apart so that a
    program embedding :func:`sglang_backends.serve.main` keeps its children,
    their exit statuses and its signal handlers, and so that a SIGKILL of the
    supervisor leaves a process running no plugin code to sweep the tree.
the supervisor
    A subreaper: relays stop signals, keeps detection's deadline and stops
    every descendant once the backend process has ended. Apart from that
    process to survive its SIGKILL and keep a deadline a plugin holding the
    GIL cannot hold up; apart from the front to survive a SIGKILL of ``serve``.
the backend process
    Chooses, loads and runs the backend (:mod:`sglang_backends.backend_process`).

The front and the supervisor block the stop signals and SIGCHLD before forking
and take them with ``sigtimedwait``, so none is lost; the forked processes end
with ``os._exit``, so that a copy of an embedding program never runs on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from typing import Any, NamedTuple, NoReturn

from sglang_backends import backend_process, processes
from sglang_backends.backend_process import BackendWork, flush, take_role

__all__ = ["SUPPORTED", "supervise"]

LOG = logging.getLogger(__name__)

#: Whether :func:`supervise` can be used here (Linux, with ``fork`` and ``sigtimedwait``).
SUPPORTED: bool = (
    sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(signal, "sigtimedwait")
)

# siginfo's si_code for a signal the kernel sent, such as the terminal's Ctrl+C.
_SI_KERNEL = 0x80
# Seconds between reads of what the backend process says while it chooses a backend.
_POLL = 0.1
# Longest wait for a signal while nothing happens (SIGCHLD brings every event).
_IDLE = 60.0
# The front's longest wait: a stop signal another thread takes waits for the main thread.
_FRONT_IDLE = 1.0
_EXIT_FAILURE = 1


class _Setup(NamedTuple):
    """What the supervisor is started with."""

    front: int
    timeout: float  # the stop timeout
    prog: str
    stops: tuple[int, ...]
    token: str  # the tree's mark
    news: int  # where the supervisor tells the front which process is the backend's


def _error(prog: str, text: str) -> None:
    """Write ``prog: error: text`` to stderr, if it is open."""
    with contextlib.suppress(OSError, ValueError):
        print(f"{prog}: error: {text}", file=sys.stderr, flush=True)


# -- the front ------------------------------------------------------------------


def supervise(work: BackendWork, *, stop_timeout: float, prog: str) -> int:
    """Run *work* in a supervised backend process; return ``serve``'s exit status.

    Call it before any plugin code runs. Returns once every process of the
    tree has ended, with the signal mask and handlers as before.

    :param stop_timeout: seconds between SIGTERM and SIGKILL.
    :param prog: the program name prefixing error lines.
    """
    stops = processes.stop_signals()
    waited = {*stops, signal.SIGCHLD}
    token = f"{os.getpid()}-{os.urandom(8).hex()}"
    taken: list[int] = []  # stop signals another thread took, for the loop to relay
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    previous: dict[int, Any] = {}
    try:
        with contextlib.suppress(ValueError):  # not the main thread: signals stay with the host
            for signum in stops:
                previous[signum] = signal.signal(signum, lambda n, frame: taken.append(n))
            if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
                # Ignored, SIGCHLD would lose the supervisor's exit status.
                previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        news, writer = os.pipe()
        setup = _Setup(os.getpid(), stop_timeout, prog, stops, token, writer)
        flush()
        pid = os.fork()
        if pid == 0:
            os.close(news)
            _supervisor_process(work, setup)
        os.close(writer)
        try:
            code = _wait_for_supervisor(pid, prog, waited, taken)
            return _last_resort(pid, -code, news, setup) if code < 0 else code
        finally:
            os.close(news)
    finally:
        for number, handler in previous.items():
            if handler is not None:
                signal.signal(number, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if callable(signal.getsignal(signal.SIGCHLD)):
            # SIGCHLD was taken here; the program's handler may await its own children.
            processes.send(os.getpid(), signal.SIGCHLD)


def _wait_for_supervisor(pid: int, prog: str, waited: set[int], taken: list[int]) -> int:
    """Relay stop signals to the supervisor till it ends; its exit code (-N: signal N killed it)."""
    while True:
        while taken:
            processes.send(pid, taken.pop(0))
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            _error(prog, f"the serve supervisor (pid {pid}) was reaped elsewhere")
            return _EXIT_FAILURE
        if done:
            return os.waitstatus_to_exitcode(status)
        info = signal.sigtimedwait(waited, _FRONT_IDLE)
        # The terminal signals the whole foreground group: passing it on would double it.
        if info is not None and info.si_signo != signal.SIGCHLD and info.si_code != _SI_KERNEL:
            processes.send(pid, info.si_signo)


def _last_resort(pid: int, signum: int, news: int, setup: _Setup) -> int:
    """The supervisor was killed: sweep the backend process and whatever carries the mark."""
    import psutil

    try:  # the backend process, as the supervisor told: "PID CREATE_TIME"
        os.set_blocking(news, False)
        pid_text, started = os.read(news, 4096).decode("ascii").split()
        backend = psutil.Process(int(pid_text))
        roots = [backend] if repr(backend.create_time()) == started else []
    except (OSError, ValueError, psutil.Error):
        roots = []
    count = backend_process.sweep(roots, setup.token, timeout=setup.timeout)
    _error(
        setup.prog,
        f"the serve supervisor (pid {pid}) was killed by {processes.signal_name(signum)}; "
        f"serve stopped the backend process and the processes it left ({count} in all)",
    )
    return 128 + signum


# -- the supervisor -------------------------------------------------------------


def _supervisor_process(work: BackendWork, setup: _Setup) -> NoReturn:
    """The supervisor's life, in the front's child."""
    import psutil

    status = _EXIT_FAILURE
    try:
        processes.die_with_parent()
        take_role("supervisor")
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # exited children wait to be reaped
        if not processes.become_subreaper():
            LOG.warning("Cannot become a child subreaper; orphaned processes may escape")
        backend_process.mark(setup.token)  # inherited by every process the backend starts
        me = os.getpid()
        reader, writer = os.pipe()
        flush()
        child = os.fork()
        if child == 0:
            os.close(reader)
            os.close(setup.news)
            backend_process.run(
                work, writer, supervisor=me, token=setup.token, stop_timeout=setup.timeout
            )
        os.close(writer)
        supervision = _Supervision(child, reader, setup)
        # Tell the front which process is the backend's, should the supervisor be killed.
        with contextlib.suppress(OSError, psutil.Error):
            os.write(setup.news, f"{child} {psutil.Process(child).create_time()!r}".encode())
        os.close(setup.news)
        status = supervision.run()
    except BaseException:
        LOG.exception("The serve supervisor failed")
    finally:
        flush()
        os._exit(status)


class _Supervision:
    """The supervisor's loop: stop signals, what the backend process says, deadlines."""

    def __init__(self, child: int, channel: int, setup: _Setup) -> None:
        self.child, self.channel, self.setup = child, channel, setup
        os.set_blocking(channel, False)
        self.waited = {*setup.stops, signal.SIGCHLD}
        self.wait_status: int | None = None  # the backend process's, once reaped
        self.signum: int | None = None  # the stop signal, once one came
        self.senders: dict[object, int] = {}  # stop signals by sender
        self.deadline: float | None = None  # for the backend process, once stopped
        self.forced = False
        self.front_gone = False
        self.messages: dict[str, str] = {}  # "backend" and "status", once said
        self.unread = b""
        self.choosing: tuple[float, str] | None = None  # detection's deadline, and why
        self.underway = backend_process.Underway()
        self.overran: str | None = None

    def run(self) -> int:
        """Supervise until the backend process and every descendant have ended."""
        self._check_front()
        while self.wait_status is None:
            now = time.monotonic()
            # Until the backend is chosen, read what the backend process says often.
            if self.forced or not {"backend", "status"} & self.messages.keys():
                pause = _POLL
            else:
                pause = _IDLE if self.deadline is None else self.deadline - now
            if self.choosing is not None and not self.forced:
                pause = min(pause, self.choosing[0] - now)
            self._wait(max(0.0, min(_IDLE, pause)))
            if self.wait_status is not None or self.forced:
                continue
            if self.choosing is not None and time.monotonic() >= self.choosing[0]:
                self._overrun()
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                processes.log_overdue(self.setup.timeout)
                self._kill()
        self._read()
        problem, status = self._verdict()
        count = processes.stop_tree(
            processes.descendants,
            self.setup.timeout,
            pause=self._wait,
            forced=lambda: self.forced,
            adopted=True,  # a subreaper: every child is the tree's
        )
        processes.log_swept(count)
        if self.overran is not None:
            _error(self.setup.prog, self.overran)
            return _EXIT_FAILURE
        if self.signum is None:
            if problem:
                _error(self.setup.prog, problem)
            return status
        if problem:
            LOG.info("While stopping, %s", problem)
        processes.log_stopped(self.messages.get("backend"), self.signum)
        return 128 + self.signum

    def _wait(self, timeout: float) -> None:
        """Wait up to *timeout* s for a signal; reap, read, and act on a stop signal."""
        info = signal.sigtimedwait(self.waited, timeout)
        # Every child is the backend process or one of its orphans.
        self.wait_status = processes.reap().get(self.child, self.wait_status)
        self._read()
        if info is not None and info.si_signo in self.setup.stops:
            self._on_stop_signal(info)
        self._check_front()

    def _read(self) -> None:
        """Take in every complete line the backend process has written."""
        while self.channel >= 0:
            try:
                chunk = os.read(self.channel, 65536)
            except BlockingIOError:
                break
            if not chunk:
                os.close(self.channel)
                self.channel = -1
            self.unread += chunk
        *lines, self.unread = self.unread.split(b"\n")
        for line in lines:
            key, _, value = line.decode("utf-8", "replace").partition(" ")
            if key in ("loading", "loaded", "detecting", "detected"):
                self.underway(key, value)
            elif key == "deadline":
                when, _, why = value.partition(" ")
                with contextlib.suppress(ValueError):
                    self.choosing = (float(when), why)
            else:
                self.messages[key] = value
                self.choosing = None  # a backend was chosen, or the work ended

    def _overrun(self) -> None:
        """Automatic detection overran its deadline: one line, then end the backend process."""
        assert self.choosing is not None
        seconds, _, why = self.choosing[1].partition(" ")
        busy = self.underway.describe()
        self.overran = (
            f"automatic detection did not finish within {seconds} s ({why})"
            f"{': ' + busy if busy else ''}. Disable the plugin that holds it up "
            "(disabled_backends) or choose a backend with --model-type; serve stopped the "
            "backend process"
        )
        self.choosing = None
        self._kill()

    def _check_front(self) -> None:
        if not self.front_gone and os.getppid() != self.setup.front:
            self.front_gone = True
            LOG.warning("serve (pid %d) has ended; stopping the serve backend", self.setup.front)
            self._stop(signal.SIGTERM, forward=True)

    def _on_stop_signal(self, info: Any) -> None:
        sender = "terminal" if info.si_code == _SI_KERNEL else info.si_pid
        count = self.senders[sender] = self.senders.get(sender, 0) + 1
        name = processes.signal_name(info.si_signo)
        if self.signum is None:
            processes.log_received(info.si_signo)
            # The terminal's signal reached the backend process, unless it left the group.
            self._stop(info.si_signo, forward=sender != "terminal" or self._elsewhere())
        elif count > 1 and not self.forced:
            LOG.warning("Received %s again; killing the serve backend and its processes", name)
            self._kill()

    def _elsewhere(self) -> bool:
        """Whether the backend process left the supervisor's process group."""
        try:
            return os.getpgid(self.child) != os.getpgrp()
        except OSError:
            return False

    def _stop(self, signum: int, *, forward: bool) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        if self.wait_status is None:  # else the backend process has ended: the clean-up follows
            if forward:
                processes.send(self.child, signum)
            self.deadline = time.monotonic() + self.setup.timeout

    def _kill(self) -> None:
        """Freeze and SIGKILL every descendant; from now on nothing gets a grace period."""
        self.forced = True
        processes.freeze_and_kill(processes.descendants, adopted=True)

    def _verdict(self) -> tuple[str | None, int]:
        """The problem to report (``None`` when the work finished) and the exit status."""
        code = os.waitstatus_to_exitcode(self.wait_status or 0)
        backend = self.messages.get("backend")
        who = f"serve backend {backend}" if backend else "the serve backend process"
        if code < 0:  # killed by signal -code
            where = "" if backend else " before a backend was chosen"
            return f"{who} was killed by {processes.signal_name(-code)}{where}", 128 - code
        if "status" in self.messages:
            return None, code
        if backend:
            what = f"ended its process with os._exit({code}) without returning from run()"
        else:
            what = f"ended with os._exit({code}) before a backend was chosen"
        return f"{who} {what}; serve stopped the processes it left", code or _EXIT_FAILURE
