"""A worker process of ``check`` and ``detect``: it loads a plugin, or runs detection.

Started by :func:`sglang_backends._operators.worker.run_isolated` with a
:class:`~sglang_backends._operators.worker.Job` on stdin; it writes one JSON
:class:`~sglang_backends._operators.worker.Result` to its original stdout (what
a plugin prints goes to stderr), kills every process the plugin started (as a
child subreaper, orphans too) and exits at once. The registry, the kit's
contract check and psutil are imported here, never in the command's process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
import time

from sglang_backends._core import console
from sglang_backends._core.processes import StopSignals, exit_now
from sglang_backends._core.progress import ProgressWriter
from sglang_backends._core.settings import Settings
from sglang_backends._core.tree import become_subreaper, descendants, stop_tree
from sglang_backends._operators.worker import Job, Outcome, Result
from sglang_backends._serve.argv import request_fields
from sglang_backends._sglang.installed import load_sglang, sglang_installed
from sglang_backends.contract import SGLANG_CONTRACT_MODULE, ServeRequest
from sglang_backends.errors import describe
from sglang_backends.registry import ServeBackendRegistry
from sglang_backends.testing import (
    ContractViolation,
    assert_backend_contract,
    assert_sglang_accepts,
)


def _load(job: Job) -> Result:
    """Load one backend by name and report what it declares; with ``contract``, check it."""
    registry = ServeBackendRegistry.from_settings(job.settings)
    started = time.perf_counter()
    # With --contract, SGLang's host is checked too where it is installed.
    sglang_host = job.action == "contract" and sglang_installed()
    if sglang_host:
        # SGLang's contract first, as sglang serve and the kit import it: a backend built
        # at import is then SGLang's. Should it fail to import, the kit says so below.
        with contextlib.suppress(Exception):
            load_sglang(SGLANG_CONTRACT_MODULE, filtered=False)
    sglang = None
    kept = ""
    if job.action == "contract":
        # This package's contract first, the kit loading the backend itself (what its
        # import starts is then seen): SGLang's host is not asked of a breach. Then, only
        # where SGLang is installed (importing it takes seconds), SGLang's host. Each step
        # first sets what the SGLang column says should the check fail.
        sglang = "not checked: contract broken"
        try:
            report = assert_backend_contract(
                job.name, registry=registry, timeout=job.contract_timeout, sglang=False
            )
            sglang = "refused"
            if sglang_host:
                assert_sglang_accepts(job.name, timeout=job.contract_timeout)
        except ContractViolation as exc:
            # A breach of the backend's own names its distribution already.
            plugin = registry.inventory.by_name(job.name)
            provider = (plugin and plugin.distribution) or "an unknown distribution"
            error = str(exc) if exc.distribution else f"{exc} (provided by {provider})"
            return Result(error=error, sglang=sglang)
        sglang = "accepted" if sglang_host else "not checked: SGLang is not installed"
        kept = (
            f"; contract kept (--help in {report.help_seconds:.2f} s, "
            f"{len(report.detections)} detector requests answered)"
        )
    # Loaded once: the contract's check loaded it already.
    backend = registry.get(job.name).backend
    detail = (
        f"API version {backend.api_version}, "
        f"{'has a detector' if backend.detect is not None else 'no detector'}, "
        f"{'requires' if backend.requires_model_path else 'does not require'} a model path"
    )
    return Result(seconds=time.perf_counter() - started, detail=detail + kept, sglang=sglang)


def _explain(job: Job) -> Result:
    """Run automatic detection on the request and report every outcome."""
    registry = ServeBackendRegistry.from_settings(job.settings)
    request = ServeRequest(*request_fields(job.argv))
    started = time.perf_counter()
    # Noted as serve's backend process tells its supervisor.
    noted = ProgressWriter(os.open(job.progress, os.O_WRONLY | os.O_APPEND))
    report = registry.explain(request, progress=noted.progress)
    return Result(
        seconds=time.perf_counter() - started,
        outcomes=[
            Outcome(o.name, o.distribution, o.verdict.value, o.seconds, o.detail)
            for o in report.outcomes
        ],
        matches=list(report.matches),
        selected=report.selected,
        fallback=report.fallback,
    )


def main() -> None:
    """Read the job from stdin (a request may be longer than an argument's 128 KiB), run
    it, write the result to the saved stdout.
    """
    result_fd = os.dup(1)
    # Whatever a plugin prints goes to stderr.
    os.dup2(2, 1)
    logging.basicConfig(level=logging.WARNING, format=console.LOG_FORMAT, stream=sys.stderr)
    become_subreaper()
    data = json.load(sys.stdin)
    # The settings come as a JSON array.
    job = Job(**{**data, "settings": Settings(*data["settings"])})
    # As in serve's backend process: a stop signal unwinds the worker (it dies of it),
    # and a KeyboardInterrupt or SystemExit no signal caused is the plugin's failure.
    with StopSignals():
        try:
            result = _explain(job) if job.action == "explain" else _load(job)
        except Exception as exc:  # noqa: BLE001
            # Our errors and a plugin's: reported, not raised.
            result = Result(error=describe(exc))
    # Stop what the plugin started, orphans included.
    stop_tree(descendants, 0, adopted=True)
    with os.fdopen(result_fd, "w", encoding="utf-8") as out:
        json.dump(dataclasses.asdict(result), out)
    console.flush()
    # Not a normal exit: a plugin's non-daemon thread or exit handler must not hold it up.
    exit_now(0)
