"""Benchmark (d): ``serve`` start-up with and without configuration.

Times ``sglang-backends serve --model-type NAME --help`` (the shortest path
through dispatch: a targeted help loads one backend and returns) in fresh
processes, with no configuration, with a configuration file and with an
``OS_SERVE_BACKENDS__*`` variable. Without configuration, oslo.config and
cliff are not imported; the difference is what configuration costs.
The backend is a minimal stand-in plugin written to a temporary directory,
so the figures do not depend on which plugins are installed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import environ, medians, ms, over, table

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
        env_case = "`OS_SERVE_BACKENDS__DETECT_TIMEOUT=5`"
        cases[env_case] = [*command, *target]
        results = medians(
            cases,
            env,
            args.repeat,
            case_env={env_case: {**env, "OS_SERVE_BACKENDS__DETECT_TIMEOUT": "5"}},
        )
    base = results["no configuration"][0]
    rows = [[case, ms(wall), over(wall, base)] for case, (wall, _) in results.items()]
    return table(["`serve --model-type NAME --help` with", "process ms", "over none"], rows)


if __name__ == "__main__":
    print(main())
