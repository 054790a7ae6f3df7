"""Benchmark (c): the cost of importing the plugin contract.

Compares ``from sglang_backends import ServeBackend, ServeRequest,
ServeBackendDetection`` with ``import importlib.metadata``, with the
standard modules SGLang's contract module imports (its discovery lives in
the same module) and with ``python -c pass``. Interpreters run with ``-S``
and the source tree on ``PYTHONPATH``, so the figures hold import costs
alone, not ``site`` or an editable install's path hooks. ``import
dataclasses`` is shown as the floor: the contract's classes are dataclasses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, environ, medians, ms, over, python, table

CONTRACT = "from sglang_backends import ServeBackend, ServeRequest, ServeBackendDetection"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args(argv)
    cases = {
        "`python -S -c pass`": python("pass", "-S"),
        "`import dataclasses`": python("import dataclasses", "-S"),
        f"`{CONTRACT}`": python(CONTRACT, "-S"),
        "`import importlib.metadata`": python("import importlib.metadata", "-S"),
        "`import dataclasses, importlib.metadata, logging` (SGLang's contract module's imports)": (
            python("import dataclasses, importlib.metadata, logging", "-S")
        ),
    }
    results = medians(cases, environ([ROOT]), args.repeat)
    base = results["`python -S -c pass`"][0]
    rows = [[case, ms(wall), over(wall, base)] for case, (wall, _) in results.items()]
    return table(["case", "process ms", "over `pass`"], rows)


if __name__ == "__main__":
    print(main())
