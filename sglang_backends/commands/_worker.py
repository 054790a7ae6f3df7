"""A throw-away interpreter that loads plugins for ``check`` and ``detect``.

Started by :func:`sglang_backends.commands._isolation.run_isolated` with the
caller's ``sys.path`` and a JSON job as its one argument. Plugins are
imported here, not in the operator's process, so one that hangs or crashes
the interpreter at import costs only this process. The result is one JSON
object written to the original standard output; everything a plugin prints
(to ``sys.stdout`` or straight to file descriptor 1) goes to stderr. Before
reporting, the worker kills every process the plugin started (it is a child
subreaper on Linux, so orphaned grandchildren are found too) and then exits
at once, whatever threads or exit handlers the plugin left behind.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

if TYPE_CHECKING:
    from sglang_backends.contract import RegisteredServeBackend
    from sglang_backends.registry import ServeBackendRegistry

__all__ = ["Job", "Result"]


_T = TypeVar("_T", bound="_Json")


class _Json:
    """A dataclass sent to or from a worker: JSON by field name, the one wire format."""

    def to_json(self) -> dict[str, Any]:
        # Every subclass is a dataclass; mypy cannot tell from this base.
        fields: dict[str, Any] = dataclasses.asdict(self)  # type: ignore[call-overload]
        return fields

    @classmethod
    def from_json(cls: type[_T], data: Mapping[str, Any]) -> _T:
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Job(_Json):
    """What one worker does, and under which selection.

    :param action: ``load`` one backend by :attr:`name`, check its
        ``contract`` too, or ``explain`` automatic detection for a request.
    :param progress: a file the worker notes each load and detector in as it
        starts and ends, for the command to read should the worker not finish.
    """

    action: Literal["load", "contract", "explain"]
    enabled: Sequence[str] | None
    disabled: Sequence[str]
    name: str = ""
    contract_timeout: float = 0.0
    detect_timeout: float | None = None
    load_timeout: float | None = None
    argv: Sequence[str] = ()
    model_path: str | None = None
    positional: bool = False
    progress: str | None = None


class Outcome(NamedTuple):
    """One backend's verdict on an ``explain`` job's request (a JSON array)."""

    name: str
    distribution: str | None
    verdict: str
    seconds: float
    detail: str | None


@dataclasses.dataclass(frozen=True)
class Result(_Json):
    """What one job found: the loaded backend's declarations, detection's outcomes, or an error."""

    ok: bool = False
    seconds: float = 0.0
    error: str | None = None
    api_version: int | None = None
    has_detector: bool = False
    requires_model_path: bool = False
    help_seconds: float = 0.0
    detections: int = 0
    outcomes: Sequence[Outcome] = ()
    matches: Sequence[str] = ()
    selected: str | None = None
    fallback: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Result:
        outcomes = [Outcome(*o) for o in data.get("outcomes", ())]  # JSON arrays
        return cls(**{**data, "outcomes": outcomes})


def _registry(job: Job) -> ServeBackendRegistry:
    from sglang_backends.registry import ServeBackendRegistry
    from sglang_backends.settings import Settings

    defaults = Settings()
    settings = Settings(
        enabled=None if job.enabled is None else tuple(job.enabled),
        disabled=tuple(job.disabled),
        detect_timeout=job.detect_timeout or defaults.detect_timeout,
        load_timeout=job.load_timeout or defaults.load_timeout,
    )
    return ServeBackendRegistry.from_settings(settings, origins={})


def _error(exc: BaseException) -> Result:
    return Result(ok=False, error=str(exc) or type(exc).__name__)


def _loaded(registered: RegisteredServeBackend, started: float, **extra: Any) -> Result:
    """What a loaded backend declares, and the seconds since *started*."""
    backend = registered.backend
    return Result(
        ok=True,
        seconds=time.perf_counter() - started,
        api_version=backend.api_version,
        has_detector=backend.detect is not None,
        requires_model_path=backend.requires_model_path,
        **extra,
    )


def _load(job: Job) -> Result:
    """Load one backend by name and report its contract fields; with ``contract``, check it."""
    from sglang_backends.testing import ContractViolation, assert_backend_contract

    registry = _registry(job)
    started = time.perf_counter()
    registered = registry.get(job.name)
    if job.action == "load":
        return _loaded(registered, started)
    try:
        # The contract with this host only: importing SGLang to check it too takes seconds.
        report = assert_backend_contract(
            job.name, registry=registry, timeout=job.contract_timeout, sglang=False
        )
    except ContractViolation as exc:
        provider = registered.distribution or "an unknown distribution"
        return Result(ok=False, error=f"{exc} (provided by {provider})")
    return _loaded(
        registered, started, help_seconds=report.help_seconds, detections=len(report.detections)
    )


def _explain(job: Job) -> Result:
    """Run automatic detection on the request and report every outcome."""
    from sglang_backends.contract import ServeRequest

    registry = _registry(job)
    request = ServeRequest(
        argv=tuple(job.argv), model_path=job.model_path, model_path_is_positional=job.positional
    )
    started = time.perf_counter()
    report = registry.explain(request, progress=_progress_to(job.progress))
    return Result(
        ok=True,
        seconds=time.perf_counter() - started,
        outcomes=[
            Outcome(o.name, o.distribution, o.verdict.value, o.seconds, o.detail)
            for o in report.outcomes
        ],
        matches=list(report.matches),
        selected=report.selected,
        fallback=report.fallback,
    )


def _progress_to(path: str | None) -> Callable[[str, str], None] | None:
    """Where the worker notes each load and detector as it starts and ends.

    Read by the command should the worker not finish, to name what held it up.
    """
    if not path:
        return None
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)

    def progress(event: str, label: str) -> None:
        line = f"{event} {' '.join(label.split())}\n"
        os.write(fd, line.encode("utf-8", "replace"))

    return progress


def _run(job: Job) -> Result:
    """Run *job*; a failure, ours or a plugin's, is the result, never raised."""
    try:
        return _explain(job) if job.action == "explain" else _load(job)
    except Exception as exc:  # noqa: BLE001 - our errors and a plugin's: reported, not raised
        return _error(exc)


def main() -> None:
    """Read the job from stdin, run it, write the result to the saved stdout.

    stdin, not a command-line argument: one argument holds at most 128 KiB
    on Linux, and a request (detect's) may be longer.
    """
    from sglang_backends.processes import become_subreaper, descendants, stop_tree

    result_fd = os.dup(1)
    os.dup2(2, 1)  # whatever a plugin prints goes to stderr
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    become_subreaper()
    result = _run(Job.from_json(json.load(sys.stdin)))
    stop_tree(descendants, 0)  # what the plugin started, orphaned grandchildren included
    with os.fdopen(result_fd, "w", encoding="utf-8") as out:
        json.dump(result.to_json(), out)
    sys.stdout.flush()
    sys.stderr.flush()
    # Not a normal exit: a plugin's non-daemon thread or exit handler must not hold it up.
    os._exit(0)


if __name__ == "__main__":
    main()
