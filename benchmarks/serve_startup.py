"""Benchmark (d): ``serve`` start-up with and without configuration, and beside SGLang's.

Times ``sglang-backends serve --model-type NAME --help`` (the shortest path
through dispatch: a targeted help loads one backend and returns) in fresh
processes, with no configuration, with a configuration file and with an
``OS_SERVE_BACKENDS__*`` variable. Without configuration, oslo.config and
cliff are not imported; the difference is what configuration costs.
The backend is a minimal stand-in plugin written to a temporary directory,
so the figures do not depend on which plugins are installed.

With ``--sglang-python PATH`` (the interpreter of an environment holding
SGLang and this package), it also times the same serve command, a run of
that light plugin (``MODEL --model-type NAME``, and ``MODEL`` with automatic
detection, which the plugin's detector claims), through upstream's
``sglang serve`` and through ``sglang-backends serve``: with no general
plugin to load (``SGLANG_PLUGINS`` naming none of the installed ones) and
with SGLang's own install as it is (SGLang 0.5.23 depends on
smg-grpc-servicer, which registers two general plugins).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import environ, medians, ms, over, table

STAND_IN = """
import argparse
import os
import sys

from sglang_backends import ServeBackend, ServeBackendDetection

def run(request):
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--model-path")
    parser.parse_args(list(request.argv))

def _host():
    # The host's own classes: SGLang's registry accepts only SGLang's, and
    # importing SGLang here would cost this light plugin seconds under ours.
    return sys.modules.get("sglang.cli.serve_backends")

def detect(request):
    verdicts = getattr(_host(), "ServeBackendDetection", ServeBackendDetection)
    if (request.model_path or "").endswith("bench-model"):
        return verdicts.MATCH
    return verdicts.UNKNOWN

def factory():
    cls = getattr(_host(), "ServeBackend", ServeBackend)
    return cls(api_version=1, run=run, detect=detect)
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


def beside_sglang(python: Path, repeat: int) -> str:
    """``sglang serve`` and ``sglang-backends serve`` running the light plugin, side by side."""
    bindir = python.parent
    upstream = [str(bindir / "sglang"), "serve"]
    ours = [str(bindir / "sglang-backends"), "serve"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        site = _site(root / "site")
        model = root / "bench-model"
        model.mkdir()
        base = {k: v for k, v in os.environ.items() if not k.startswith("OS_SERVE_BACKENDS__")}
        base.update(PYTHONPATH=str(site), HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
        base.pop("SGLANG_PLUGINS", None)
        no_general = {**base, "SGLANG_PLUGINS": "no-such-plugin"}
        commands = {
            "`MODEL --model-type bench_backend`, no general plugin": (
                [str(model), "--model-type", "bench_backend"],
                no_general,
            ),
            "`MODEL` (auto), no general plugin": ([str(model)], no_general),
            "`MODEL --model-type bench_backend`, SGLang's general plugins": (
                [str(model), "--model-type", "bench_backend"],
                base,
            ),
        }
        cases: dict[str, list[str]] = {}
        case_env: dict[str, dict[str, str]] = {}
        for label, (args, env) in commands.items():
            for side, command in (("upstream", upstream), ("ours", ours)):
                cases[f"{side} {label}"] = [*command, *args]
                case_env[f"{side} {label}"] = env
        results = medians(cases, base, repeat, case_env=case_env)
    rows = []
    for label in commands:
        theirs, mine = results[f"upstream {label}"][0], results[f"ours {label}"][0]
        rows.append([label, ms(theirs), ms(mine), f"{100 * mine / theirs:.1f}%"])
    return table(["serve command", "`sglang serve` ms", "ours ms", "ours / upstream"], rows)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--sglang-python",
        type=Path,
        metavar="PATH",
        help="interpreter of an environment with SGLang and sglang-backends installed: "
        "also compare with upstream's sglang serve",
    )
    parser.add_argument(
        "--sglang-repeat", type=int, default=3, help="runs per case beside SGLang (slow)"
    )
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
    report = table(["`serve --model-type NAME --help` with", "process ms", "over none"], rows)
    if args.sglang_python is not None:
        report += "\n\n" + beside_sglang(args.sglang_python, args.sglang_repeat)
    return report


if __name__ == "__main__":
    print(main())
