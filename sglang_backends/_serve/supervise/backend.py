"""What ``serve``'s backend process on Linux (forked by :mod:`.subreaper`) tells its supervisor.

The backend process chooses, loads and runs the backend, and tells the supervisor over a
:class:`Channel` which backend runs, each plugin load and detector as it starts
and ends (its :mod:`progress <sglang_backends._core.progress>`, which ``detect``'s
worker writes too), and how the work ended; the supervisor hears it (:class:`ChannelReader`),
which words how the backend process ended. The supervisor and
this process show in ``ps`` as ``sglang-backends serve [ROLE] ARGS``
(:func:`set_role_title`; the front keeps its own title), so ``pgrep -f
sglang-backends`` finds all three.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sys
import time
from collections.abc import Callable

from setproctitle import setproctitle

from sglang_backends._core import signals
from sglang_backends._core.progress import EVENTS, InFlight, ProgressWriter

LOG = logging.getLogger(__name__)


def title_for(role: str, argv: list[str]) -> str:
    """``sglang-backends serve [ROLE]`` and what follows ``serve`` in *argv*, if anything."""
    args = argv[1:]
    shown = args[args.index("serve") + 1 :] if "serve" in args else []
    return " ".join(["sglang-backends serve", f"[{role}]", *shown])


def set_role_title(role: str) -> None:
    """Title this process after *role* (``supervisor``, ``backend NAME``) if it can; never fails."""
    try:
        setproctitle(title_for(role, sys.argv))
    except Exception as exc:  # noqa: BLE001 - a title must never stop serve
        LOG.debug("Process title not set: %s", exc)


#: Bytes a :class:`Channel`'s pipe holds, where Linux lets a process widen it:
#: automatic detection over 10,000 entry points writes about 800 KB of
#: progress, which a pipe's default 64 KB, read ten times a second, held up.
CHANNEL_BYTES = 1 << 20


def channel_pipe() -> tuple[int, int]:
    """A pipe for a :class:`Channel`: ``(reader, writer)``, widened to :data:`CHANNEL_BYTES`
    where the system allows it, so that the backend process seldom waits for the supervisor.
    """
    reader, writer = os.pipe()
    # Not Linux, or refused.
    with contextlib.suppress(AttributeError, OSError):
        fcntl.fcntl(writer, fcntl.F_SETPIPE_SZ, CHANNEL_BYTES)
    return reader, writer


class Channel(ProgressWriter):
    """What the backend process (not one it forked) tells the supervisor: ``kind value`` lines,
    its progress among them.
    """

    def backend(self, name: str, description: str) -> None:
        """Backend *name* is chosen and about to ``run()``: *description*; the process is
        titled after it.
        """
        self.say("backend", description)
        set_role_title(f"backend {name}")

    def deadline(self, seconds: float, why: str) -> None:
        """Choosing a backend must be over within *seconds* (*why*), or the supervisor ends it."""
        self.say("deadline", f"{time.monotonic() + seconds!r} {seconds:g} s ({why})")


class ChannelReader:
    """The supervisor's end of the :class:`Channel`: what the backend process has said."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.unread = b""
        # "backend" and "status", once said.
        self.said: dict[str, str] = {}
        # Detection's deadline, and its bound.
        self.choosing: tuple[float, str] | None = None
        # Whether automatic detection began.
        self.detecting = False
        self.underway = InFlight()

    def read(self) -> None:
        """Take in every complete line written so far."""
        while self.fd >= 0:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                os.close(self.fd)
                self.fd = -1
            self.unread += chunk
        *lines, self.unread = self.unread.split(b"\n")
        for line in lines:
            key, _, value = line.decode("utf-8", "replace").partition(" ")
            if key in EVENTS:
                self.underway(key, value)
            elif key == "deadline":
                when, _, bound = value.partition(" ")
                self.detecting = True
                with contextlib.suppress(ValueError):
                    self.choosing = (float(when), bound)
            else:
                self.said[key] = value
                # A backend was chosen, or the work ended.
                self.choosing = None

    def overrun(self) -> str:
        """The line saying automatic detection overran its deadline."""
        assert self.choosing is not None
        busy = self.underway.describe()
        return (
            f"automatic detection did not finish within {self.choosing[1]}"
            f"{': ' + busy if busy else ''}. Disable the plugin that holds it up "
            "(disabled_backends) or choose a backend with --model-type; serve stopped the "
            "backend process"
        )

    def verdict(self, wait_status: int) -> tuple[str | None, int]:
        """How the backend process that ended with *wait_status* did: the problem to report
        (``None`` when the work finished) and serve's exit status.
        """
        code = os.waitstatus_to_exitcode(wait_status)
        backend = self.said.get("backend")
        who = f"serve backend {backend}" if backend else "the serve backend process"
        during = self.underway.ended()
        where = "" if backend else f" before a backend was chosen{', ' + during if during else ''}"
        advice = ""
        # No advice when --model-type, not detection, chose the backend.
        if during and not backend and self.detecting:
            advice = (
                ". Disable the plugin at fault (disabled_backends) or choose a backend with "
                "--model-type"
            )
        # Killed by signal -code.
        if code < 0:
            return f"{who} was killed by {signals.signal_name(-code)}{where}{advice}", 128 - code
        if "status" in self.said:
            return None, code
        if backend:
            what = f"ended its process with os._exit({code}) without returning from run()"
        else:
            what = f"ended with os._exit({code}){where}"
        return f"{who} {what}; serve stopped the processes it left{advice}", code or 1


#: The backend process's work: given the :class:`Channel`, returns the exit status.
BackendWork = Callable[[Channel], int]
