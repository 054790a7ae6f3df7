"""``serve``'s job control: the tree's process group shares ``serve``'s terminal and job.

When ``serve`` is the foreground job of a terminal, the tree's group takes
the terminal (as tini gives it to its child), so that ``Ctrl+C``, ``Ctrl+\\``
and ``Ctrl+Z`` reach the backend and its workers directly, once; ``serve`` follows
the tree's stop and continue (:func:`tree_stopped`, :func:`continued`), so that the shell's job
control works. Where no shell can continue the job (PID 1 of ``docker run
-it``, a session leader) Ctrl+Z is ignored, as the kernel ignores it there.
Signals are sent through :mod:`sglang_backends._core.processes`.
"""

from __future__ import annotations

import contextlib
import os
import signal

from sglang_backends._core import processes


class Terminal:
    """The controlling terminal, opened (``fd`` is -1 without one): whose foreground it is."""

    def __init__(self) -> None:
        try:
            self.fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            self.fd = -1

    def close(self, *, back_from: int | None = None) -> None:
        """Close it; first take it back from group *back_from* (the tree's, ended) if it has it."""
        if back_from and self.foreground() == back_from:
            self.give(os.getpgrp())
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def foreground(self) -> int:
        """The terminal's foreground process group, or -1 (closed too: EBADF)."""
        try:
            return os.tcgetpgrp(self.fd)
        except OSError:
            return -1

    def give(self, group: int) -> None:
        """Make *group* the foreground group (SIGTTOU blocked: a background caller may)."""
        with contextlib.suppress(OSError):
            os.tcsetpgrp(self.fd, group)


def orphaned() -> bool:
    """Whether no shell can continue serve's job: no process from serve up has a parent in
    another process group of the same session (POSIX's orphaned group, as PID 1 of a
    container or a session leader is). The kernel ignores a terminal's stop for such a job.
    """
    import psutil

    group = os.getpgrp()
    session = os.getsid(0)
    with contextlib.suppress(OSError, psutil.Error):
        for parent in psutil.Process().parents():
            if os.getpgid(parent.pid) != group:
                return os.getsid(parent.pid) != session
    return True


def relayed(signum: int) -> None:
    """*signum* was passed on to the tree: SIGTSTP stops serve, as it stops a process."""
    if signum == signal.SIGTSTP and not orphaned():
        # The tree stops itself.
        processes.send(os.getpid(), signal.SIGSTOP)


def tree_stopped(terminal: Terminal, tree: int) -> None:
    """The tree's leader, process *tree*, stopped: if its group holds *terminal*, that was
    Ctrl+Z.

    Then serve's own job stops too, so that the shell sees it stopped and
    takes the terminal back; without a shell to continue it, the tree
    continues at once, as the kernel ignores Ctrl+Z there.
    """
    if terminal.foreground() != tree:
        return
    if orphaned():
        processes.send(tree, signal.SIGCONT, group=True)
    else:
        processes.send(os.getpgrp(), signal.SIGSTOP, group=True)


def continued(terminal: Terminal, tree: int) -> None:
    """serve was continued (fg, bg, SIGCONT): continue the tree's group, led by *tree*; give
    it *terminal* on fg.
    """
    # In the foreground again: fg.
    if terminal.foreground() == os.getpgrp():
        terminal.give(tree)
    processes.send(tree, signal.SIGCONT, group=True)
