"""Benchmark (d): ``serve`` start-up with and without configuration.

Times ``sglang-backends serve --model-type NAME --help`` (the shortest path
through dispatch: a targeted help loads one backend and returns) in fresh
processes, with no configuration, with a configuration file and with an
``OS_SERVE_BACKENDS__*`` variable. Without configuration, oslo.config and
cliff are not imported; the difference is what configuration costs.
The backend is the example plugin ``echo`` if installed, else a stand-in
written to a temporary directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import environ, medians, ms, table

STAND_IN = """
import argparse
from sglang_backends import ServeBackend

def run(request):
    argparse.ArgumentParser(prog="bench").parse_args(list(request.argv))

def factory():
    return ServeBackend(api_version=1, run=run)
"""


def _site(directory: Path) -> Path:
    from sglang_backends.testing import write_distribution

    write_distribution(
        directory,
        "bench-backend",
        entry_points={"bench_backend": "bench_backend_plugin:factory"},
        modules={"bench_backend_plugin.py": STAND_IN},
    )
    return directory


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        site = _site(root / "site")
        conf = root / "serve.conf"
        conf.write_text("[serve_backends]\ndetect_timeout = 5\n", encoding="utf-8")
        env = {k: v for k, v in environ([site]).items() if not k.startswith("OS_SERVE_BACKENDS__")}
        command = [sys.executable, "-m", "sglang_backends", "serve"]
        target = ["--model-type", "bench_backend", "--help"]
        cases = {
            "no configuration": [*command, *target],
            "`--config-file serve.conf`": [*command, "--config-file", str(conf), *target],
        }
        results = medians(cases, env, args.repeat)
        env_case = "`OS_SERVE_BACKENDS__DETECT_TIMEOUT=5`"
        results.update(
            medians(
                {env_case: [*command, *target]},
                {**env, "OS_SERVE_BACKENDS__DETECT_TIMEOUT": "5"},
                args.repeat,
            )
        )
    base = results["no configuration"][0]
    rows = [
        [case, ms(wall), "" if wall == base else f"+{wall - base:.0f}"]
        for case, (wall, _) in results.items()
    ]
    return table(["`serve --model-type NAME --help` with", "process ms", "over none"], rows)


if __name__ == "__main__":
    print(main())
