"""Which signals ``serve`` stops on and passes on, and how it waits for them.

Knowledge only: nothing here sends a signal (:mod:`sglang_backends._core.processes`
does) or installs a handler for long. The operator guide's "Signals" says
which signals are which, and why.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterable

# siginfo's si_code for a signal the kernel sent, such as the terminal's Ctrl+C.
_SI_KERNEL = 0x80

# Never taken and passed on, as tini leaves them: what only the kernel acts on (SIGKILL,
# SIGSTOP), faults (delivered to the thread that made them), a terminal's refusal of a
# background read or write (SIGTTIN, SIGTTOU); and SIGCHLD and SIGCONT, which serve acts on.
_NOT_RELAYED = frozenset(
    {
        signal.SIGKILL,
        signal.SIGSTOP,
        signal.SIGFPE,
        signal.SIGILL,
        signal.SIGSEGV,
        signal.SIGBUS,
        signal.SIGABRT,
        signal.SIGTRAP,
        signal.SIGSYS,
        signal.SIGTTIN,
        signal.SIGTTOU,
        signal.SIGCHLD,
        signal.SIGCONT,
    }
)


def stop_signals() -> tuple[int, ...]:
    """SIGTERM, SIGINT, SIGQUIT (even if inherited ignored) and SIGHUP unless ``nohup``-ed."""
    found = [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        found.append(signal.SIGHUP)
    return tuple(found)


def relayed_signals() -> tuple[int, ...]:
    """Every signal ``serve`` passes on to the backend: each catchable one, as tini does.

    Not those in :data:`_NOT_RELAYED`, nor those inherited ignored (SIGHUP
    under ``nohup``, SIGPIPE as Python sets it), but the stop signals always.
    """
    found = set(stop_signals())
    for signum in signal.valid_signals():
        if signum not in _NOT_RELAYED and signal.getsignal(signum) != signal.SIG_IGN:
            found.add(signum)
    return tuple(sorted(found))


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``signal N`` for a number without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def from_kernel(info: signal.struct_siginfo) -> bool:
    """Whether the kernel sent the signal (a terminal's Ctrl+C or Ctrl+Z), not a process."""
    return info.si_code == _SI_KERNEL


class SignalWait:
    """``sigtimedwait`` on signals blocked in this thread, giving only a siginfo worth acting on.

    CPython's ``sigtimedwait``, interrupted by a stop (SIGSTOP, Ctrl+Z) and
    continued after its deadline, returns a siginfo it never filled in:
    stack garbage, a number such as ``-2072177056`` or a stale signal. So a
    siginfo counts only if its signal is one of *waited*, and not at all
    when this process was continued during a wait that outlasted its
    timeout. Install :meth:`on_continue` as the SIGCONT handler for the
    second check; :meth:`continued` tells the caller of a continue, once.
    """

    def __init__(self, waited: Iterable[int]) -> None:
        self.waited = frozenset(waited)
        # SIGCONTs received, counted by on_continue.
        self._continues = 0
        # Of those, how many continued() has answered.
        self._answered = 0

    def on_continue(self, signum: int, frame: object) -> None:
        """The SIGCONT handler: count a continue."""
        self._continues += 1

    def continued(self) -> bool:
        """Whether this process was continued since the last call (or since it began)."""
        answered = self._answered
        self._answered = self._continues
        return answered != self._continues

    def __call__(self, timeout: float) -> signal.struct_siginfo | None:
        """Wait up to *timeout* s for one of the signals; it, or ``None``."""
        continues = self._continues
        started = time.monotonic()
        info = signal.sigtimedwait(self.waited, timeout)
        if info is None or info.si_signo not in self.waited:
            return None
        if self._continues != continues and time.monotonic() - started >= timeout:
            # Continued past the deadline: CPython returns what it never filled in.
            return None
        return info
