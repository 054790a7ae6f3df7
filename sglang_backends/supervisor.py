"""``serve``'s process model on Linux: nothing the backend starts outlives ``serve``.

:func:`supervise` runs the backend's work in a process tree of three, each
with one job, in the manner of tini and dumb-init:

``serve`` (the process you started, the *front*)
    Forks the supervisor before any plugin code runs, then only waits for
    it and relays the stop signals to it. It never becomes a subreaper and
    never waits for any process but the supervisor, so a program calling
    :func:`sglang_backends.serve.main` in-process keeps its own children,
    their exit statuses and its signal handlers. Only if the supervisor is
    killed does it stop anything: the backend process (whose pid the
    supervisor told it) and whatever carries the tree's mark
    (:func:`sglang_backends.processes.sweep`).
the supervisor
    A child subreaper (``PR_SET_CHILD_SUBREAPER``): every process the
    backend orphans (a worker whose parent exited, a daemon that
    double-forked) is re-parented to it. It marks the tree
    (:func:`sglang_backends.processes.mark`), forks the backend process,
    passes a stop signal on to it, reaps its children (all of them are the
    backend's), and once the backend process has ended stops every
    remaining descendant: SIGTERM, then, after the stop timeout, SIGSTOP
    and SIGKILL (:func:`sglang_backends.processes.freeze_and_kill`). It
    has ``PR_SET_PDEATHSIG`` = SIGTERM, so if ``serve`` itself is killed
    (SIGKILL included) it stops the backend and its processes as for a
    SIGTERM, then exits. While the backend is being chosen, it reads what
    the backend process tells it every :data:`_POLL` seconds: a deadline
    for automatic detection, which it keeps by killing the backend process
    (threads cannot bound a plugin that holds the GIL), and which plugins
    are loading or detecting, which it names when it does.
the backend process
    Chooses the backend, loads it and calls its ``run()``: the work given to
    :func:`supervise`. It tells the supervisor, over a pipe (a
    :class:`Channel`), which backend it runs and, when the work finished,
    with which status. A process that ended without saying so called
    ``os._exit()`` or died of a signal, and the supervisor says so in one
    line. It starts with an empty signal mask and its own stop handlers. It
    also has ``PR_SET_PDEATHSIG`` = SIGTERM, and stops its own descendants
    and the marked processes if it outlives the supervisor. Like the
    supervisor, it ends with ``os._exit`` (after flushing its output), never
    returning into the caller of :func:`supervise`: a forked copy of an
    embedding program must not run on, nor run its ``atexit`` handlers.

The stop signals are SIGTERM, SIGINT, SIGQUIT and SIGHUP, unless SIGHUP is
ignored (``nohup``): :func:`sglang_backends.processes.stop_signals`.
Signals are never lost: the front and the supervisor block them and
SIGCHLD before forking and collect them with ``sigtimedwait``; the backend
process installs its handlers before unblocking them. A signal the
terminal sent (Ctrl+C) reached the whole foreground process group, the
backend included, so it is not passed on a second time, unless the
backend process moved to a process group of its own.

Stopping: the first stop signal is passed to the backend process, which
then has the stop timeout to end; the processes it leaves get SIGTERM and,
the stop timeout later, SIGKILL. A second signal from the same sender, or
a backend process still running at its deadline, means SIGKILL for
everything at once, without further grace.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple

from sglang_backends.titles import take_role

if TYPE_CHECKING:
    import psutil

__all__ = ["SUPPORTED", "BackendWork", "Channel", "supervise"]

LOG = logging.getLogger(__name__)

#: Whether :func:`supervise` can be used here (Linux, with ``fork`` and ``sigtimedwait``).
SUPPORTED: bool = (
    sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(signal, "sigtimedwait")
)


class Channel:
    """What the backend process tells the supervisor, one line per message, over a pipe.

    Only the backend process itself speaks: a process it forked that comes
    back this way is silent.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pid = os.getpid()

    def say(self, kind: str, value: str = "") -> None:
        """Send ``kind value`` (whitespace in *value* collapsed)."""
        if os.getpid() != self._pid:
            return
        line = f"{kind} {' '.join(value.split())}".rstrip() + "\n"
        try:
            os.write(self._fd, line.encode("utf-8", "replace"))
        except OSError:
            pass

    def backend(self, description: str) -> None:
        """The backend is chosen and about to ``run()``: *description*."""
        self.say("backend", description)

    def deadline(self, seconds: float, why: str) -> None:
        """Choosing a backend must be over within *seconds* from now (*why*: the sum it bounds).

        The supervisor ends the backend process at that deadline, however
        the plugins hold it up (even a detector that never releases the GIL).
        """
        self.say("deadline", f"{time.monotonic() + seconds!r} {seconds:g} {why}")

    def progress(self, event: str, label: str) -> None:
        """A plugin's load or detector starts or ends.

        :param event: ``loading``, ``loaded``, ``detecting`` or ``detected``.
        :param label: the plugin, as the supervisor's line names it.
        """
        self.say(event, label)


#: The backend process's work: given the :class:`Channel`, returns the exit status.
BackendWork = Callable[[Channel], int]

_PR_SET_PDEATHSIG = 1
# siginfo's si_code for a signal the kernel sent, such as the terminal's Ctrl+C.
_SI_KERNEL = 0x80
# Seconds between checks while processes are being stopped, and between
# reads of what the backend process says while it is choosing a backend.
_POLL = 0.1
# Longest wait for a signal while nothing happens: SIGCHLD and PR_SET_PDEATHSIG
# bring every event, so this only bounds a wait that should never time out.
_IDLE = 60.0
# The front's longest wait: in a program with other threads, a stop signal one
# of them takes reaches the relay handler only once the main thread wakes up.
_FRONT_IDLE = 1.0
# Seconds SIGKILLed processes get to disappear before giving up on them.
_KILL_WAIT = 5.0
_EXIT_FAILURE = 1


def _prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; whether it worked."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _error(prog: str, text: str) -> None:
    """Write ``prog: error: text`` to stderr; a closed stderr must not change the exit status."""
    try:
        print(f"{prog}: error: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _flush() -> None:
    """Flush Python's standard streams, so output is neither lost nor written twice."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


def _all_gone(processes: list[psutil.Process]) -> bool:
    from sglang_backends.processes import running

    return not running(processes)


# -- the front ------------------------------------------------------------------


class _Relay:
    """Python-level stop-signal handler of the front, for a signal another thread takes."""

    def __init__(self) -> None:
        self.target: int | None = None
        self.pending: list[int] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.target is None:
            self.pending.append(signum)
        else:
            self.forward(signum)

    def start(self, target: int) -> None:
        self.target = target
        for signum in self.pending:
            self.forward(signum)

    def forward(self, signum: int) -> None:
        if self.target is not None:
            try:
                os.kill(self.target, signum)
            except ProcessLookupError:
                pass


def supervise(work: BackendWork, *, stop_timeout: float, prog: str) -> int:
    """Run *work* in a supervised backend process; return ``serve``'s exit status.

    Call it from the main thread, after the command line is parsed and
    before any plugin code runs. Returns once the backend process and every
    process it started have ended; the signal mask and handlers are as
    before.

    :param work: the backend's work, run in the backend process; it is given
        the :class:`Channel` to the supervisor (to announce the backend just
        before ``run()``) and returns the exit status.
    :param stop_timeout: seconds between SIGTERM and SIGKILL.
    :param prog: the program name prefixing error lines.
    """
    from sglang_backends.processes import stop_signals

    stops = stop_signals()
    waited = {*stops, signal.SIGCHLD}
    front = os.getpid()
    token = f"{front}-{os.urandom(8).hex()}"
    relay = _Relay()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    previous: dict[int, Any] = {}
    try:
        try:
            for signum in stops:
                previous[signum] = signal.signal(signum, relay)
            if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
                # Ignored, SIGCHLD makes exited children vanish unreaped: the
                # supervisor's status would be lost.
                previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        except ValueError:  # not the main thread: signals stay with the host
            pass
        news, news_writer = os.pipe()
        _flush()
        pid = os.fork()
        if pid == 0:
            os.close(news)
            _supervisor_process(
                work,
                _Setup(front, stop_timeout, prog, stops, token, news_writer),
            )
        os.close(news_writer)
        relay.start(pid)
        try:
            status = _wait_for_supervisor(pid, relay, prog, waited)
            if os.WIFSIGNALED(status):
                return _last_resort(pid, os.WTERMSIG(status), news, token, stop_timeout, prog)
            return os.WEXITSTATUS(status)
        finally:
            os.close(news)
    finally:
        for number, handler in previous.items():
            if handler is not None:
                signal.signal(number, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if callable(signal.getsignal(signal.SIGCHLD)):
            # SIGCHLD was blocked and collected here; the host's handler may
            # be waiting for one of its own children.
            signal.raise_signal(signal.SIGCHLD)


class _Setup(NamedTuple):
    """What the supervisor and the backend process are started with."""

    front: int
    timeout: float
    prog: str
    stops: tuple[int, ...]
    token: str
    news: int  # where the supervisor tells the front which process is the backend's


def _wait_for_supervisor(pid: int, relay: _Relay, prog: str, waited: set[int]) -> int:
    """The front's loop: relay stop signals to the supervisor until it exits; its wait status."""
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            _error(prog, f"the serve supervisor (pid {pid}) was reaped elsewhere")
            return _EXIT_FAILURE << 8
        if done:
            break
        info = signal.sigtimedwait(waited, _FRONT_IDLE)
        if info is None or info.si_signo == signal.SIGCHLD:
            continue
        if info.si_code != _SI_KERNEL:
            # The terminal signals the whole foreground group, which holds the
            # supervisor and the backend: passing it on would double it.
            relay.forward(info.si_signo)
    return status


def _last_resort(pid: int, signum: int, news: int, token: str, timeout: float, prog: str) -> int:
    """The supervisor was killed: stop the backend process and whatever carries the marker.

    The only time ``serve``'s own process stops anything: the processes of
    its own tree, found by the pid the supervisor reported and by the
    :data:`~sglang_backends.processes.MARKER` token, never its program's
    other processes. None of them is its child, so it waits for none.
    """
    import psutil

    from sglang_backends.processes import sweep

    roots = []
    os.set_blocking(news, False)
    try:
        said = os.read(news, 4096).decode("ascii", "replace").split()
    except (BlockingIOError, OSError):
        said = []
    if len(said) == 3 and said[0] == "backend":
        try:
            process = psutil.Process(int(said[1]))
            if repr(process.create_time()) == said[2]:
                roots.append(process)
        except (psutil.Error, ValueError):
            pass
    count = sweep(roots, token, timeout=timeout)
    _error(
        prog,
        f"the serve supervisor (pid {pid}) was killed by {_signal_name(signum)}; "
        f"serve stopped the backend process and the processes it left ({count} in all)",
    )
    return 128 + signum


# -- the supervisor -------------------------------------------------------------


def _supervisor_process(work: BackendWork, setup: _Setup) -> None:
    """The supervisor's life, in the forked child; never returns."""
    status = _EXIT_FAILURE
    try:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        take_role("supervisor")
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # exited children wait to be reaped
        from sglang_backends.processes import become_subreaper, mark

        if not become_subreaper():
            LOG.warning("Cannot become a child subreaper; orphaned processes may escape")
        # Inherited by every process the backend starts, through fork and exec.
        mark(setup.token)
        me = os.getpid()
        reader, writer = os.pipe()
        _flush()
        child = os.fork()
        if child == 0:
            os.close(reader)
            _backend_process(work, channel=writer, supervisor=me, setup=setup)
        os.close(writer)
        supervision = _Supervision(child=child, channel=reader, setup=setup)
        _tell_front(setup.news, child, supervision)
        status = supervision.run()
    except BaseException:
        LOG.exception("The serve supervisor failed")
    finally:
        _flush()
        os._exit(status)


def _tell_front(news: int, child: int, supervision: _Supervision) -> None:
    """Tell ``serve`` which process is the backend's, should the supervisor be killed."""
    try:
        started = supervision.psutil.Process(child).create_time()
        os.write(news, f"backend {child} {started!r}\n".encode("ascii"))
    except (OSError, supervision.psutil.Error):
        pass
    finally:
        os.close(news)


class _Supervision:
    """The supervisor's state: the backend process, stop signals, deadlines."""

    def __init__(self, *, child: int, channel: int, setup: _Setup) -> None:
        import psutil

        self.psutil = psutil
        self.me = psutil.Process()
        self.child = child
        self.front = setup.front
        self.channel = channel
        self.timeout = setup.timeout
        self.prog = setup.prog
        self.stops = setup.stops
        self.waited = {*setup.stops, signal.SIGCHLD}
        self.wait_status: int | None = None
        self.signum: int | None = None
        self.senders: dict[str, int] = {}
        self.deadline: float | None = None
        self.forced = False
        self.front_gone = False
        # What the backend process said: its backend, its status, and while
        # it chooses a backend, the detection deadline and the plugins busy.
        self.messages: dict[str, str] = {}
        self.unread = b""
        self.choosing: tuple[float, str] | None = None
        from sglang_backends.registry import Underway

        self.underway = Underway()
        self.overran: str | None = None

    def run(self) -> int:
        """Supervise until the backend process and every descendant have ended."""
        self._check_front()
        while self.wait_status is None:
            now = time.monotonic()
            if self.forced or self._listening():
                pause = _POLL
            elif self.deadline is None:
                pause = _IDLE
            else:
                pause = self.deadline - now
            if self.choosing is not None and not self.forced:
                pause = min(pause, self.choosing[0] - now)
            self._wait(max(0.0, min(_IDLE, pause)))
            if self.wait_status is not None or self.forced:
                continue
            if self.choosing is not None and time.monotonic() >= self.choosing[0]:
                self._overrun()
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                LOG.warning("The serve backend did not stop within %.1fs", self.timeout)
                self._kill()
        self._read()
        problem, status = self._verdict()
        self._clean_up()
        if self.overran is not None:
            _error(self.prog, self.overran)
            return _EXIT_FAILURE
        if self.signum is not None:
            if problem:
                LOG.info("While stopping, %s", problem)
            backend = self.messages.get("backend")
            LOG.info(
                "Serve backend %sstopped by %s",
                f"{backend} " if backend else "",
                _signal_name(self.signum),
            )
            return 128 + self.signum
        if problem:
            _error(self.prog, problem)
        return status

    # -- events

    def _listening(self) -> bool:
        """Whether the backend process may still say something the supervisor must act on.

        Until it announces its backend it may set a detection deadline; the
        supervisor reads what it says every :data:`_POLL` seconds meanwhile.
        """
        return "backend" not in self.messages and "status" not in self.messages

    def _wait(self, timeout: float) -> None:
        """Wait up to *timeout* s for a signal; reap children; read; act on a stop signal."""
        info = signal.sigtimedwait(self.waited, timeout)
        self._reap()
        self._read()
        if info is not None and info.si_signo in self.stops:
            self._on_stop_signal(info)
        self._check_front()

    def _reap(self) -> None:
        # Every child of the supervisor is the backend process or one of its
        # orphans re-parented here, so any exited child may be collected.
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.wait_status = status

    def _read(self) -> None:
        """Take in every complete line the backend process has written."""
        if self.channel < 0:
            return
        os.set_blocking(self.channel, False)
        while True:
            try:
                chunk = os.read(self.channel, 65536)
            except BlockingIOError:
                break
            if not chunk:
                os.close(self.channel)
                self.channel = -1
                break
            self.unread += chunk
        *lines, self.unread = self.unread.split(b"\n")
        for line in lines:
            key, _, value = line.decode("utf-8", "replace").partition(" ")
            self._heard(key, value)

    def _heard(self, key: str, value: str) -> None:
        if key in ("loading", "loaded", "detecting", "detected"):
            self.underway(key, value)
        elif key == "deadline":
            when, _, why = value.partition(" ")
            try:
                self.choosing = (float(when), why)
            except ValueError:
                pass
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
        if self.front_gone or os.getppid() == self.front:
            return
        self.front_gone = True
        LOG.warning("serve (pid %d) has ended; stopping the serve backend", self.front)
        self._stop(signal.SIGTERM, forward=True)

    def _on_stop_signal(self, info: Any) -> None:
        if info.si_code == _SI_KERNEL:
            sender = "terminal"
        elif info.si_pid == self.front:
            sender = "serve"
        else:
            sender = f"pid {info.si_pid}"
        count = self.senders[sender] = self.senders.get(sender, 0) + 1
        name = _signal_name(info.si_signo)
        if self.signum is None:
            LOG.info("Received %s; stopping the serve backend", name)
            # The terminal's signal reached the backend process already,
            # unless it moved to a process group of its own.
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
        if self.wait_status is not None:
            return  # the backend process has ended; the clean-up follows
        if forward:
            try:
                os.kill(self.child, signum)
            except ProcessLookupError:
                pass
        self.deadline = time.monotonic() + self.timeout

    # -- processes

    def _descendants(self) -> list[psutil.Process]:
        from sglang_backends.processes import running

        try:
            return running(self.me.children(recursive=True))
        except self.psutil.Error:
            return []

    def _send(self, processes: Iterable[psutil.Process], signum: int) -> None:
        for process in processes:
            try:
                process.send_signal(signum)
            except self.psutil.NoSuchProcess:
                pass
            except self.psutil.AccessDenied as exc:
                LOG.warning("Cannot stop process %s: %s", process.pid, exc)

    def _kill(self) -> None:
        """Freeze and SIGKILL every descendant; from now on nothing gets a grace period."""
        from sglang_backends.processes import freeze_and_kill

        self.forced = True
        freeze_and_kill(self._descendants)

    def _until(self, done: Callable[[], bool], seconds: float, *, graceful: bool) -> None:
        """Keep reaping and watching signals until *done* or *seconds* pass (or a forced stop)."""
        end = time.monotonic() + seconds
        while not done() and not (graceful and self.forced):
            left = end - time.monotonic()
            if left <= 0:
                return
            self._wait(min(_POLL, left))

    def _clean_up(self) -> None:
        """Stop every remaining descendant: SIGTERM, then SIGKILL after the stop timeout."""
        from sglang_backends.processes import running

        stopped: set[int] = set()
        for _ in range(3):
            found = self._descendants()
            if not found:
                break
            stopped.update(p.pid for p in found)
            LOG.debug("Stopping %d remaining process(es): %s", len(found), [p.pid for p in found])
            if not self.forced and self.timeout > 0:
                self._send(found, signal.SIGTERM)
                self._until(partial(_all_gone, found), self.timeout, graceful=True)
                survivors = running(found)
                if survivors and not self.forced:
                    LOG.warning(
                        "Killing %d process(es) still running %.1fs after SIGTERM: %s",
                        len(survivors),
                        self.timeout,
                        [p.pid for p in survivors],
                    )
            self._kill()  # survivors, and any that appeared meanwhile, frozen first
            self._until(lambda: not self._descendants(), _KILL_WAIT, graceful=False)
        if stopped:
            LOG.info("Stopped %d remaining process(es)", len(stopped))

    # -- how the backend process ended

    def _verdict(self) -> tuple[str | None, int]:
        """The problem to report (``None`` when the work finished) and the exit status."""
        messages = self.messages
        status = self.wait_status or 0
        backend = messages.get("backend")
        who = f"serve backend {backend}" if backend else "the serve backend process"
        if os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
            where = "" if backend else " before a backend was chosen"
            return f"{who} was killed by {_signal_name(signum)}{where}", 128 + signum
        code = os.WEXITSTATUS(status)
        if "status" in messages:
            return None, code
        if backend:
            what = f"ended its process with os._exit({code}) without returning from run()"
        else:
            what = f"ended with os._exit({code}) before a backend was chosen"
        return f"{who} {what}; serve stopped the processes it left", code or _EXIT_FAILURE


# -- the backend process ----------------------------------------------------------


class _Unwind:
    """Stop-signal handler of the backend process: unwind ``run()`` once.

    SIGINT raises ``KeyboardInterrupt``, as in any Python program; SIGTERM,
    SIGHUP and SIGQUIT raise :class:`~sglang_backends.processes.StopRequested`
    (``SystemExit(128 + N)``), which code guarding a plugin's import lets
    through.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.raised = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        from sglang_backends.processes import StopRequested

        if os.getpid() != self.pid:
            # A process forked by the backend inherited this handler: default action.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.raised:
            return  # already unwinding; the supervisor forces if it takes too long
        self.raised = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise StopRequested(128 + signum)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return _EXIT_FAILURE


def _backend_process(work: BackendWork, *, channel: int, supervisor: int, setup: _Setup) -> None:
    """The backend process's life, in the supervisor's child; never returns."""

    me = os.getpid()
    tell = Channel(channel)
    status = _EXIT_FAILURE
    try:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        take_role("backend")  # serve adds the backend's name once it is chosen
        os.close(setup.news)
        # A stop signal unwinds run(), whatever the dispositions serve inherited
        # (a background job starts with SIGINT ignored).
        unwind = _Unwind()
        for signum in setup.stops:
            signal.signal(signum, unwind)
        # A clean mask: serve may have been started with signals blocked
        # (SIGTERM included), and a server must see its stop signals.
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        if os.getppid() != supervisor:
            raise SystemExit(128 + signal.SIGTERM)  # the supervisor has gone already
        status = work(tell)
    except SystemExit as exc:
        status = _exit_code(exc)
    except KeyboardInterrupt:
        status = 128 + signal.SIGINT
    except BaseException:
        LOG.exception("The serve backend process failed")
    finally:
        tell.say("status", str(status))
        if os.getpid() == me and os.getppid() != supervisor:
            # The supervisor was killed: stop what is left, marked processes included.
            from sglang_backends.processes import sweep

            sweep([], setup.token, timeout=setup.timeout)
        _flush()
        os._exit(status)
