"""Benchmark (e): automatic detection with one plugin whose import hangs.

Each plugin's load is bounded by ``load_timeout`` and each detector by
``detect_timeout``, so ``auto_detect`` returns in about the sum of the two
(here 2 s + 1 s) even when one plugin's import never finishes and another's
detector never answers; the healthy case is the reference. Measured in
fresh interpreters; the figure in brackets is the detection call itself.
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

LOAD_TIMEOUT = 2.0
DETECT_TIMEOUT = 1.0

PLUGIN = """
import time
from sglang_backends import ServeBackend, ServeBackendDetection
time.sleep({import_sleep})

def detect(request):
    time.sleep({detect_sleep})
    return ServeBackendDetection.NO_MATCH

def factory():
    return ServeBackend(api_version=1, run=print, detect=detect)
"""

DETECT = f"""
import time
from sglang_backends import ServeBackendRegistry, ServeRequest
from sglang_backends._sglang.builtins import default_builtins
registry = ServeBackendRegistry(
    default_builtins(), load_timeout={LOAD_TIMEOUT}, detect_timeout={DETECT_TIMEOUT}
)
request = ServeRequest(argv=(), model_path="org/model")
t = time.perf_counter()
assert registry.auto_detect(request).name == "llm"
print(time.perf_counter() - t)
"""


def _install(root: str, name: str, import_sleep: float, detect_sleep: float) -> None:
    write_distribution(
        root,
        f"{name}-runtime",
        entry_points={name: f"{name}_plugin:factory"},
        modules={
            f"{name}_plugin.py": PLUGIN.format(import_sleep=import_sleep, detect_sleep=detect_sleep)
        },
    )


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as healthy, tempfile.TemporaryDirectory() as hung:
        for root in (healthy, hung):
            _install(root, "quick", 0, 0.1)
        _install(hung, "hangs", 3600, 0)  # its import never finishes
        _install(hung, "mute", 0, 3600)  # its detector never answers
        results = medians(
            {
                "healthy plugin only": python(DETECT),
                "plus one hanging import and one hanging detector": python(DETECT),
            },
            environ([healthy]),
            args.repeat,
            case_env={"plus one hanging import and one hanging detector": environ([hung])},
        )
    rows = [[case, ms(inner), ms(wall)] for case, (wall, inner) in results.items()]
    header = f"case (load_timeout {LOAD_TIMEOUT:g} s, detect_timeout {DETECT_TIMEOUT:g} s)"
    return table([header, "detection ms", "process ms"], rows)


if __name__ == "__main__":
    print(main())
