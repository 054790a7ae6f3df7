"""Detection: run backends' detectors concurrently, each bounded in time.

Detectors run concurrently on a pool of daemon threads sized to the work
(:func:`run_each`), each on its own copy of the request, each waited for
at most ``timeout`` seconds from its own start, and one that
overruns claims nothing and is abandoned. Outcomes
keep the backends' order, whichever thread finished first. :func:`report`
makes the :class:`DetectionReport` automatic detection acts on.
"""

from __future__ import annotations

import enum
import logging
import math
import os
import sysconfig
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar

from sglang_backends._core.names import FALLBACK_BACKEND
from sglang_backends._core.progress import DETECTING, Progress, raised_by_host, with_progress
from sglang_backends.contract import (
    RegisteredServeBackend,
    ServeBackendDetection,
    ServeRequest,
    coerce_detection,
)
from sglang_backends.errors import AmbiguousDetectionError, describe_typed

LOG = logging.getLogger(__name__)


class Verdict(str, enum.Enum):
    """What automatic detection concluded about one backend.

    A detector's answer keeps its :class:`~sglang_backends.contract.ServeBackendDetection`
    value; the others say why there was none.
    """

    MATCH = ServeBackendDetection.MATCH.value
    NO_MATCH = ServeBackendDetection.NO_MATCH.value
    UNKNOWN = ServeBackendDetection.UNKNOWN.value
    NO_DETECTOR = "no detector"
    ERROR = "error"
    TIMEOUT = "timeout"


class Loaded(NamedTuple):
    """A backend loaded for automatic detection.

    :param registered: the backend.
    :param seconds: its load's time (``0`` when another caller loaded it).
    :param label: how progress names it (:func:`.progress.label`), as its load did.
    """

    registered: RegisteredServeBackend
    seconds: float
    label: str


@dataclass(frozen=True)
class DetectionOutcome:
    """One backend's part in automatic detection.

    :param name: the backend.
    :param verdict: what it concluded.
    :param seconds: that backend's own time: its load's (if this detection ran it) and
        its detector's, or its load's when the load failed or overran (then the bound).
    :param detail: the cause, for ``error`` and ``timeout``.
    :param distribution: the providing distribution, ``None`` for built-ins.
    """

    name: str
    verdict: Verdict
    seconds: float = 0.0
    detail: str | None = None
    distribution: str | None = None


@dataclass(frozen=True)
class DetectionReport:
    """Every outcome of one automatic detection and the choice it led to.

    :param outcomes: one per candidate backend, in registry order.
    :param matches: the backends that claimed the request.
    :param selected: the chosen backend, ``None`` when ambiguous.
    :param fallback: ``True`` when nothing matched and the fallback was chosen.
    """

    outcomes: tuple[DetectionOutcome, ...]
    matches: tuple[str, ...]
    selected: str | None
    fallback: bool

    @property
    def ambiguous(self) -> bool:
        """Whether several backends matched and none was preferred, so none was chosen."""
        return self.selected is None

    @property
    def preferred(self) -> bool:
        """Whether several backends matched and ``preferred_backends`` chose one of them."""
        return self.selected is not None and len(self.matches) > 1

    def choice(self) -> str:
        """The selected backend's name.

        :raises AmbiguousDetectionError: several backends matched, none of them
            in ``preferred_backends`` (a ``RuntimeError``).
        """
        if self.selected is None:
            raise AmbiguousDetectionError(
                f"Multiple serve backends matched this request: {', '.join(self.matches)}. "
                f"{AMBIGUITY_WAY_OUT}.",
                matches=self.matches,
            )
        return self.selected


#: How to settle several matches, as every message about them says it.
AMBIGUITY_WAY_OUT = (
    "Select one explicitly with --model-type BACKEND, or list the one to prefer first "
    "in [serve_backends] preferred_backends"
)


#: What :func:`what_happened` says of a plugin by its verdict (its detail in place of
#: ``{}``); an error is said by what failed.
_HAPPENED = {
    Verdict.NO_MATCH: "was asked and declined",
    Verdict.UNKNOWN: "was asked and could not tell",
    Verdict.NO_DETECTOR: "has no detector, so it was not asked",
    Verdict.TIMEOUT: "timed out: {}",
}


def what_happened(outcome: DetectionOutcome) -> str:
    """*outcome*'s plugin and what happened to it, for why detection fell back."""
    who = f"plugin {outcome.name!r} from {outcome.distribution or 'an unknown distribution'}"
    detail = outcome.detail or ""
    if outcome.verdict in _HAPPENED:
        return f"{who} {_HAPPENED[outcome.verdict].format(detail)}"
    # It loaded: its detector raised or answered wrong.
    if _about_detector(detail):
        return f"{who} was asked, but its {detail}"
    # A failed load's message names the plugin itself.
    return detail[:1].lower() + detail[1:]


def _about_detector(cause: str) -> bool:
    """Whether *cause* is a loaded backend's detector's (it raised, overran or answered
    wrong), which, unlike a failed load's, does not name the plugin."""
    return cause.startswith("detector")


def preferred_note(selected: str, matches: Sequence[str], *, set_in: str | None) -> str:
    """Why *selected* was chosen among *matches*: ``preferred_backends``, with where it was
    *set_in* (if known), naming the others."""
    where = "" if set_in is None else f", set in {set_in}"
    others = ", ".join(name for name in matches if name != selected)
    return f"chosen by preferred_backends{where}; also matched: {others}"


_T = TypeVar("_T")


#: Seconds every worker of :func:`run_each` must have been on its current
#: item before another worker is started.
GROW_AFTER = 0.02
#: Workers :func:`run_each` keeps at most, not counting those on an item
#: that has overrun its bound (abandoned: each keeps its thread).
MAX_WORKERS = 64
#: Workers :func:`run_each` starts with: Python code runs one thread at a time
#: under the GIL, so more would only take turns (every ``stat`` of an import a
#: hand-over); a free-threaded build runs one per CPU.
FIRST_WORKERS = (os.cpu_count() or 1) if sysconfig.get_config_var("Py_GIL_DISABLED") else 1


def rounds(count: int) -> int:
    """How many times its *timeout* :func:`run_each` may take for *count* items that all
    hang: it runs :data:`MAX_WORKERS` of them at a time."""
    return max(1, math.ceil(count / MAX_WORKERS))


def run_each(items: Iterable[TimedRun[Any]], *, timeout: float) -> None:
    """Run every item (:meth:`TimedRun.run`) on a pool of daemon threads sized to the work.

    The pool starts with :data:`FIRST_WORKERS` workers (at most one per item);
    a worker takes the next item nobody has taken until none is left. While
    items wait, the caller grows it: every :data:`GROW_AFTER` s, if every
    worker has been on its current item longer than that (sleeping, waiting
    on I/O, hanging) and none has finished an item meanwhile, one more
    worker starts, up to :data:`MAX_WORKERS` on items that have run at most
    *timeout* s. So N quick items run on one or a few threads, not N (a
    thread start waits for the GIL, and threads taking turns hand it over
    at every system call; imports also wait for each other on the import
    lock: seconds for thousands of entry points), while an item that hangs
    holds one worker and delays the others by about :data:`GROW_AFTER`.
    An item that has run *timeout* s is abandoned: it no longer counts, so
    every item starts.

    Returns once every item has finished or run *timeout* s from its own
    start; a worker's thread bears the item's :attr:`~TimedRun.thread_name` while on it.
    """
    pool = _Pool(items, timeout)
    if not pool.left:
        return
    for _ in range(min(pool.left, FIRST_WORKERS)):
        pool.add()
    left = pool.left
    while not pool.done.wait(GROW_AFTER) and not pool.settled():
        # No item finished meanwhile: the workers may be stuck.
        if pool.left == left:
            pool.grow()
        left = pool.left


class _Pool:
    """:func:`run_each`'s workers and the items they have not taken yet."""

    def __init__(self, items: Iterable[TimedRun[Any]], timeout: float) -> None:
        self.queue = deque(items)
        self.timeout = timeout
        # When each worker took its current item: inf while between items,
        # -inf once it died of an exception (busy for ever, so replaced).
        self.since: list[float] = []
        # The items not finished yet.
        self.left = len(self.queue)
        self.lock = threading.Lock()
        self.done = threading.Event()

    def add(self) -> None:
        # Only the caller adds workers: no other takes this index.
        index = len(self.since)
        self.since.append(math.inf)
        threading.Thread(target=self._serve, args=(index,), daemon=True).start()

    def _serve(self, index: int) -> None:
        while True:
            try:
                # popleft is atomic: each item is taken once.
                item = self.queue.popleft()
            except IndexError:
                return
            self.since[index] = time.monotonic()
            threading.current_thread().name = item.thread_name
            try:
                item.run()
            except BaseException:
                self.since[index] = -math.inf
                raise
            finally:
                with self.lock:
                    self.left -= 1
                    if not self.left:
                        self.done.set()
            self.since[index] = math.inf

    def _busy(self) -> list[float]:
        """Seconds each worker has been on its current item (negative: between items)."""
        now = time.monotonic()
        return [now - since for since in self.since]

    def grow(self) -> None:
        """Start a worker if items wait and every worker has been on its item for a while."""
        busy = self._busy()
        live = sum(1 for seconds in busy if seconds <= self.timeout)
        if self.queue and min(busy) > GROW_AFTER and live < MAX_WORKERS:
            self.add()

    def settled(self) -> bool:
        """Whether every item has been taken and has finished or overrun."""
        return not self.queue and all(s < 0 or s > self.timeout for s in self._busy())


class TimedRun(Generic[_T]):
    """One call of *function* (on :func:`run_each`'s pool, in a thread named *thread_name*):
    when it started, whether it finished, what it returned or raised.

    Finishing releases a lock held from the start: a lock, unlike an event,
    is one object the garbage collector does not track, which counts with
    thousands of runs.
    """

    def __init__(self, function: Callable[[], _T], thread_name: str) -> None:
        self._running = threading.Lock()
        self._running.acquire()
        self.function = function
        self.thread_name = thread_name
        self.finished = False
        self.started: float | None = None
        self.seconds = 0.0
        self.value: _T | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        """Call the function now, in this thread, and keep what it returns or raises."""
        self.started = time.perf_counter()
        try:
            self.value = self.function()
        except BaseException as exc:  # noqa: BLE001
            # Kept, for the run's owner to judge.
            self.error = exc
        self.seconds = time.perf_counter() - self.started
        self.finished = True
        self._running.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the run finishes, at most *timeout* s; whether it finished."""
        if self.finished:
            return True
        if self._running.acquire(timeout=-1 if timeout is None else timeout):
            # Released again, for the next waiter.
            self._running.release()
        return self.finished

    def within(self, timeout: float) -> bool:
        """Wait until the run finishes or has run *timeout* s (from now if it has not
        started); whether it finished within *timeout* s of its start. One that finished
        later, while its caller was awaiting others, overran all the same.
        """
        left = (self.started or time.perf_counter()) + timeout - time.perf_counter()
        return self.wait(max(0.0, left)) and self.seconds <= timeout


def skip_with_warning(
    name: str,
    distribution: str | None,
    seconds: float,
    cause: str,
    verdict: Verdict = Verdict.ERROR,
) -> DetectionOutcome:
    """Log a WARNING for a candidate that could not take part and return its outcome.

    :param cause: one line; the warning names *distribution* too where *cause* is a
        detector's, as a failed load's names it already.
    """
    # A failed load's cause names the plugin and its distribution; a detector's does not.
    of = f" (from {distribution})" if distribution and _about_detector(cause) else ""
    LOG.warning("Skipping automatic detection for serve backend %r%s: %s", name, of, cause)
    return DetectionOutcome(name, verdict, seconds, cause, distribution)


def report(
    candidates: Sequence[Loaded | DetectionOutcome],
    request: ServeRequest,
    *,
    timeout: float,
    preferred: Sequence[str],
    progress: Progress | None = None,
) -> DetectionReport:
    """Run the loaded candidates' detectors on *request* and decide.

    :param candidates: in registry order, each a loaded backend with its load's
        seconds, or the outcome that replaced it (a load that failed or overran).
    :param timeout: seconds each detector may take.
    :param preferred: backend names in order of preference among several matches.
    :param progress: told as each detector starts and ends (:func:`.progress.with_progress`);
        a ``BaseException`` it raises reaches the caller.
    :returns: one match selects it; several select the first of them in
        *preferred*, else nothing (ambiguous); none selects
        :data:`~sglang_backends._core.names.FALLBACK_BACKEND`.
    """
    # Each loaded backend's detector runs concurrently, on its own copy of the request: one
    # that mutates it (with object.__setattr__, say) changes neither the others' nor the
    # backend's. A backend without a detector is not asked.
    runs = {
        c.registered.name: TimedRun(
            partial(
                with_progress,
                c.registered.backend.detect,
                progress,
                DETECTING,
                c.label,
                replace(request, argv=tuple(request.argv)),
            ),
            f"detect-{c.registered.name}",
        )
        for c in candidates
        if isinstance(c, Loaded) and c.registered.backend.detect is not None
    }
    run_each(runs.values(), timeout=timeout)
    outcomes = tuple(
        _outcome(c.registered, c.seconds, runs.get(c.registered.name), timeout)
        if isinstance(c, Loaded)
        else c
        for c in candidates
    )
    matches = tuple(o.name for o in outcomes if o.verdict is Verdict.MATCH)
    if len(matches) == 1:
        selected: str | None = matches[0]
    elif matches:
        selected = next((name for name in preferred if name in matches), None)
    else:
        selected = FALLBACK_BACKEND
    return DetectionReport(outcomes, matches, selected, fallback=not matches)


def _outcome(
    registered: RegisteredServeBackend,
    loaded_in: float,
    run: TimedRun[ServeBackendDetection] | None,
    timeout: float,
) -> DetectionOutcome:
    """What *run*, the run of *registered*'s detector (``None``: it has none), concluded;
    its seconds, the detector's, after *loaded_in*, the load's.

    A detector that raises, returns something other than a detection, or has not
    returned within *timeout* seconds of its own start is logged as a WARNING and
    claims nothing.

    :raises BaseException: what the host's progress callback raised as it was told of
        the detector (:func:`~.progress.raised_by_host`).
    """
    name = registered.name
    dist = registered.distribution
    if run is None:
        return DetectionOutcome(name, Verdict.NO_DETECTOR, loaded_in, distribution=dist)
    if not run.within(timeout):
        cause = f"detector did not return within {timeout:g} s"
        return skip_with_warning(name, dist, loaded_in + timeout, cause, Verdict.TIMEOUT)
    if run.error is not None and raised_by_host(run.error):
        # The host's own, not the detector's: it reaches the host.
        raise run.error
    seconds = loaded_in + run.seconds
    if run.error is not None:
        return skip_with_warning(
            name, dist, seconds, f"detector raised {describe_typed(run.error)}"
        )
    detection = coerce_detection(run.value)
    if detection is None:
        cause = f"detector must return ServeBackendDetection, got {type(run.value).__name__}"
        return skip_with_warning(name, dist, seconds, cause)
    return DetectionOutcome(name, Verdict(detection.value), seconds, None, dist)
