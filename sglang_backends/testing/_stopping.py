"""The kit's stop check: a backend served under each installed host stops as Ctrl+C asks.

No traceback, the status a signal gives (or 0), and no process left behind,
under this package's ``serve`` and, where SGLang is installed, under SGLang's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

from sglang_backends._core import processes, tree
from sglang_backends._core.signals import signal_name
from sglang_backends._sglang.fork import sglang_unusable
from sglang_backends._sglang.installed import sglang_installed
from sglang_backends.errors import ConfigurationError, did_you_mean, refuse_string
from sglang_backends.registry import timeout_argument
from sglang_backends.testing._conformance import ContractViolation, SGLangNotCheckedWarning

#: This package's host and SGLang's, each run as a command: ``HOST --model-type NAME ARGS``.
HOSTS: dict[str, tuple[str, ...]] = {
    "sglang-backends serve": ("-m", "sglang_backends", "serve"),
    # SGLang's own dispatch (sglang/cli/serve.py), as its `sglang serve` calls it; the
    # `sglang` console script itself where it is installed beside this interpreter.
    "sglang serve": (
        "-c",
        "import sys; from sglang.cli.serve import serve; serve(None, sys.argv[1:])",
    ),
}


def installed_hosts() -> tuple[str, ...]:
    """The hosts that can serve a backend here: this package's, and SGLang's where installed.

    SGLang is looked for without importing it (its import takes seconds), as serve
    looks for it (:func:`sglang_backends._sglang.installed.sglang_installed`): a fork
    shipping the ``sglang`` package without SGLang's serve-backend API is not SGLang.
    """
    return tuple(HOSTS) if sglang_installed() else ("sglang-backends serve",)


def assert_stops_cleanly(
    name: str,
    argv: Sequence[str],
    *,
    ready: str | None = None,
    env: Mapping[str, str] | None = None,
    hosts: Iterable[str] | None = None,
    signum: int = signal.SIGINT,
    start_timeout: float = 60.0,
    stop_timeout: float = 15.0,
) -> dict[str, int]:
    """Serve backend *name* under each host in a subprocess, stop it as Ctrl+C does, check the end.

    Each host (by default :func:`installed_hosts`) runs ``--model-type NAME
    ARGV`` in a session of its own; once the output shows *ready* (or, without
    it, after a second), *signum* goes to its process group, as a terminal's
    Ctrl+C does. The backend must then end within *stop_timeout* seconds with
    status ``0`` or ``128 + signum`` (or by the signal itself), print no
    traceback and leave no process running. A host not installed is reported with
    :class:`SGLangNotCheckedWarning`.

    :param argv: the backend's arguments (a model path, a free port: ``--port 0``).
    :param env: the environment of the hosts; default ``os.environ``.
    :param hosts: some of :data:`HOSTS`' names.
    :raises ContractViolation: the backend did not start, or did not stop cleanly.
    :raises ConfigurationError: *argv* or *hosts* is a string, or a host is not one of
        :data:`HOSTS`; nothing is started.
    :returns: each host's exit status.
    """
    __tracebackhide__ = True
    refuse_string(argv, "argv must be a sequence of arguments")
    refuse_string(hosts, "hosts must be a collection of host names")
    chosen = tuple(installed_hosts() if hosts is None else hosts)
    for host in chosen:
        if host not in HOSTS:
            raise ConfigurationError(
                f"Unknown host {host!r}{did_you_mean(host, HOSTS)} Known hosts: {', '.join(HOSTS)}."
            )
        # In this process's environment, which the run takes without env.
        if env is None and host not in installed_hosts():
            raise ConfigurationError(
                f"Host {host!r} cannot serve here: {sglang_unusable() or 'SGLang is not installed'}"
            )
    if signum not in set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}:
        raise ConfigurationError(
            f"Invalid value {signum!r} for signum: no signal a backend can take"
        )
    start_timeout = timeout_argument("start_timeout", start_timeout)
    stop_timeout = timeout_argument("stop_timeout", stop_timeout)
    if hosts is None and "sglang serve" not in chosen:
        warnings.warn(
            f"Serve backend {name!r}: stopping under 'sglang serve' was not checked: "
            f"{sglang_unusable() or 'SGLang is not installed'}",
            SGLangNotCheckedWarning,
            stacklevel=2,
        )
    statuses: dict[str, int] = {}
    # SGLang's console script, if installed.
    script = Path(sys.executable).with_name("sglang")
    # A loop, not a comprehension: its frame would show in a failure.
    for host in chosen:
        if host == "sglang serve" and script.is_file():
            command = [str(script), "serve", "--model-type", name, *argv]
        else:
            command = [sys.executable, *HOSTS[host], "--model-type", name, *argv]
        who = f"Serve backend {name!r} under {host}"
        shown = f"{host} --model-type {name} {' '.join(argv)}".rstrip()
        # Chunks as they come, not lines: a ready text without its newline is printed too.
        chunks: list[bytes] = []
        # Orphans (a double fork's) re-parent to this process meanwhile, to be seen.
        with tree.adopting_orphans():
            before = set(tree.descendants(os.getpid()))
            # With env None, this process's environment.
            proc = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            stdout = proc.stdout
            assert stdout is not None
            reader = threading.Thread(target=_read, args=(stdout, chunks), daemon=True)
            reader.start()
            seen: set[psutil.Process] = set()
            try:
                deadline = time.monotonic() + (start_timeout if ready else 1.0)
                while time.monotonic() < deadline and proc.poll() is None:
                    seen.update(_started(before))
                    if ready and ready in _text(chunks):
                        # A run() that printed it and returned has not served: let it show.
                        time.sleep(_SETTLE)
                        break
                    time.sleep(0.05)
                lines = _text(chunks).splitlines(keepends=True)
                if proc.poll() is not None:
                    raise ContractViolation(
                        f"{who} ended before it was stopped, with status {proc.returncode} "
                        f"({shown}): {_tail(lines)}"
                    )
                if ready and ready not in "".join(lines):
                    raise ContractViolation(
                        f"{who} did not print {ready!r} within {start_timeout:g} s ({shown}): "
                        + _tail(lines)
                    )
                seen.update(_started(before))
                # What it printed before the signal (a warning's traceback at start) is not how
                # it stopped.
                stopped_from = len(chunks)
                processes.send(proc.pid, signum, group=True)
                try:
                    status = proc.wait(stop_timeout)
                except subprocess.TimeoutExpired:
                    raise ContractViolation(
                        f"{who} did not end within {stop_timeout:g} s of {signal_name(signum)}; "
                        "stop serving on it (see sglang_backends.stop_quietly)"
                    ) from None
            finally:
                # On every way out, a failed start included: nothing left running, no pipe open.
                if proc.poll() is None:
                    processes.send(proc.pid, signal.SIGKILL, group=True)
                    proc.wait()
                # Orphans re-parented to this process (a subreaper meanwhile) are the backend's.
                seen.update(_started(before))
                left = tree.kill_left(seen)
                # Once they are gone, the pipe they shared is at its end; closing it while the
                # reader still reads would wait for that read.
                reader.join(5)
                if not reader.is_alive():
                    stdout.close()
        lines = _text(chunks).splitlines(keepends=True)
        if "Traceback (most recent call last)" in _text(chunks[stopped_from:]):
            problem = f"printed a traceback (status {status})"
        elif status not in (0, 128 + signum, -signum):
            problem = f"ended with status {status}"
        elif left:
            problem = f"left processes running: {sorted(p.pid for p in left)}"
        else:
            statuses[host] = status
            continue
        raise ContractViolation(
            f"{who} {problem} on {signal_name(signum)} (expected status 0 or {128 + signum}, "
            f"no traceback, no process left; serve within sglang_backends.stop_quietly()): "
            + _tail(lines)
        )
    return statuses


#: Seconds a backend is watched once it printed its ready text: one that returned has ended.
_SETTLE = 0.5


def _started(before: set[psutil.Process]) -> set[psutil.Process]:
    """This process's descendants but *before*: the host's, and orphans it adopted."""
    return set(tree.descendants(os.getpid())) - before


def _read(stdout: IO[bytes], chunks: list[bytes]) -> None:
    """Add what *stdout* gives to *chunks* as soon as it comes, until its end."""
    while chunk := stdout.read1(65536):  # type: ignore[attr-defined]
        chunks.append(chunk)


def _text(chunks: list[bytes]) -> str:
    """The output in *chunks*, decoded (a byte that is not UTF-8 escaped)."""
    return b"".join(chunks).decode(errors="backslashreplace")


def _tail(lines: list[str]) -> str:
    """The last lines of a host's output, on one line."""
    return " | ".join(line.rstrip() for line in lines[-5:]) or "no output"
