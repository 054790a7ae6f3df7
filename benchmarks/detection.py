"""Benchmark (b): ``auto_detect`` over 8 plugins whose detectors each sleep 0.5 s.

Detectors run concurrently, so detection should take about one detector's
time (0.5 s), not the sum (4 s) a one-after-another loop, as SGLang's own
registry runs them, would take. Both are measured in fresh interpreters;
the figure in brackets is the detection call itself.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import environ, medians, ms, python, table
from sglang_backends.testing import write_distribution

PLUGINS = 8
SLEEP = 0.5

PLUGIN = f"""
import time
from sglang_backends import ServeBackend, ServeBackendDetection

def detect(request):
    time.sleep({SLEEP})
    return ServeBackendDetection.NO_MATCH

def factory():
    return ServeBackend(api_version=1, run=print, detect=detect)
"""

SETUP = """
import time
from sglang_backends import ServeBackendRegistry, ServeRequest
from sglang_backends._sglang.builtins import default_builtins
registry = ServeBackendRegistry(default_builtins())
request = ServeRequest(argv=(), model_path="org/model")
"""
CONCURRENT = (
    SETUP
    + """
t = time.perf_counter()
assert registry.auto_detect(request).name == "llm"
print(time.perf_counter() - t)
"""
)
SEQUENTIAL = (
    SETUP
    + """
t = time.perf_counter()
for name in registry.available_names[1:]:
    detect = registry.get(name).backend.detect
    if detect is not None:
        detect(request)
print(time.perf_counter() - t)
"""
)


def sleepy_site(directory: Path) -> Path:
    """:data:`PLUGINS` plugins whose detectors each sleep :data:`SLEEP` s and decline."""
    for index in range(PLUGINS):
        write_distribution(
            directory,
            f"sleepy-{index}",
            entry_points={f"sleepy{index}": f"sleepy{index}:factory"},
            modules={f"sleepy{index}.py": PLUGIN},
        )
    return directory


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sleepy_site(Path(tmp))
        cases = {
            "`registry.auto_detect(request)` (concurrent)": python(CONCURRENT),
            "detectors one after another (SGLang's loop)": python(SEQUENTIAL),
        }
        results = medians(cases, environ([tmp]), args.repeat)
    rows = [[case, ms(inner), ms(wall)] for case, (wall, inner) in results.items()]
    return table(["case (8 detectors x 0.5 s)", "detection ms", "process ms"], rows)


if __name__ == "__main__":
    print(main())
