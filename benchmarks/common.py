"""Helpers shared by the benchmarks: fresh interpreters, medians, markdown."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Bytecode is written to a private prefix so imports are measured as after an
# install (compiled), without writing into the source tree.
PYCACHE = Path(tempfile.gettempdir()) / "sglang-backends-bench-pycache"


def environ(extra_path: Sequence[str | os.PathLike[str]] = ()) -> dict[str, str]:
    """The environment for measured interpreters: compiled bytecode, *extra_path* first."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    parts = [str(p) for p in extra_path] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def run(argv: Sequence[str], env: Mapping[str, str]) -> tuple[float, str]:
    """Run *argv*; return its wall time in seconds and its stdout."""
    started = time.perf_counter()
    result = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode:
        raise RuntimeError(f"{argv!r} failed:\n{result.stderr}")
    return elapsed, result.stdout


def add_source_option(parser: argparse.ArgumentParser) -> None:
    """``--source DIR``: measure another checkout's package (see :func:`first_on_path`)."""
    parser.add_argument(
        "--source",
        metavar="DIR",
        help="measure the sglang_backends package in DIR (another checkout) instead",
    )


def first_on_path(source: str | None) -> str:
    """Code putting *source* first on ``sys.path``, before the current directory
    ``python -c`` puts there; empty without *source*.
    """
    return f"import sys; sys.path.insert(0, {source!r})\n" if source else ""


def python(code: str, *flags: str) -> list[str]:
    return [sys.executable, *flags, "-c", code]


def medians(
    cases: Mapping[str, Sequence[str]],
    env: Mapping[str, str],
    repeat: int,
    *,
    case_env: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, tuple[float, float | None]]:
    """Median wall time (ms) per case, and of the float each run prints last (ms), if any.

    Cases are interleaved round by round so drift in the machine's load
    affects them alike; one warm-up round compiles bytecode first.
    *case_env* gives some cases their own environment instead of *env*.
    """
    envs = {name: (case_env or {}).get(name, env) for name in cases}
    for name, argv in cases.items():
        run(argv, envs[name])
    walls: dict[str, list[float]] = {name: [] for name in cases}
    inner: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, argv in cases.items():
            wall, out = run(argv, envs[name])
            walls[name].append(wall * 1000)
            last = out.split()[-1:] or [""]
            try:
                inner[name].append(float(last[0]) * 1000)
            except ValueError:
                pass  # the case prints no timing of its own
    return {
        name: (
            statistics.median(walls[name]),
            statistics.median(inner[name]) if inner[name] else None,
        )
        for name in cases
    }


def over(value: float, base: float) -> str:
    """*value* relative to *base*, signed, in whole ms (empty for the base itself)."""
    return "" if value == base else f"{value - base:+.0f}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ms(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"
