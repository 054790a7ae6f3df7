"""Benchmark (d): ``serve`` start-up with and without configuration, and beside SGLang's.

Times ``sglang-backends serve --model-type NAME --help`` (the shortest path
through dispatch: a targeted help loads one backend and returns) in fresh
processes, with no configuration, with a configuration file and with an
``OS_SERVE_BACKENDS__*`` variable. Without configuration, oslo.config and
cliff are not imported; the difference is what configuration costs.
The backend is a minimal stand-in plugin written to a temporary directory,
so the figures do not depend on which plugins are installed.

It also times the general ``serve --help`` against its floor, a bare
interpreter calling ``importlib.metadata.entry_points(group=...)``, in this
interpreter's environment (run it from one without SGLang).

With ``--sglang-python PATH`` (the interpreter of an environment holding
SGLang and this package), it also times, through upstream's ``sglang
serve`` and through ``sglang-backends serve``: the general ``--help``;
``--model-type llm --help``; ``--model-type omni --help`` (``omni`` is the
light stand-in plugin unless sglang-omni is installed, and the table says
which); and runs of the light plugin (``MODEL --model-type NAME``, and
``MODEL`` with automatic detection, which its detector claims) with no
general plugin to load (``SGLANG_PLUGINS=none``) and with SGLang's own
install as it is (SGLang 0.5.23 depends on smg-grpc-servicer, which
registers two general plugins).
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

from sglang_backends import ServeBackendDetection, portable_backend

def run(request):
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--model-path")
    parser.parse_args(list(request.argv))

def detect(request):
    if (request.model_path or "").endswith("bench-model"):
        return ServeBackendDetection.MATCH
    return ServeBackendDetection.UNKNOWN

def factory():
    # The calling host's classes (SGLang's under `sglang serve`), without importing SGLang.
    return portable_backend(api_version=1, run=run, detect=detect)

def omni():
    # No detector: auto-detection must still find exactly one claimant.
    return portable_backend(api_version=1, run=run)
"""

#: The floor of a general help: a bare interpreter listing the plugins.
FLOOR = "import importlib.metadata as m; m.entry_points(group='sglang.serve_backends')"


def _site(directory: Path) -> Path:
    from sglang_backends.testing import write_distribution

    write_distribution(
        directory,
        "bench-backend",
        # "omni" too: a light stand-in for sglang-omni where it is not installed.
        entry_points={
            "bench_backend": "bench_backend_plugin:factory",
            "omni": "bench_backend_plugin:omni",
        },
        modules={"bench_backend_plugin.py": STAND_IN},
    )
    return directory


def omni_is_real(python: Path) -> bool:
    """Whether sglang-omni is installed beside *python* (else ``omni`` is the light stand-in)."""
    import subprocess

    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang_omni') is None)"
    return subprocess.run([str(python), "-c", probe], check=False).returncode == 0


def beside_sglang(python: Path, repeat: int) -> str:
    """``sglang serve`` and ``sglang-backends serve`` side by side: helps and the light plugin.

    The general help is also compared with its floor in that environment
    (a bare interpreter listing the ``sglang.serve_backends`` entry points).
    """
    bindir = python.parent
    upstream = [str(bindir / "sglang"), "serve"]
    ours = [str(bindir / "sglang-backends"), "serve"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        site = _site(root / "site")
        model = root / "bench-model"
        model.mkdir()
        base = {k: v for k, v in os.environ.items() if not k.startswith("OS_SERVE_BACKENDS__")}
        path = [str(site), *(p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p)]
        base.update(PYTHONPATH=os.pathsep.join(path), HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
        base.pop("SGLANG_PLUGINS", None)
        no_general = {**base, "SGLANG_PLUGINS": "none"}
        omni = "omni" if omni_is_real(python) else "omni (light stand-in)"
        commands = {
            "`--help` (general)": (["--help"], base),
            "`--model-type llm --help`": (["--model-type", "llm", "--help"], base),
            f"`--model-type {omni} --help`": (["--model-type", "omni", "--help"], base),
            "`MODEL --model-type bench_backend`, `SGLANG_PLUGINS=none`": (
                [str(model), "--model-type", "bench_backend"],
                no_general,
            ),
            "`MODEL` (auto), `SGLANG_PLUGINS=none`": ([str(model)], no_general),
            "`MODEL --model-type bench_backend`, SGLang's general plugins": (
                [str(model), "--model-type", "bench_backend"],
                base,
            ),
        }
        cases: dict[str, list[str]] = {"floor": [str(python), "-c", FLOOR]}
        case_env: dict[str, dict[str, str]] = {"floor": base}
        for label, (args, env) in commands.items():
            for side, command in (("upstream", upstream), ("ours", ours)):
                cases[f"{side} {label}"] = [*command, *args]
                case_env[f"{side} {label}"] = env
        results = medians(cases, base, repeat, case_env=case_env)
    floor = results["floor"][0]
    rows = [["floor: `entry_points(group=...)` in a bare interpreter", "", ms(floor), "", ""]]
    for label in commands:
        theirs, mine = results[f"upstream {label}"][0], results[f"ours {label}"][0]
        rows.append([label, ms(theirs), ms(mine), f"{mine / theirs:.3f}", f"{mine / floor:.2f}"])
    return table(
        ["serve command", "`sglang serve` ms", "ours ms", "ours / upstream", "ours / floor"],
        rows,
    )


def general_help(repeat: int) -> str:
    """The general ``serve --help`` in this interpreter's environment, against its floor."""
    env = {k: v for k, v in environ().items() if not k.startswith("OS_SERVE_BACKENDS__")}
    cases = {
        "floor: `entry_points(group=...)` in a bare interpreter": [sys.executable, "-c", FLOOR],
        "`sglang-backends serve --help`": [
            str(Path(sys.executable).with_name("sglang-backends")),
            "serve",
            "--help",
        ],
    }
    results = medians(cases, env, repeat)
    floor = results[next(iter(cases))][0]
    rows = [[case, ms(wall), f"{wall / floor:.2f}"] for case, (wall, _) in results.items()]
    return table(["general help, this environment", "process ms", "over the floor"], rows)


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
    report += "\n\n" + general_help(args.repeat)
    if args.sglang_python is not None:
        report += "\n\n" + beside_sglang(args.sglang_python, args.sglang_repeat)
    return report


if __name__ == "__main__":
    print(main())
