"""Benchmark (i): automatic detection against the seed's serial loop, on the same plugins.

The seed is SGLang's own registry loop (``ServeBackendRegistry.auto_detect``
in ``sglang/cli/serve_backends.py``), re-implemented in :data:`SEED_LOOP`:
every candidate loaded (``entry_point.load()``, then its factory), then
asked, one after the other, a failure logged and skipped. Two installs:

- ``broken``: one distribution with N entry points whose modules do not
  exist (every import fails), plus one plugin whose detector matches the
  model and whose ``run()`` returns at once. Timed: the seed's loop,
  ``ServeBackendRegistry.auto_detect`` and ``sglang-backends serve MODEL``
  end to end (supervisor, backend process, the matching backend's run).
- ``sleepy``: 8 plugins whose detectors each sleep 0.5 s, nothing matches.
  Timed: the seed's loop and ``auto_detect`` (which chooses ``llm``).

Each case runs in fresh interpreters; the table gives median wall times of
the process and of the detection call itself (``serve`` prints none), each
over the seed's on the same install.
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
from benchmarks.detection import PLUGINS as SLEEPY
from benchmarks.detection import SLEEP, sleepy_site
from sglang_backends.testing import write_distribution

BROKEN = 10000
MODEL = "org/bench-model"

#: SGLang's registry loop over the installed ``sglang.serve_backends`` entry points,
#: with its checks and its warning per skipped candidate; ``llm`` is not asked.
SEED_LOOP = """
import logging, time
from importlib.metadata import entry_points
from sglang_backends import ServeBackend, ServeBackendDetection, ServeRequest

logger = logging.getLogger("seed")
t = time.perf_counter()
discovered = {}
for entry_point in entry_points(group="sglang.serve_backends"):
    discovered.setdefault(entry_point.name, []).append(entry_point)
request = ServeRequest(argv=(), model_path=MODEL)
matches = []
for name in sorted(discovered):
    try:
        (entry_point,) = discovered[name]
        factory = entry_point.load()
        if not callable(factory):
            raise TypeError("the entry point must resolve to a callable factory")
        backend = factory()
        if not isinstance(backend, ServeBackend):
            raise TypeError(f"factory returned {type(backend).__name__}")
        if backend.detect is None:
            continue
        result = backend.detect(request)
        if not isinstance(result, ServeBackendDetection):
            raise TypeError(f"detector must return ServeBackendDetection, got {result!r}")
        if result is ServeBackendDetection.MATCH:
            matches.append(name)
    except Exception as exc:
        logger.warning("Skipping automatic detection for serve backend %r: %s", name, exc)
assert matches == EXPECTED, matches
print(time.perf_counter() - t)
"""

AUTO_DETECT = """
import time
from sglang_backends import ServeBackendRegistry, ServeRequest
from sglang_backends._sglang.builtins import default_builtins
t = time.perf_counter()
registry = ServeBackendRegistry(default_builtins(), load_timeout=60, detect_timeout=60)
chosen = registry.auto_detect(ServeRequest(argv=(), model_path=MODEL))
assert chosen.name == CHOSEN, chosen.name
print(time.perf_counter() - t)
"""

#: ``sglang-backends serve MODEL``, arguments after ``-c``.
SERVE = """
import runpy, sys
sys.argv[0] = "sglang-backends"
runpy.run_module("sglang_backends", run_name="__main__")
"""

MATCHING = """
from sglang_backends import ServeBackend, ServeBackendDetection

def detect(request):
    if (request.model_path or "").endswith("bench-model"):
        return ServeBackendDetection.MATCH
    return ServeBackendDetection.UNKNOWN

def factory():
    return ServeBackend(api_version=1, run=lambda request: None, detect=detect)
"""


def broken_site(directory: Path, count: int) -> Path:
    """*count* entry points whose modules are missing, and one plugin claiming :data:`MODEL`."""
    write_distribution(
        directory,
        "many-broken",
        entry_points={f"broken{i}": f"absent_module_{i}:factory" for i in range(count)},
    )
    write_distribution(
        directory,
        "bench-match",
        entry_points={"bench_match": "bench_match_plugin:factory"},
        modules={"bench_match_plugin.py": MATCHING},
    )
    return directory


def _code(template: str, first: str, **values: str) -> list[str]:
    """``python -c`` running *template* with *values* bound, after *first*."""
    preamble = "".join(f"{name} = {value}\n" for name, value in values.items())
    return python(first + preamble + template)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--broken", type=int, default=BROKEN, help="failing entry points")
    add_source_option(parser)
    args = parser.parse_args(argv)
    first = first_on_path(args.source)
    model = repr(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        broken = environ(
            [*([args.source] if args.source else []), broken_site(Path(tmp) / "b", args.broken)]
        )
        sleepy = environ([*([args.source] if args.source else []), sleepy_site(Path(tmp) / "s")])
        # Not ``-m sglang_backends``, which would import the package in the current directory.
        serve = [sys.executable, "-c", first + SERVE, "serve", MODEL]
        cases = {
            "broken: seed's loop": _code(SEED_LOOP, first, MODEL=model, EXPECTED="['bench_match']"),
            "broken: `auto_detect`": _code(AUTO_DETECT, first, MODEL=model, CHOSEN="'bench_match'"),
            "broken: `serve MODEL`": serve,
            "sleepy: seed's loop": _code(SEED_LOOP, first, MODEL=model, EXPECTED="[]"),
            "sleepy: `auto_detect`": _code(AUTO_DETECT, first, MODEL=model, CHOSEN="'llm'"),
        }
        case_env = {case: broken if case.startswith("broken") else sleepy for case in cases}
        results = medians(cases, broken, args.repeat, case_env=case_env)
    rows = []
    for case, (wall, inner) in results.items():
        seed_wall, seed_inner = results[f"{case.partition(':')[0]}: seed's loop"]
        is_seed = "seed" in case
        rows.append(
            [
                case,
                ms(wall),
                "" if is_seed else f"{wall / seed_wall:.2f}",
                ms(inner),
                ""
                if is_seed or inner is None or seed_inner is None
                else f"{inner / seed_inner:.2f}",
            ]
        )
    header = f"case (broken: {args.broken} + 1 match; sleepy: {SLEEPY} x {SLEEP} s)"
    return table([header, "process ms", "/ seed", "call ms", "/ seed"], rows)


if __name__ == "__main__":
    print(main())
