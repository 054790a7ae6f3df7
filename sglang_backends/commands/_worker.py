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

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_backends.contract import RegisteredServeBackend

__all__ = ["main", "run_job"]


def _registry(job: dict[str, Any]) -> Any:
    from sglang_backends.registry import ServeBackendRegistry
    from sglang_backends.settings import Settings

    defaults = Settings()
    settings = Settings(
        enabled=None if job.get("enabled") is None else tuple(job["enabled"]),
        disabled=tuple(job.get("disabled", ())),
        detect_timeout=float(job.get("detect_timeout", defaults.detect_timeout)),
        load_timeout=float(job.get("load_timeout", defaults.load_timeout)),
    )
    return ServeBackendRegistry.from_settings(settings, origins=job.get("origins") or {})


def _error(exc: BaseException) -> dict[str, Any]:
    return {
        "ok": False,
        "error": str(exc) or type(exc).__name__,
        "error_type": type(exc).__name__,
        "distribution": getattr(exc, "distribution", None),
    }


def _load(job: dict[str, Any]) -> dict[str, Any]:
    """Load one backend by name and report its contract fields."""
    registry = _registry(job)
    started = time.perf_counter()
    registered = registry.get(job["name"])
    return _loaded(registered, started)


def _loaded(registered: RegisteredServeBackend, started: float) -> dict[str, Any]:
    """What a loaded backend declares, and the seconds since *started*."""
    backend = registered.backend
    return {
        "ok": True,
        "seconds": time.perf_counter() - started,
        "distribution": registered.distribution,
        "api_version": backend.api_version,
        "has_detector": backend.detect is not None,
        "requires_model_path": backend.requires_model_path,
    }


def _explain(job: dict[str, Any]) -> dict[str, Any]:
    """Run automatic detection on the request and report every outcome."""
    from sglang_backends.contract import ServeRequest

    registry = _registry(job)
    request = ServeRequest(
        argv=tuple(job["argv"]),
        model_path=job.get("model_path"),
        model_path_is_positional=bool(job.get("positional")),
    )
    started = time.perf_counter()
    report = registry.explain(request, progress=_progress_to(job.get("progress")))
    return {
        "ok": True,
        "seconds": time.perf_counter() - started,
        "outcomes": [
            {
                "name": o.name,
                "distribution": o.distribution,
                "verdict": o.verdict.value,
                "seconds": o.seconds,
                "detail": o.detail,
            }
            for o in report.outcomes
        ],
        "matches": list(report.matches),
        "selected": report.selected,
        "fallback": report.fallback,
    }


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


def _contract(job: dict[str, Any]) -> dict[str, Any]:
    """Load one backend and run the plugin-author kit's contract checks on it."""
    from sglang_backends.testing import ContractViolation, assert_backend_contract

    registry = _registry(job)
    started = time.perf_counter()
    registered = registry.get(job["name"])
    try:
        # The contract with this host only: importing SGLang to check it too takes seconds.
        report = assert_backend_contract(
            job["name"], registry=registry, timeout=float(job["contract_timeout"]), sglang=False
        )
    except ContractViolation as exc:
        provider = registered.distribution or "an unknown distribution"
        return {
            **_error(exc),
            "error": f"{exc} (provided by {provider})",
            "distribution": registered.distribution,
        }
    return {
        **_loaded(registered, started),
        "help_seconds": report.help_seconds,
        "detections": len(report.detections),
    }


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run *job* (``{"action": "load"|"explain"|"contract", ...}``); return its JSON-able result."""
    action = {"load": _load, "explain": _explain, "contract": _contract}[job["action"]]
    try:
        return action(job)
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
    result = run_job(json.load(sys.stdin))
    stop_tree(descendants, 0)  # what the plugin started, orphaned grandchildren included
    with os.fdopen(result_fd, "w", encoding="utf-8") as out:
        json.dump(result, out)
    sys.stdout.flush()
    sys.stderr.flush()
    # Not a normal exit: a plugin's non-daemon thread or exit handler must not hold it up.
    os._exit(0)


if __name__ == "__main__":
    main()
