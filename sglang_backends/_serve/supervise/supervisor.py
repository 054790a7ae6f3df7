"""``serve``'s process model on Linux: nothing the backend starts outlives ``serve``.

:func:`supervise` runs the work in three processes, as tini and dumb-init do
(the operator guide's "Supervision" tells the whole story), each apart for a
requirement:

``serve`` (the *front*)
    Waits for the supervisor and passes every signal on to it. Apart so that a
    program embedding :func:`sglang_backends._serve.main.main` keeps its children,
    their exit statuses and its signal handlers, and so that a SIGKILL of the
    supervisor leaves a process running no plugin code to sweep the tree.
the supervisor
    A subreaper: passes every signal on to the backend process, keeps
    detection's deadline and stops every descendant once the backend process
    has ended. Apart from that process to survive its SIGKILL and keep a
    deadline a plugin holding the GIL cannot hold up; apart from the front to
    survive a SIGKILL of ``serve``.
the backend process
    Chooses, loads and runs the backend (:mod:`sglang_backends._serve.supervise.backend`).

The supervisor leads a process group of its own, the tree's, which the
backend process and its workers inherit: a signal to ``serve``'s process group
reaches ``serve`` alone, which passes it on, so the backend gets it once. When
``serve`` is the foreground job of a terminal, the tree's group takes the
terminal (as tini gives it to its child), so that Ctrl+C, Ctrl+\\ and Ctrl+Z
reach the backend and its workers directly, once; ``serve`` follows the
tree's stop and continue, so that the shell's job control works
(:mod:`sglang_backends._serve.supervise.job_control`).

The front and the supervisor block every signal they pass on and SIGCHLD
before forking and take them with ``sigtimedwait``, so none is lost (which
signals: :mod:`sglang_backends._core.signals`); the forked processes end with
``os._exit``, so that a copy of an embedding program never runs on.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import sys
import time
from typing import Any, NamedTuple, NoReturn

from sglang_backends._core import console, processes, signals
from sglang_backends._serve.supervise import backend as backend_process
from sglang_backends._serve.supervise.backend import BackendWork, flush, take_role
from sglang_backends._serve.supervise.job_control import JobControl, Terminal

__all__ = ["SUPPORTED", "supervise"]

LOG = logging.getLogger(__name__)

#: Whether :func:`supervise` can be used here (Linux, with ``fork`` and ``sigtimedwait``).
SUPPORTED: bool = (
    sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(signal, "sigtimedwait")
)

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
    relayed: tuple[int, ...]  # every signal passed on to the backend process
    handlers: dict[int, Any]  # the program's handlers of those signals, for the backend process
    token: str  # the tree's mark
    news: int  # where the supervisor tells the front which process is the backend's
    terminal: Terminal | None  # the controlling terminal, for the tree's group to take


def _fork() -> int | str:
    """``os.fork``'s pid, or the one line serve prints when it is refused (a process
    limit, memory).
    """
    flush()
    try:
        return os.fork()
    except OSError as exc:
        limit = " (RLIMIT_NPROC?)" if exc.errno == errno.EAGAIN else ""
        return f"fork failed: {exc.strerror}{limit}"


# -- the front ------------------------------------------------------------------


def supervise(work: BackendWork, *, stop_timeout: float, prog: str) -> int:
    """Run *work* in a supervised backend process; return ``serve``'s exit status.

    Call it before any plugin code runs. Returns once every process of the
    tree has ended, with the signal mask, the handlers and the terminal's
    foreground group as before.

    :param stop_timeout: seconds between SIGTERM and SIGKILL.
    :param prog: the program name prefixing error lines.
    """
    stops, relayed = signals.stop_signals(), signals.relayed_signals()
    take = signals.SignalWait({*relayed, signal.SIGCHLD})
    token = f"{os.getpid()}-{os.urandom(8).hex()}"
    taken: list[int] = []  # signals another thread took, for the loop to relay
    # SIGTTOU too: serve may write to, and hand over, a terminal it is in the background of.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {*take.waited, signal.SIGTTOU})
    previous: dict[int, Any] = {}
    terminal = Terminal()
    pid = -1
    try:
        with contextlib.suppress(ValueError):  # not the main thread: signals stay with the host
            for signum in relayed:
                previous[signum] = signal.signal(signum, lambda n, frame: taken.append(n))
            previous[signal.SIGCONT] = signal.signal(signal.SIGCONT, take.on_continue)
            if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
                # Ignored, SIGCHLD would lose the supervisor's exit status.
                previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if signal.SIGCONT not in previous:
            # Without the handler serve would not see a continue: the tree keeps out of job control.
            terminal.close()
        news, writer = os.pipe()
        foreground = terminal.foreground() == os.getpgrp()
        handlers = {n: h for n, h in previous.items() if n != signal.SIGCHLD and h is not None}
        setup = _Setup(
            front=os.getpid(),
            timeout=stop_timeout,
            prog=prog,
            stops=stops,
            relayed=relayed,
            handlers=handlers,
            token=token,
            news=writer,
            terminal=terminal if foreground else None,
        )
        forked = _fork()
        if isinstance(forked, str):
            os.close(news)
            os.close(writer)
            console.error(prog, forked)
            return _EXIT_FAILURE
        pid = forked
        if pid == 0:
            os.close(news)
            _supervisor_process(work, setup)
        os.close(writer)
        with contextlib.suppress(OSError):  # as the supervisor does, whichever comes first
            os.setpgid(pid, pid)
        try:
            code = _Front(pid, prog, take, taken, JobControl(terminal, pid)).run()
            return _last_resort(pid, -code, news, setup) if code < 0 else code
        finally:
            os.close(news)
    finally:
        terminal.close(back_from=pid)  # the tree's group has ended
        for number, handler in previous.items():
            if handler is not None:
                signal.signal(number, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if callable(signal.getsignal(signal.SIGCHLD)):
            # SIGCHLD was taken here; the program's handler may await its own children.
            processes.send(os.getpid(), signal.SIGCHLD)


class _Front:
    """``serve``'s loop: pass every signal on to the supervisor, follow its stops, until it ends."""

    def __init__(
        self, pid: int, prog: str, take: signals.SignalWait, taken: list[int], jobs: JobControl
    ) -> None:
        self.pid, self.prog, self.take, self.taken, self.jobs = pid, prog, take, taken, jobs

    def run(self) -> int:
        """Relay until the supervisor ends; its exit code (-N: signal N killed it)."""
        while True:
            while self.taken:
                self._relay(self.taken.pop(0))
            if self.take.continued():
                self.jobs.continued()
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                console.error(
                    self.prog, f"the serve supervisor (pid {self.pid}) was reaped elsewhere"
                )
                return _EXIT_FAILURE
            if done and os.WIFSTOPPED(status):
                self.jobs.tree_stopped()
            elif done:
                return os.waitstatus_to_exitcode(status)
            info = self.take(_FRONT_IDLE)
            if info is not None and info.si_signo != signal.SIGCHLD:
                self._relay(info.si_signo)

    def _relay(self, signum: int) -> None:
        processes.send(self.pid, signum)
        self.jobs.relayed(signum)


def _last_resort(pid: int, signum: int, news: int, setup: _Setup) -> int:
    """The supervisor was killed: sweep the backend process and whatever carries the mark."""
    count = backend_process.sweep(backend_process.told(news), setup.token, timeout=setup.timeout)
    console.error(
        setup.prog,
        f"the serve supervisor (pid {pid}) was killed by {signals.signal_name(signum)}; "
        f"serve stopped the backend process and the processes it left ({count} in all)",
    )
    return 128 + signum


# -- the supervisor -------------------------------------------------------------


def _supervisor_process(work: BackendWork, setup: _Setup) -> NoReturn:
    """The supervisor's life, in the front's child."""
    import psutil  # noqa: F401 - before the fork: tell() needs it at once, the backend may

    status = _EXIT_FAILURE
    try:
        processes.die_with_parent()
        with contextlib.suppress(OSError):  # the tree's own group: a group signal reaches serve
            os.setpgid(0, 0)
        if setup.terminal is not None:  # serve is the foreground job: the tree takes the terminal
            setup.terminal.give(os.getpgrp())
            setup.terminal.close()
        take_role("supervisor")
        take = signals.SignalWait({*setup.relayed, signal.SIGCHLD})
        signal.signal(signal.SIGCONT, take.on_continue)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # exited children wait to be reaped
        if not processes.become_subreaper():
            LOG.warning("Cannot become a child subreaper; orphaned processes may escape")
        backend_process.mark(setup.token)  # inherited by every process the backend starts
        me = os.getpid()
        reader, writer = backend_process.channel_pipe()
        child = _fork()
        if isinstance(child, str):
            os.close(reader)
            os.close(writer)
            console.error(setup.prog, child)
            os._exit(status)
        if child == 0:
            os.close(reader)
            os.close(setup.news)
            for signum, handler in setup.handlers.items():  # the program's, as serve started
                signal.signal(signum, handler)
            backend_process.run(
                work, writer, supervisor=me, token=setup.token, stop_timeout=setup.timeout
            )
        os.close(writer)
        supervision = _Supervision(child, reader, setup, take)
        backend_process.tell(setup.news, child)  # should the supervisor be killed
        os.close(setup.news)
        status = supervision.run()
    except BaseException:
        LOG.exception("The serve supervisor failed")
    finally:
        flush()
        os._exit(status)


class _Supervision:
    """The supervisor's loop: signals, what the backend process says, deadlines."""

    def __init__(self, child: int, channel: int, setup: _Setup, take: signals.SignalWait) -> None:
        self.child, self.setup, self.take = child, setup, take
        self.heard = backend_process.Hearing(channel)
        self.wait_status: int | None = None  # the backend process's, once reaped
        self.signum: int | None = None  # the stop signal, once one came
        self.senders: dict[object, int] = {}  # stop signals by sender
        self.deadline: float | None = None  # for the backend process, once stopped
        self.forced = False
        self.front_gone = False
        self.overran: str | None = None

    def run(self) -> int:
        """Supervise until the backend process and every descendant have ended."""
        self._check_front()
        while self.wait_status is None:
            now = time.monotonic()
            # Until the backend is chosen, read what the backend process says often.
            if self.forced or not {"backend", "status"} & self.heard.said.keys():
                pause = _POLL
            else:
                pause = _IDLE if self.deadline is None else self.deadline - now
            if self.heard.choosing is not None and not self.forced:
                pause = min(pause, self.heard.choosing[0] - now)
            self._wait(max(0.0, min(_IDLE, pause)))
            if self.wait_status is not None or self.forced:
                continue
            if self.heard.choosing is not None and time.monotonic() >= self.heard.choosing[0]:
                self._overrun()
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                processes.log_overdue(self.setup.timeout)
                self._kill()
        self.heard.read()
        problem, status = self.heard.verdict(self.wait_status or 0)
        count = processes.stop_tree(
            processes.descendants,
            self.setup.timeout,
            pause=self._wait,
            forced=lambda: self.forced,
            adopted=True,  # a subreaper: every child is the tree's
        )
        processes.log_swept(count)
        if self.overran is not None:
            console.error(self.setup.prog, self.overran)
            return _EXIT_FAILURE
        if self.signum is None:
            if problem:
                console.error(self.setup.prog, problem)
            return status
        if problem:
            LOG.info("While stopping, %s", problem)
        processes.log_stopped(self.heard.said.get("backend"), self.signum)
        return 128 + self.signum

    def _wait(self, timeout: float) -> None:
        """Wait up to *timeout* s for a signal; reap, read, and act on the signal."""
        info = self.take(timeout)
        # Every child is the backend process or one of its orphans.
        self.wait_status = processes.reap().get(self.child, self.wait_status)
        self.heard.read()
        if info is not None and info.si_signo in self.setup.stops:
            self._on_stop_signal(info)
        elif info is not None and info.si_signo != signal.SIGCHLD:
            self._relay(info)
        if self.take.continued() and self._elsewhere():  # the front continued the tree's group
            self._send(signal.SIGCONT)
        self._check_front()

    def _send(self, signum: int) -> None:
        """Send *signum* to the backend process, unless it has ended."""
        if self.wait_status is None:
            processes.send(self.child, signum)

    def _relay(self, info: signal.struct_siginfo) -> None:
        """Pass a signal other than a stop signal on to the backend process, once (not one it
        has, :meth:`_delivered`); SIGTSTP then stops the supervisor too, which serve follows."""
        if not self._delivered(info):
            self._send(info.si_signo)
        if info.si_signo == signal.SIGTSTP:
            processes.send(os.getpid(), signal.SIGSTOP)

    def _overrun(self) -> None:
        """Automatic detection overran its deadline: one line, then end the backend process."""
        self.overran = self.heard.overrun()
        self._kill()

    def _check_front(self) -> None:
        if not self.front_gone and os.getppid() != self.setup.front:
            self.front_gone = True
            LOG.warning("serve (pid %d) has ended; stopping the serve backend", self.setup.front)
            self._stop(signal.SIGTERM, forward=True)

    def _on_stop_signal(self, info: signal.struct_siginfo) -> None:
        sender = "terminal" if signals.from_kernel(info) else info.si_pid
        count = self.senders[sender] = self.senders.get(sender, 0) + 1
        name = signals.signal_name(info.si_signo)
        if self.signum is None:
            processes.log_received(info.si_signo)
            self._stop(info.si_signo, forward=not self._delivered(info))
        elif count > 1 and not self.forced:
            LOG.warning("Received %s again; killing the serve backend and its processes", name)
            self._kill()

    def _delivered(self, info: signal.struct_siginfo) -> bool:
        """Whether the terminal gave the backend process *info*'s signal (in the tree's group)."""
        return signals.from_kernel(info) and not self._elsewhere()

    def _elsewhere(self) -> bool:
        """Whether the backend process left the tree's process group."""
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
                self._send(signum)
            self.deadline = time.monotonic() + self.setup.timeout

    def _kill(self) -> None:
        """Freeze and SIGKILL every descendant; from now on nothing gets a grace period."""
        self.forced = True
        processes.freeze_and_kill(processes.descendants, adopted=True)
