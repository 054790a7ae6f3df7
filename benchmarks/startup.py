"""Benchmark (j): start-up of every short path, this checkout against another.

Times, in fresh processes interleaved round by round, the paths whose
start-up a change to the package's shape could move: the general ``serve
--help`` (with its floor, a bare interpreter listing the plugins), a
backend's own help, ``list``, importing the contract (``-S``: import costs
only) and loading the pytest plugin. With ``--source DIR`` each path runs
twice, once with DIR's package first on the path; without it, this
checkout's alone.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (
    ROOT,
    add_source_option,
    environ,
    first_on_path,
    medians,
    ms,
    table,
)
from benchmarks.serve_startup import FLOOR, _site


def _cases(source: str | None) -> dict[str, list[str]]:
    """Each path as this checkout's interpreter runs it, *source*'s package first if given."""
    script = str(Path(sys.executable).with_name("sglang-backends"))
    first = first_on_path(source)  # before the current directory ``-c`` puts first
    return {
        "`serve --help`": [script, "serve", "--help"],
        "`serve --model-type bench_backend --help`": [
            script,
            "serve",
            "--model-type",
            "bench_backend",
            "--help",
        ],
        "`list -f value`": [script, "list", "-f", "value"],
        "import the contract (`-S`)": [
            sys.executable,
            "-S",
            "-c",
            first + "import sglang_backends.contract",
        ],
        "the pytest plugin, after pytest": [
            sys.executable,
            "-c",
            first + "import pytest; import sglang_backends.testing._pytest_plugin",
        ],
    }


def _environ(first: str | Path, site: Path) -> dict[str, str]:
    """The measured environment: *first*'s package, then *site*; no configuration."""
    return {k: v for k, v in environ([first, site]).items() if not k.startswith("OS_SERVE")}


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    add_source_option(parser)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        site = _site(Path(tmp) / "site")
        ours = _environ(ROOT, site)
        cases = {"floor": [sys.executable, "-c", FLOOR]}
        cases.update({f"{name} (this)": argv for name, argv in _cases(None).items()})
        case_env: dict[str, dict[str, str]] = {}
        if args.source:
            theirs = _environ(args.source, site)
            for name, argv in _cases(args.source).items():
                cases[f"{name} (source)"] = argv
                case_env[f"{name} (source)"] = theirs
        results = medians(cases, ours, args.repeat, case_env=case_env)
    floor = results["floor"][0]
    rows = []
    for name in _cases(None):
        this = results[f"{name} (this)"][0]
        row = [name, ms(this), f"{this / floor:.2f}"]
        if args.source:
            source = results[f"{name} (source)"][0]
            row += [ms(source), f"{this / source:.2f}"]
        rows.append(row)
    header = ["path", "this ms", "over the floor"]
    if args.source:
        header += ["source ms", "this / source"]
    return table(header, [["floor", ms(floor), "1.00", *([""] * (len(header) - 3))], *rows])


if __name__ == "__main__":
    print(main())
