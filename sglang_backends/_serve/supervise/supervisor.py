"""``serve``'s process model on Linux: nothing the backend starts outlives ``serve``.

:func:`supervise` runs the work in three processes, as tini and dumb-init do
(the operator guide's "Supervision" tells the whole story), each apart for a
requirement:

``serve`` (the *front*)
    Waits for the supervisor and passes every signal on to it. Apart so that a
    program embedding :func:`sglang_backends._serve.main.main` keeps its children,
    their exit statuses and its signal handlers, and so that a SIGKILL of the
    supervisor leaves a process running no plugin code to sweep the tree.
the supervisor (:mod:`.subreaper`, which imports psutil: this module does not)
    A subreaper: passes every signal on to the backend process, keeps
    detection's deadline and stops every descendant once the backend process
    has ended. Apart from that process to survive its SIGKILL and keep a
    deadline a plugin holding the GIL cannot hold up; apart from the front to
    survive a SIGKILL of ``serve``.
the backend process
    Chooses, loads and runs the backend, forked by the supervisor; what it tells the
    supervisor is :mod:`sglang_backends._serve.supervise.backend`'s.

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
from typing import TYPE_CHECKING, Any, NamedTuple

from sglang_backends._core import console, processes, signals
from sglang_backends._core.console import EXIT_FAILURE
from sglang_backends._core.names import PROG
from sglang_backends._serve.supervise import job_control
from sglang_backends._serve.supervise.job_control import Terminal

if TYPE_CHECKING:
    from sglang_backends._serve.supervise.backend import BackendWork

LOG = logging.getLogger(__name__)

#: Whether :func:`supervise` can be used here: Linux, where Python has ``fork`` and
#: ``sigtimedwait``.
SUPPORTED: bool = sys.platform.startswith("linux")

# The front's longest wait: a stop signal another thread takes waits for the main thread.
_FRONT_IDLE = 1.0


class Setup(NamedTuple):
    """What the supervisor is started with."""

    front: int
    # The stop timeout.
    timeout: float
    # The program's handlers of the signals taken, for the backend process.
    handlers: dict[int, Any]
    # The tree's mark.
    token: str
    # Where the supervisor tells the front which process is the backend's.
    news: int
    # The controlling terminal, for the tree's group to take.
    terminal: Terminal | None


def fork() -> int | None:
    """``os.fork``'s pid; ``None`` when it is refused (a process limit, memory): then
    serve's error is printed.
    """
    # So that a buffered line is not written twice.
    console.flush()
    try:
        return os.fork()
    except OSError as exc:
        limit = " (RLIMIT_NPROC?)" if exc.errno == errno.EAGAIN else ""
        console.error(PROG, f"fork failed: {exc.strerror}{limit}")
    return None


# -- the front ------------------------------------------------------------------


def supervise(work: BackendWork, *, stop_timeout: float) -> int:
    """Run *work* in a supervised backend process; return ``serve``'s exit status.

    Call it before any plugin code runs. Returns once every process of the
    tree has ended, with the signal mask, the handlers and the terminal's
    foreground group as before.

    :param stop_timeout: seconds between SIGTERM and SIGKILL.
    """
    relayed = signals.relayed_signals()
    take = signals.SignalWait({*relayed, signal.SIGCHLD})
    # Signals another thread took, for the loop to relay.
    taken: list[int] = []
    news, writer = os.pipe()
    # SIGTTOU too: serve may write to, and hand over, a terminal it is in the background of.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {*take.waited, signal.SIGTTOU})
    previous: dict[int, Any] = {}
    terminal = Terminal()
    pid: int | None = None
    try:
        # Not the main thread: signals stay with the host.
        with contextlib.suppress(ValueError):
            for signum in relayed:
                previous[signum] = signal.signal(signum, lambda n, frame: taken.append(n))
            previous[signal.SIGCONT] = signal.signal(signal.SIGCONT, take.on_continue)
            if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
                # Ignored, SIGCHLD would lose the supervisor's exit status.
                previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if signal.SIGCONT not in previous:
            # Without the handler serve would not see a continue: the tree keeps out of job control.
            terminal.close()
        setup = Setup(
            front=os.getpid(),
            timeout=stop_timeout,
            handlers={n: h for n, h in previous.items() if n != signal.SIGCHLD and h is not None},
            token=f"{os.getpid()}-{os.urandom(8).hex()}",
            news=writer,
            terminal=terminal if terminal.foreground() == os.getpgrp() else None,
        )
        pid = fork()
        if pid is None:
            return EXIT_FAILURE
        if pid:
            # As the supervisor does, whichever comes first.
            with contextlib.suppress(OSError):
                os.setpgid(pid, pid)
            code = _front(pid, take, taken, terminal)
            if code >= 0:
                return code
        # psutil: in the supervisor's process; in the front only once the supervisor was killed
        from sglang_backends._serve.supervise import subreaper

        if pid == 0:
            os.close(news)
            subreaper.run(work, setup)
        count = subreaper.sweep(subreaper.read_backend_pid(news), setup.token, timeout=stop_timeout)
        console.error(
            PROG,
            f"the serve supervisor (pid {pid}) was killed by {signals.signal_name(-code)}; "
            f"serve stopped the backend process and the processes it left ({count} in all)",
        )
        return 128 - code
    finally:
        os.close(news)
        os.close(writer)
        # The tree's group has ended.
        terminal.close(back_from=pid)
        for number, handler in previous.items():
            if handler is not None:
                signal.signal(number, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if callable(signal.getsignal(signal.SIGCHLD)):
            # SIGCHLD was taken here; the program's handler may await its own children.
            processes.send(os.getpid(), signal.SIGCHLD)


def _front(pid: int, take: signals.SignalWait, taken: list[int], terminal: Terminal) -> int:
    """``serve``'s loop: pass every signal on to the supervisor, process *pid*, and follow its
    stops (the shell's job control, on *terminal*) until it ends; its exit code (-N: signal
    N killed it).
    """
    while True:
        while taken:
            signum = taken.pop(0)
            processes.send(pid, signum)
            job_control.relayed(signum)
        if take.continued():
            job_control.continued(terminal, pid)
        try:
            done, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        except ChildProcessError:
            console.error(PROG, f"the serve supervisor (pid {pid}) was reaped elsewhere")
            return EXIT_FAILURE
        if done and os.WIFSTOPPED(status):
            job_control.tree_stopped(terminal, pid)
        elif done:
            return os.waitstatus_to_exitcode(status)
        info = take(_FRONT_IDLE)
        if info is not None and info.si_signo != signal.SIGCHLD:
            # Relayed at once, as another thread's.
            taken.append(info.si_signo)
