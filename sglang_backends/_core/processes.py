"""Stop signals: the one module that signals a process or takes a stop signal.

``serve``, the operator commands' workers and the plugin-author kit stop
processes through it and :mod:`sglang_backends._core.tree` (which walks process
trees, with psutil); the operator guide's "What serve guarantees" says how
and why (:mod:`sglang_backends._core.signals` says which signals are which).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import struct
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, NoReturn

from sglang_backends._core import console
from sglang_backends._core.console import exit_now as exit_now
from sglang_backends._core.signals import signal_name, stop_signals

LOG = logging.getLogger(__name__)


# serve's stop messages, worded once for the supervisor and for serve's in-process path.
def log_received(signum: int) -> None:
    LOG.info("Received %s; stopping the serve backend", signal_name(signum))


def log_stopped(backend: str | None, signum: int, during: str = "") -> None:
    """*backend* (``None`` before one was chosen) stopped by *signum*, *during* what (``while
    loading 'x' (dist)``, from :meth:`~sglang_backends._core.progress.InFlight.ended`)."""
    shown = f"{backend} " if backend else ""
    when = f" {during}" if during else ""
    LOG.info("Serve backend %sstopped by %s%s", shown, signal_name(signum), when)


def log_swept(count: int) -> None:
    if count:
        LOG.info("Stopped %d remaining process(es)", count)


def log_overdue(timeout: float, backend: str | None = None) -> None:
    """Say that the stop timeout ran out for *backend* (``None``: not chosen yet, or not
    known); a timeout of 0 asks for an immediate kill, no failure."""
    if timeout <= 0:
        LOG.info("Stop timeout 0: killing the serve backend at once")
    elif backend:
        LOG.warning("Serve backend %s did not stop within %.1fs", backend, timeout)
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
        # Python exits with the low byte of a code within PyLong_AsLong's range, else 255.
        bound = 1 << (8 * struct.calcsize("l") - 1)
        return code & 0xFF if -bound <= code < bound else 0xFF
    # As Python prints it, escaped: a plugin wrote it.
    console.say(code)
    return 1


def send(pid: int, signum: int, *, group: bool = False) -> None:
    """Send *signum* to process *pid* (to process group *pid* with *group*); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, signum)


class StopSignals:
    """While entered, a stop signal unwinds the main thread, once (SIGINT as KeyboardInterrupt).

    Armed on entry: a signal that came while entering is raised at once. Once
    :attr:`armed` is reset (for the clean-up) a signal is only recorded; a
    forked child takes the default action.

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
        self._on_signal = on_signal
        self._timeout = timeout
        self._on_force = on_force
        self._pid = os.getpid()
        self._previous: dict[int, Any] = {}
        self._watchdog: threading.Timer | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {n: signal.signal(n, self._handle) for n in stop_signals()}
            _WATCHING.append(self)
        try:
            self.armed = True
            # A stop signal that came while entering unwinds now.
            if self.signum is not None:
                self._unwind(self.signum)
        except BaseException:
            # Nothing of the guard stays installed.
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.armed = False
        if self._watchdog is not None:
            self._watchdog.cancel()
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        if self in _WATCHING:
            _WATCHING.remove(self)

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
            exit_now(128 + self.signum if self.signum else 1)


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
        # Signals unwind the main thread alone.
        return False
    watching = [stops for stops in _WATCHING if stops._pid == os.getpid()]
    if not watching:
        return isinstance(exc, KeyboardInterrupt)
    return any(stops.signum is not None for stops in watching)


@contextlib.contextmanager
def stopping_what_it_starts(*, adopt: bool) -> Iterator[None]:
    """Kill every process this one has once plugin code ran meanwhile, so that none
    outlives the command holding its output: ``show`` and a backend's help load a plugin
    in the command's own process, which has none of its own.

    :param adopt: adopt orphans from now on (Linux), so that a daemonised process is killed
        too (``show``). Without, psutil is imported only if a child is left, and a daemonised
        process escapes: a backend's help stays as lean as SGLang's.
    """
    walker = _tree() if adopt else None
    if walker is not None:
        walker.become_subreaper()
    try:
        yield
    finally:
        if walker is not None or _has_children():
            walker = walker or _tree()
            walker.stop_tree(walker.descendants, 0)


def _tree() -> ModuleType:
    """:mod:`sglang_backends._core.tree`, which imports psutil: only to stop processes."""
    from sglang_backends._core import tree

    return tree


def _has_children() -> bool:
    """Whether this process has a child, running or exited, asked of the kernel (``waitid``,
    reaping none); where Python offers no ``waitid``, as if it had."""
    if not hasattr(os, "waitid"):
        return True
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True
