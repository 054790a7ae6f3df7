"""Detection: run backends' detectors concurrently, each bounded in time.

Every detector runs at once in daemon threads (:func:`start_each`), on its
own copy of the request; the caller waits at most ``timeout`` seconds for
the lot, and one that overruns claims nothing and is abandoned. Outcomes
keep the backends' order, whichever thread finished first. :func:`report`
makes the :class:`DetectionReport` automatic detection acts on.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sglang_backends._core.names import FALLBACK_BACKEND
from sglang_backends.contract import (
    RegisteredServeBackend,
    ServeBackendDetection,
    ServeRequest,
    coerce_detection,
)
from sglang_backends.errors import AmbiguousDetectionError, describe

__all__ = [
    "AMBIGUITY_WAY_OUT",
    "DetectionOutcome",
    "DetectionReport",
    "Verdict",
    "preferred_note",
    "report",
    "run_detectors",
    "skipped",
    "start_each",
    "what_happened",
]

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


@dataclass(frozen=True)
class DetectionOutcome:
    """One backend's part in automatic detection.

    :param name: the backend.
    :param verdict: what it concluded.
    :param seconds: that backend's own time: its detector's (the registry's
        :meth:`~sglang_backends.registry.ServeBackendRegistry.explain` adds its
        load's), or its load's when the load failed or overran (then the bound).
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


def what_happened(outcome: DetectionOutcome) -> str:
    """*outcome*'s plugin and what happened to it, for why detection fell back."""
    label = f"plugin {outcome.name!r} from {outcome.distribution or 'an unknown distribution'}"
    detail = outcome.detail or ""
    if outcome.verdict in (Verdict.NO_MATCH, Verdict.UNKNOWN):
        declined = "declined" if outcome.verdict is Verdict.NO_MATCH else "could not tell"
        return f"{label} was asked and {declined}"
    if outcome.verdict is Verdict.NO_DETECTOR:
        return f"{label} has no detector, so it was not asked"
    if outcome.verdict is Verdict.TIMEOUT:
        return f"{label} timed out: {detail}"
    if detail.startswith("detector"):  # it loaded: its detector raised or answered wrong
        return f"{label} was asked, but its {detail}"
    return f"{label} failed to load: {detail}"


def preferred_note(selected: str, matches: Sequence[str]) -> str:
    """Why *selected* was chosen among *matches*: ``preferred_backends``, naming the others."""
    others = ", ".join(name for name in matches if name != selected)
    return f"chosen by preferred_backends; also matched: {others}"


_T = TypeVar("_T")


def start_each(
    items: Iterable[_T], work: Callable[[_T], object], *, name: Callable[[_T], str]
) -> None:
    """Start ``work(item)`` for every item in daemon threads, without a thread each.

    A thread that has finished its item takes the next one nobody has taken,
    and a new thread is started only while items remain untaken. So an item
    that hangs holds one thread and never delays another by more than one
    thread start, while N quick items need a handful of threads, not N:
    starting a thread waits for it to take the GIL, which costs up to a
    millisecond on a busy machine, seconds for thousands of entry points.
    Returns once every item has been taken; its thread is named *name(item)*.
    """
    queue = collections.deque(items)

    def worker() -> None:
        while True:
            try:
                item = queue.popleft()  # atomic: each item is taken once
            except IndexError:
                return
            threading.current_thread().name = name(item)
            work(item)

    while queue:
        threading.Thread(target=worker, daemon=True).start()


def skipped(
    name: str,
    distribution: str | None,
    seconds: float,
    cause: str,
    verdict: Verdict = Verdict.ERROR,
) -> DetectionOutcome:
    """Log a WARNING for a candidate that could not take part and return its outcome.

    :param cause: one line; it names the distribution when there is one.
    """
    LOG.warning("Skipping automatic detection for serve backend %r: %s", name, cause)
    return DetectionOutcome(name, verdict, seconds, cause, distribution)


def report(
    candidates: Sequence[RegisteredServeBackend | DetectionOutcome],
    request: ServeRequest,
    *,
    timeout: float,
    preferred: Sequence[str] = (),
) -> DetectionReport:
    """Run the loaded candidates' detectors on *request* and decide.

    :param candidates: in registry order, each a loaded backend or the
        outcome that replaced it (a load that failed or overran).
    :param timeout: seconds each detector may take.
    :param preferred: backend names in order of preference among several matches.
    :returns: one match selects it; several select the first of them in
        *preferred*, else nothing (ambiguous); none selects
        :data:`~sglang_backends._core.names.FALLBACK_BACKEND`.
    """
    backends = [c for c in candidates if isinstance(c, RegisteredServeBackend)]
    detected = iter(run_detectors(backends, request, timeout=timeout))
    outcomes = tuple(
        next(detected) if isinstance(c, RegisteredServeBackend) else c for c in candidates
    )
    matches = tuple(o.name for o in outcomes if o.verdict is Verdict.MATCH)
    if len(matches) == 1:
        selected: str | None = matches[0]
    elif matches:
        selected = next((name for name in preferred if name in matches), None)
    else:
        selected = FALLBACK_BACKEND
    return DetectionReport(
        outcomes=outcomes, matches=matches, selected=selected, fallback=not matches
    )


class _DetectorRun:
    """One detector's run in a worker thread: its answer or failure, and its time."""

    __slots__ = ("done", "failure", "result", "seconds")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: object = None
        self.failure: str | None = None
        self.seconds = 0.0


def run_detectors(
    backends: Sequence[RegisteredServeBackend],
    request: ServeRequest,
    *,
    timeout: float,
) -> list[DetectionOutcome]:
    """Run the detectors of *backends* on *request*, concurrently.

    Returns one outcome per backend, in the given order. A detector that
    raises, returns something other than a detection, or has not returned
    within *timeout* seconds is logged as a WARNING and claims nothing.
    """
    deadline = time.perf_counter() + timeout
    runs = {i: _DetectorRun() for i, b in enumerate(backends) if b.backend.detect is not None}

    def work(index: int) -> None:
        run, detector = runs[index], backends[index].backend.detect
        # Each detector gets its own copy: one that mutates its request (with
        # object.__setattr__, say) changes neither the others' nor the backend's.
        own = dataclasses.replace(request, argv=tuple(request.argv))
        started = time.perf_counter()
        try:
            run.result = detector(own)  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001 - a detector must not escape
            run.failure = f"detector raised {type(exc).__name__}: {describe(exc)}"
        run.seconds = time.perf_counter() - started
        run.done.set()

    start_each(runs, work, name=lambda index: f"detect-{backends[index].name}")
    for run in runs.values():  # one shared deadline: N waits in all
        run.done.wait(max(0.0, deadline - time.perf_counter()))
    finished = {index: run.done.is_set() for index, run in runs.items()}
    return [_outcome(b, runs.get(i), finished.get(i), timeout) for i, b in enumerate(backends)]


def _outcome(
    registered: RegisteredServeBackend,
    run: _DetectorRun | None,
    finished: bool | None,
    timeout: float,
) -> DetectionOutcome:
    """What *run*, the run of *registered*'s detector (``None``: it has none), concluded."""
    name, dist = registered.name, registered.distribution
    if run is None:
        return DetectionOutcome(name, Verdict.NO_DETECTOR, distribution=dist)
    if not finished:
        cause = f"detector did not return within {timeout:g} s"
        return skipped(name, dist, timeout, cause, Verdict.TIMEOUT)
    if run.failure is not None:
        return skipped(name, dist, run.seconds, run.failure)
    detection = coerce_detection(run.result)
    if detection is None:
        cause = f"detector must return ServeBackendDetection, got {type(run.result).__name__}"
        return skipped(name, dist, run.seconds, cause)
    return DetectionOutcome(name, Verdict(detection.value), run.seconds, None, dist)
