"""Benchmark (a): listing backends with many installed distributions.

Generates 0/200/1000/3000 distributions (dist-info directories) in a
temporary directory on ``PYTHONPATH``: most without entry points, one in ten
with console scripts, five with serve backends, one with a general plugin
(``sglang.srt.plugins``). Compares the registry's listing and the ``list``
command (whose rows add each distribution's requirements and the general
plugins) with a bare ``importlib.metadata.entry_points(group=...)`` and with
``python -c pass``, each in fresh interpreters. Prints medians in ms: wall
time of the process and, in brackets, the listing call itself.
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

SIZES = (0, 200, 1000, 3000)
PLUGINS = 5

BARE = """
import time, importlib.metadata
t = time.perf_counter()
eps = importlib.metadata.entry_points(group="sglang.serve_backends")
print(time.perf_counter() - t)
"""
REGISTRY = """
import time
from sglang_backends import ServeBackendRegistry
from sglang_backends._sglang.builtins import default_builtins
t = time.perf_counter()
names = ServeBackendRegistry(default_builtins()).available_names
print(time.perf_counter() - t)
"""


def populate(root: Path, count: int) -> None:
    """Install *count* distributions in *root*, :data:`PLUGINS` of them serve backends."""
    for index in range(count):
        name = f"bench-dist-{index:05d}"
        if index < PLUGINS:
            write_distribution(root, name, entry_points={f"bench{index}": f"bench{index}:factory"})
        elif index == PLUGINS:
            write_distribution(
                root, name, entry_points={"hook": "hook:run"}, group="sglang.srt.plugins"
            )
        elif index % 10 == 0:
            write_distribution(
                root, name, entry_points={f"tool{index}": "tool:main"}, group="console_scripts"
            )
        else:
            write_distribution(root, name)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    cases = {
        "`python -c pass`": python("pass"),
        "`importlib.metadata.entry_points(group=...)`": python(BARE),
        "`ServeBackendRegistry(default_builtins()).available_names`": python(REGISTRY),
        "`sglang-backends list -f value`": [
            sys.executable,
            "-m",
            "sglang_backends",
            "list",
            "-f",
            "value",
            "-c",
            "Name",
        ],
    }
    results = {}
    for count in SIZES:
        with tempfile.TemporaryDirectory() as tmp:
            populate(Path(tmp), count)
            results[count] = medians(cases, environ([tmp]), args.repeat)
    rows = []
    for case in cases:
        cells = []
        for count in SIZES:
            wall, inner = results[count][case]
            cells.append(f"{ms(wall)} ({ms(inner)})" if inner is not None else ms(wall))
        rows.append([case, *cells])
    header = ["case", *(f"N={n}" for n in SIZES)]
    return table(header, rows)


if __name__ == "__main__":
    print(main())
