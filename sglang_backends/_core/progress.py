"""Progress: automatic detection's loads and detectors as each starts and ends.

The registry tells a :data:`Progress` callback ``(event, label)`` from its worker threads
(:func:`with_progress`); a :class:`ProgressWriter` writes each event as an ``event label`` line to a
file descriptor (``serve``'s backend process to its supervisor, ``detect``'s worker to its
command), and :class:`InFlight` reads the lines back: what was under way when that process
ended or overran, so that the plugin at fault is named.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import TypeVar

from sglang_backends.errors import describe_typed

LOG = logging.getLogger(__name__)

#: Told, from worker threads, as automatic detection's loads and detectors start
#: and end: ``(event, label)``, the event one of :data:`EVENTS`, the label
#: ``'name' (provider)``.
Progress = Callable[[str, str], None]

#: Each phase's start and end events.
LOADING = ("loading", "loaded")
DETECTING = ("detecting", "detected")
EVENTS = (*LOADING, *DETECTING)
#: Each end event's start event.
_STARTED_BY = {LOADING[1]: LOADING[0], DETECTING[1]: DETECTING[0]}

_T = TypeVar("_T")


def label(name: str, provider: str) -> str:
    """How progress, and the lines naming what held it up, name a backend: ``'x' (provider)``."""
    return f"{name!r} ({provider})"


#: The attribute marking a ``BaseException`` the host's progress callback raised
#: (:func:`raised_by_host`): the host's to raise again, never the outcome of the load or
#: detector it was told about.
_RAISED_BY_HOST = "_sglang_backends_raised_by_host"


def raised_by_host(exc: BaseException | None) -> bool:
    """Whether *exc* is what the host's progress callback raised (:func:`with_progress`)."""
    return getattr(exc, _RAISED_BY_HOST, False) is True


def with_progress(
    function: Callable[..., _T],
    progress: Progress | None,
    events: tuple[str, str],
    label: str,
    *args: object,
) -> _T:
    """Call *function*, telling *progress* (if any) ``events[0]`` before, ``events[1]`` after.

    :raises BaseException: what *progress* raised, marked :func:`raised_by_host`.
    """
    if progress is None:
        return function(*args)
    _tell(progress, events[0], label)
    try:
        return function(*args)
    finally:
        _tell(progress, events[1], label)


def _tell(progress: Progress, event: str, label: str) -> None:
    """Tell *progress* of *event*; its own failure, the host's, is logged, and changes
    nothing of the load or detector it was told about; its ``BaseException`` ends that run,
    marked :func:`raised_by_host`."""
    try:
        progress(event, label)
    except Exception as exc:  # noqa: BLE001 - a report failing never fails what it reports
        LOG.warning("The progress callback failed on %s %s: %s", event, label, describe_typed(exc))
    except BaseException as exc:
        setattr(exc, _RAISED_BY_HOST, True)
        raise


class ProgressWriter:
    """``kind value`` lines to a file descriptor, from the process that made it only
    (not a child a plugin forked); :meth:`progress` is a :data:`Progress`.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pid = os.getpid()

    def say(self, kind: str, value: str = "") -> None:
        """Write ``kind value`` (whitespace in *value* collapsed); never fails."""
        if os.getpid() == self._pid:
            line = f"{kind} {' '.join(value.split())}".rstrip() + "\n"
            with contextlib.suppress(OSError):
                os.write(self._fd, line.encode("utf-8", "replace"))

    # Told as a plugin's load or detector starts or ends.
    progress = say


class InFlight:
    """The loads and detectors under way, from progress events: what holds automatic
    detection up.
    """

    def __init__(self) -> None:
        self.busy: dict[str, dict[str, None]] = {LOADING[0]: {}, DETECTING[0]: {}}

    def __call__(self, event: str, label: str) -> None:
        if event in self.busy:
            self.busy[event][label] = None
        elif event in _STARTED_BY:
            self.busy[_STARTED_BY[event]].pop(label, None)

    def replay(self, text: str) -> InFlight:
        """Take in events written one per line as ``event label``; return self."""
        for line in text.splitlines():
            event, _, label = line.partition(" ")
            self(event, label)
        return self

    def describe(self) -> str:
        """``still loading: 'a' (dist-a); still detecting: 'b' (dist-b)``, or empty."""
        return "; ".join(
            f"still {phase}: {', '.join(labels)}" for phase, labels in self.busy.items() if labels
        )

    def ended(self) -> str:
        """What was under way when the process running it ended (``while detecting 'b'
        (dist-b)``; a plugin under way ended it, unless something outside did), or empty:
        the one wording of ``serve``'s backend process and ``detect``'s worker.
        """
        busy = " and ".join(
            f"{phase} {', '.join(labels)}" for phase, labels in self.busy.items() if labels
        )
        return f"while {busy}" if busy else ""
