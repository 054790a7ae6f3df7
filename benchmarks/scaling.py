"""Benchmark (g): cost against the number of entry points and of ``detect`` arguments.

Automatic detection over one distribution with N entry points (one module,
a factory and a detector that declines at once), and ``sglang-backends
detect MODEL`` handed N extra arguments, each in a fresh interpreter; the
figure in brackets is the call itself (``auto_detect``, or the command's
``main``). Linear cost doubles a figure when N doubles.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (
    add_source_option,
    environ,
    first_on_path,
    medians,
    ms,
    python,
    table,
)
from sglang_backends.testing import write_distribution

ENTRY_POINTS = (1000, 2000, 4000, 8000)
ARGUMENTS = (12500, 25000, 50000, 100000)

PLUGIN = """
from sglang_backends import ServeBackend, ServeBackendDetection

def detect(request):
    return ServeBackendDetection.NO_MATCH

def factory():
    return ServeBackend(api_version=1, run=print, detect=detect)
"""

DETECTION = """
import time
from sglang_backends import ServeBackendRegistry, ServeRequest
from sglang_backends._sglang.builtins import default_builtins
t = time.perf_counter()
registry = ServeBackendRegistry(default_builtins(), load_timeout=5, detect_timeout=10)
report = registry.explain(ServeRequest(argv=(), model_path="org/model"))
assert report.selected == "llm" and all(
    o.verdict.value in ("no_match", "unknown", "no detector") for o in report.outcomes
), [o for o in report.outcomes if o.verdict.value in ("error", "timeout")][:3]
print(time.perf_counter() - t)
"""

ARGUMENT_LINE = """
import contextlib, io, sys, time
from sglang_backends._cli import main
argv = ["detect", "-f", "value", "org/model"] + ["--flag", "value"] * ({count} // 2)
t = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    status = main(argv)
assert status == 0, status
print(time.perf_counter() - t)
"""


def _cell(command: list[str], env: dict[str, str], repeat: int) -> str:
    """``process (call)`` medians in ms, or why the case failed (an older checkout may)."""
    try:
        wall, inner = medians({"case": command}, env, repeat)["case"]
    except RuntimeError as exc:
        return f"failed: {str(exc).strip().splitlines()[-1]}"
    return f"{ms(wall)} ({ms(inner)})"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    add_source_option(parser)
    args = parser.parse_args(argv)
    first = first_on_path(args.source)
    with tempfile.TemporaryDirectory() as tmp:
        sites = {}
        for count in ENTRY_POINTS:
            site = Path(tmp) / f"n{count}"
            write_distribution(
                site,
                "many-backends",
                entry_points={f"backend{i}": "many_backends:factory" for i in range(count)},
                modules={"many_backends.py": PLUGIN},
            )
            sites[count] = site
        detection = [
            _cell(python(first + DETECTION), environ([sites[count]]), args.repeat)
            for count in ENTRY_POINTS
        ]
        arguments = [
            _cell(python(first + ARGUMENT_LINE.format(count=count)), environ(), args.repeat)
            for count in ARGUMENTS
        ]
    rows = [
        ["automatic detection, N entry points", *detection],
        ["`detect MODEL` with N arguments", *arguments],
    ]
    header = ["case", *(f"N={a} / {b}" for a, b in zip(ENTRY_POINTS, ARGUMENTS, strict=True))]
    return table(header, rows)


if __name__ == "__main__":
    print(main())
