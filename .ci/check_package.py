#!/usr/bin/env python3
"""Build the release files and check that the wheel alone works, away from the checkout.

``python .ci/check_package.py WORKDIR`` (tox -e package runs it):

1. ``python -m build`` makes the sdist, then the wheel from the sdist (so a
   file missing from the sdist fails the build);
2. ``twine check --strict`` checks both as the package index would;
3. a fresh virtual environment in WORKDIR gets the wheel with its
   ``[testing]`` extra, nothing from the checkout;
4. from a directory outside the checkout, the console script lists, shows
   and checks backends, serves a plugin, and pytest runs a plugin author's
   kit test (the ``serve_backends`` fixture and ``assert_backend_contract``)
   against a plugin installed as a real distribution;
5. the plugin guide's complete plugin is written out as the guide gives it,
   and the guide's own commands are run verbatim, in one shell: its wheel
   block in the sdist's source tree (building the wheel ``SGLANG_BACKENDS``
   names), then, in the plugin, a fresh virtual environment, the installs,
   the plugin's kit tests, and ``serve``, answering ``/health`` until Ctrl+C.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KIT_TEST = '''
"""A plugin author's test: the kit installs the plugin, checks it, and serve serves it."""

import subprocess
import sys

from sglang_backends.testing import assert_backend_contract

PLUGIN = """
from sglang_backends import ServeBackend, ServeBackendDetection

def detect(request):
    if (request.model_path or "").endswith("packaged-model"):
        return ServeBackendDetection.MATCH
    return ServeBackendDetection.UNKNOWN

def run(request):
    print("packaged backend ran with", list(request.argv))

def factory():
    \\"\\"\\"A backend installed from a test.\\"\\"\\"
    return ServeBackend(api_version=1, run=run, detect=detect)
"""


def test_the_kit_installs_a_plugin_and_checks_its_contract(serve_backends):
    serve_backends.install(
        "packaged-runtime",
        entry_points={"packaged": "packaged_plugin:factory"},
        modules={"packaged_plugin.py": PLUGIN},
    )
    registry = serve_backends.registry()
    assert "packaged" in registry.available_names
    assert_backend_contract("packaged", registry=registry)
    served = subprocess.run(
        [sys.executable, "-m", "sglang_backends", "serve", "models/packaged-model", "--x", "1"],
        env=serve_backends.environ(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode == 0, served.stderr
    assert "packaged backend ran with ['--model-path', 'models/packaged-model', '--x', '1']" in (
        served.stdout
    )
'''


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run *command*, echoing it; fail with its output if it fails."""
    print("+", " ".join(map(str, command)), flush=True)
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        sys.exit(f"failed with status {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def main(workdir: Path) -> None:
    if workdir.exists():
        shutil.rmtree(workdir)
    dist, venv, away = workdir / "dist", workdir / "venv", workdir / "elsewhere"
    away.mkdir(parents=True)
    run(sys.executable, "-m", "build", "--outdir", dist, ROOT, cwd=ROOT)
    [sdist] = dist.glob("sglang_backends-*.tar.gz")
    [wheel] = dist.glob("sglang_backends-*-py3-none-any.whl")
    run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel, cwd=ROOT)

    run(sys.executable, "-m", "venv", venv, cwd=away)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", f"{wheel}[testing]", cwd=away)
    # Nothing of the checkout: no PYTHONPATH, no configuration, a directory of its own.
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "PYTHONPATH" and not key.startswith("OS_SERVE_BACKENDS__")
    }
    location = run(
        python, "-c", "import sglang_backends; print(sglang_backends.__file__)", cwd=away, env=env
    )
    if not location.startswith(str(venv)):
        sys.exit(f"sglang_backends was imported from {location.strip()}, not the wheel")
    cli = venv / "bin" / "sglang-backends"
    print(run(cli, "--version", cwd=away, env=env), end="")
    listed = run(cli, "list", "-f", "value", "-c", "Name", cwd=away, env=env).split()
    if listed[:2] != ["llm", "diffusion"]:
        sys.exit(f"list shows {listed}, expected the built-ins first")
    run(cli, "show", "diffusion", cwd=away, env=env)
    run(cli, "check", cwd=away, env=env)
    run(cli, "serve", "--help", cwd=away, env=env)

    (away / "test_packaged_kit.py").write_text(textwrap.dedent(KIT_TEST), encoding="utf-8")
    print(run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=away, env=env), end="")
    follow_the_guide(workdir / "guide" / "my-runtime", sdist, env)
    print(f"ok: {sdist.name} and {wheel.name} build, pass twine check, and the wheel works alone")


GUIDE = ROOT / "doc" / "source" / "user" / "plugins.rst"
_FILE = re.compile(
    r"^\.\. code-block:: \w+\n   :caption: (?P<path>\S+)\n\n(?P<body>(?:   .*\n|\n)+)",
    re.MULTILINE,
)
_COMMANDS = re.compile(
    r"^\.\. code-block:: console\n   :caption: (?P<caption>.+)\n\n(?P<lines>(?:   \$ .*\n)+)",
    re.MULTILINE,
)


def guide_commands(text: str, caption: str) -> list[str]:
    """The commands of the guide's console block captioned *caption*."""
    for block in _COMMANDS.finditer(text):
        if block.group("caption") == caption:
            return [line.strip()[2:] for line in block.group("lines").splitlines()]
    sys.exit(f"the plugin guide has no console block captioned {caption!r}")


def follow_the_guide(project: Path, sdist: Path, env: dict[str, str]) -> None:
    """Write the guide's plugin and run the guide's commands on it, exactly as given."""
    text = GUIDE.read_text(encoding="utf-8")
    for match in _FILE.finditer(text):
        path = project / match.group("path")
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "\n".join(line[3:] for line in match.group("body").splitlines())
        path.write_text(body.strip("\n") + "\n", encoding="utf-8")
    source = project.parent
    run("tar", "-xzf", sdist, "-C", source, cwd=source)
    [tree] = source.glob("sglang_backends-*/")
    *setup, serve = guide_commands(text, "In my-runtime")
    script = [
        f"cd {tree}",
        *guide_commands(text, "In the sglang-backends checkout, for a wheel"),
        f"cd {project}",
        *setup,
    ]
    env = dict(env)
    env.pop("VIRTUAL_ENV", None)
    started = time.monotonic()
    print(run("bash", "-euc", "\n".join(script), cwd=project, env=env), end="")
    # The last command serves until Ctrl+C: in the guide's environment, then stopped.
    print("+", serve, flush=True)
    proc = subprocess.Popen(
        ["bash", "-euc", f". .venv/bin/activate\nexec {serve}"], cwd=project, env=env
    )
    try:
        port = re.search(r"--port (\d+)", serve)
        url = f"http://127.0.0.1:{port.group(1) if port else 30000}/health"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    answer = json.load(response)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit(f"{serve!r} did not answer {url}")
                time.sleep(0.2)
        if answer != {"status": "ok"}:
            sys.exit(f"{url} answered {answer}")
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if status != 130:
        sys.exit(f"{serve!r} ended with status {status} on Ctrl+C, expected 130")
    print(f"ok: the plugin guide, followed verbatim, took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} WORKDIR")
    main(Path(sys.argv[1]).resolve())
