"""The supervisor's process on Linux, forked by ``serve`` (:mod:`.supervisor`, the front).

A subreaper over the tree: it takes the tree's mark (:func:`mark`), forks the
backend process (:func:`_backend_process`), passes every signal on to it,
keeps detection's deadline and stops every descendant once the backend
process has ended. The mark, which every process it starts inherits, lets
the front and the backend process stop (:func:`sweep`) what the backend
started should the supervisor be killed; the supervisor tells the front
which process is the backend's (:func:`send_backend_pid`, :func:`read_backend_pid`). psutil is
imported here, never in the front.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import signal
import time
from typing import NoReturn

import psutil

from sglang_backends._core import console, processes, signals, tree
from sglang_backends._core.console import EXIT_FAILURE
from sglang_backends._core.names import PROG
from sglang_backends._serve.supervise.backend import (
    BackendWork,
    Channel,
    ChannelReader,
    channel_pipe,
    set_role_title,
)
from sglang_backends._serve.supervise.supervisor import Setup, fork

LOG = logging.getLogger(__name__)

# Seconds between reads of what the backend process says while it chooses a backend.
_POLL = 0.1
# Longest wait for a signal while nothing happens (SIGCHLD brings every event).
_IDLE = 60.0


def run(work: BackendWork, setup: Setup) -> NoReturn:
    """The supervisor's life, in the front's child."""
    status = EXIT_FAILURE
    try:
        tree.die_with_parent()
        # The tree's own group: a group signal reaches serve.
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        # serve is the foreground job: the tree takes the terminal.
        if setup.terminal is not None:
            setup.terminal.give(os.getpgrp())
            setup.terminal.close()
        set_role_title("supervisor")
        # The signals serve takes, as serve chose them: their dispositions are inherited.
        take = signals.SignalWait({*signals.relayed_signals(), signal.SIGCHLD})
        signal.signal(signal.SIGCONT, take.on_continue)
        # Exited children wait to be reaped.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if not tree.become_subreaper():
            LOG.warning("Cannot become a child subreaper; orphaned processes may escape")
        # The mark is inherited by every process the backend starts.
        mark(setup.token)
        me = os.getpid()
        reader, writer = channel_pipe()
        child = fork()
        if child is None:
            processes.exit_now(status)
        if child == 0:
            os.close(reader)
            os.close(setup.news)
            # The program's own handlers, as serve started.
            for signum, handler in setup.handlers.items():
                signal.signal(signum, handler)
            _backend_process(work, writer, me, setup)
        os.close(writer)
        supervision = _Supervision(child, reader, setup, take)
        # The front needs it should the supervisor be killed.
        send_backend_pid(setup.news, child)
        os.close(setup.news)
        status = supervision.run()
    except BaseException:
        LOG.exception("The serve supervisor failed")
    finally:
        console.flush()
        processes.exit_now(status)


class _Supervision:
    """The supervisor's loop: signals, what the backend process says, deadlines."""

    def __init__(self, child: int, channel: int, setup: Setup, take: signals.SignalWait) -> None:
        self.child = child
        self.setup = setup
        self.take = take
        self.heard = ChannelReader(channel)
        # The backend process's, once reaped.
        self.wait_status: int | None = None
        # The stop signal, once one came.
        self.signum: int | None = None
        # What was under way when it came (``while loading 'x' (dist)``).
        self.during = ""
        # Who sent a stop signal.
        self.senders: set[object] = set()
        # For the backend process, once stopped.
        self.deadline: float | None = None
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
                # One line, then end the backend process.
                self.overran = self.heard.overrun()
                self._kill()
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                processes.log_overdue(self.setup.timeout, self.heard.said.get("backend"))
                self._kill()
        self.heard.read()
        problem, status = self.heard.verdict(self.wait_status or 0)
        count = tree.stop_tree(
            tree.descendants,
            self.setup.timeout,
            pause=self._wait,
            forced=lambda: self.forced,
            # A subreaper: every child is the tree's.
            adopted=True,
        )
        processes.log_swept(count)
        if self.overran is not None:
            console.error(PROG, self.overran)
            return EXIT_FAILURE
        if self.signum is None:
            if problem:
                console.error(PROG, problem)
            return status
        if problem:
            LOG.info("While stopping, %s", problem)
        backend = self.heard.said.get("backend")
        processes.log_stopped(backend, self.signum, "" if backend else self.during)
        return 128 + self.signum

    def _wait(self, timeout: float) -> None:
        """Wait up to *timeout* s for a signal; reap, read, and act on the signal."""
        info = self.take(timeout)
        # Every child is the backend process or one of its orphans.
        self.wait_status = tree.reap().get(self.child, self.wait_status)
        self.heard.read()
        # First: serve's death sends the supervisor SIGTERM (tree.die_with_parent), which
        # is that death, said as such, not a stop signal someone sent.
        self._check_front()
        if info is not None and info.si_signo in signals.stop_signals():
            self._on_stop_signal(info)
        elif info is not None and info.si_signo != signal.SIGCHLD:
            self._relay(info)
        # The front continued the tree's group.
        if self.take.continued() and self._elsewhere():
            self._send(signal.SIGCONT)

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

    def _check_front(self) -> None:
        if not self.front_gone and os.getppid() != self.setup.front:
            self.front_gone = True
            LOG.warning("serve (pid %d) has ended; stopping the serve backend", self.setup.front)
            self._stop(signal.SIGTERM, forward=True)

    def _on_stop_signal(self, info: signal.struct_siginfo) -> None:
        sender = "terminal" if signals.from_kernel(info) else info.si_pid
        again = sender in self.senders
        self.senders.add(sender)
        if self.signum is None:
            processes.log_received(info.si_signo)
            self._stop(info.si_signo, forward=not self._delivered(info))
        elif again and not self.forced:
            name = signals.signal_name(info.si_signo)
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
        if self.signum is None:
            self.signum = signum
            # What a backend not yet chosen was doing.
            self.during = self.heard.underway.ended()
            # While the backend process runs.
            self.deadline = time.monotonic() + self.setup.timeout
            if forward:
                self._send(signum)

    def _kill(self) -> None:
        """Freeze and SIGKILL every descendant; from now on nothing gets a grace period."""
        self.forced = True
        tree.freeze_and_kill(tree.descendants, adopted=True)


# -- the backend process ----------------------------------------------------


def _backend_process(work: BackendWork, channel: int, supervisor: int, setup: Setup) -> NoReturn:
    """The backend process's life, in the supervisor's child: *work*, then ``os._exit``.

    :param channel: the pipe to the supervisor, process *supervisor*.
    :param setup: the supervisor's; should it be killed, what carries the tree's mark is
        swept, with its stop timeout.
    """
    me = os.getpid()
    to_supervisor = Channel(channel)
    status = 1
    try:
        tree.die_with_parent()
        # serve adds the backend's name once it is chosen.
        set_role_title("backend")
        # A stop signal unwinds run() once, whatever serve inherited; the supervisor forces.
        with processes.StopSignals():
            # serve may have started with signals masked.
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            # The supervisor has gone already.
            if os.getppid() != supervisor:
                raise SystemExit(128 + signal.SIGTERM)
            status = work(to_supervisor)
    except SystemExit as exc:
        status = processes.exit_status(exc)
    except KeyboardInterrupt:
        status = 128 + signal.SIGINT
    except BaseException:
        LOG.exception("The serve backend process failed")
    finally:
        to_supervisor.say("status", str(status))
        if os.getpid() == me and os.getppid() != supervisor:
            # The supervisor was killed: stop what is left, marked processes included.
            sweep([], setup.token, timeout=setup.timeout)
        console.flush()
        processes.exit_now(status)


# -- the tree's mark -------------------------------------------------------------

#: The environment variable holding the tree's mark (see :func:`mark`).
MARKER = "SGLANG_BACKENDS_SERVE_TREE"
# The marks made here: a mapping must outlive the call that made it.
_MARKS: list[object] = []


def mark(token: str) -> None:
    """Mark this process and every process it starts from now on as *token*'s (Linux).

    *token* joins the tokens in :data:`MARKER` in the environment (kept through
    ``exec``) and names a mapped memory file (kept through ``fork``, in ``/proc/PID/maps``).
    """
    os.environ[MARKER] = " ".join([*os.environ.get(MARKER, "").split(), token])
    # A memory file only where Python has memfd_create (AttributeError) and Linux makes one.
    with contextlib.suppress(OSError, AttributeError):
        fd = os.memfd_create(f"{MARKER}={token}")
        try:
            os.ftruncate(fd, mmap.PAGESIZE)
            _MARKS.append(mmap.mmap(fd, mmap.PAGESIZE))
        finally:
            os.close(fd)


def marked(token: str) -> list[psutil.Process]:
    """Live processes, other than this one, that carry *token*'s mark (those readable here)."""

    def carries(process: psutil.Process) -> bool:
        try:
            if token in process.environ().get(MARKER, "").split():
                return True
            with open(f"/proc/{process.pid}/maps", "rb") as maps:
                return f"/memfd:{MARKER}={token} ".encode() in maps.read()
        except (psutil.Error, OSError, ValueError):
            return False

    return tree.running(p for p in psutil.process_iter() if p.pid != os.getpid() and carries(p))


def send_backend_pid(fd: int, pid: int) -> None:
    """Write to *fd* that process *pid* is the backend process: ``PID CREATE_TIME``."""
    with contextlib.suppress(OSError, psutil.Error):
        os.write(fd, f"{pid} {psutil.Process(pid).create_time()!r}".encode())


def read_backend_pid(fd: int) -> list[psutil.Process]:
    """The backend process :func:`send_backend_pid` wrote to *fd*, if it is still that
    process; or none.
    """
    try:
        os.set_blocking(fd, False)
        pid_text, started = os.read(fd, 4096).decode("ascii").split()
        backend = psutil.Process(int(pid_text))
        return [backend] if repr(backend.create_time()) == started else []
    except (OSError, ValueError, psutil.Error):
        return []


def sweep(roots: list[psutil.Process], token: str, *, timeout: float) -> int:
    """Stop *roots*, their descendants and every process marked *token*; return how many."""

    def find() -> list[psutil.Process]:
        return tree.trees(top.pid for top in [*tree.running(roots), *marked(token)])

    return tree.stop_tree(find, timeout)
