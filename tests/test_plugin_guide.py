"""The plugin guide's complete plugin, built from the guide's own text.

Every ``code-block`` of doc/source/user/plugins.rst with a ``:caption:``
naming a file is written to that path in a temporary directory, exactly as
a newcomer copies it. The result is installed with pip, its own kit tests
run in a subprocess, and ``sglang-backends serve`` serves it, by name and by
auto-detection, answering over HTTP until SIGINT. If the guide goes stale,
this fails.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from clitools import CLI, clean_environ

GUIDE = Path(__file__).resolve().parents[1] / "doc" / "source" / "user" / "plugins.rst"
_BLOCK = re.compile(
    r"^\.\. code-block:: \w+\n   :caption: (?P<path>\S+)\n\n(?P<body>(?:   .*\n|\n)+)",
    re.MULTILINE,
)


def guide_files() -> dict[str, str]:
    """The files the guide gives, by relative path, dedented as a reader copies them."""
    files = {}
    for match in _BLOCK.finditer(GUIDE.read_text(encoding="utf-8")):
        lines = [line[3:] for line in match.group("body").splitlines()]
        files[match.group("path")] = "\n".join(lines).strip("\n") + "\n"
    return files


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The guide's plugin, written out and installed into a private site; (project, env)."""
    root = tmp_path_factory.mktemp("guide")
    project = root / "my-runtime"
    for relative, text in guide_files().items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    site = root / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert pip.returncode == 0, pip.stderr
    env = clean_environ({**os.environ, "PYTHONPATH": str(site)})
    env.pop("SGLANG_PLUGINS", None)
    return project, env


def test_the_guide_gives_a_whole_project():
    assert set(guide_files()) == {
        "pyproject.toml",
        "my_runtime/__init__.py",
        "my_runtime/plugin.py",
        "tests/test_my_runtime.py",
    }


def guide_commands() -> list[str]:
    """The shell commands of the guide's console block that sets the plugin up, in order."""
    text = GUIDE.read_text(encoding="utf-8")
    block = re.search(r"^\.\. code-block:: console\n\n((?:   \$ .*\n)+)", text, re.MULTILINE)
    assert block is not None
    return [line.strip()[2:] for line in block.group(1).splitlines()]


def test_the_guide_installs_sglang_backends_before_the_plugin():
    """sglang-backends is on no index: pip install -e ".[test]" alone cannot resolve it."""
    commands = guide_commands()
    assert commands[:4] == [
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        'pip install "$SGLANG_BACKENDS[testing]"',
        'pip install -e ".[test]"',
    ]


def _kit_tests(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_its_kit_tests_pass_and_say_what_they_could_not_check(installed):
    project, env = installed
    result = _kit_tests(project, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
    # Without SGLang: its acceptance and stopping under sglang serve, each said to be unchecked.
    assert result.stdout.count("SGLangNotCheckedWarning") == 2, result.stdout


def test_its_kit_tests_pass_under_sglang_too(installed, tmp_path):
    """With SGLang (the stand-in) installed: accepted by its registry, stopped cleanly under it."""
    from sglang_standin import install_sglang

    from sglang_backends.testing import PluginSite

    project, env = installed
    sglang = PluginSite(tmp_path / "sglang-site")
    install_sglang(sglang)
    result = _kit_tests(project, sglang.environ(env))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
    assert "SGLangNotCheckedWarning" not in result.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str, deadline: float) -> dict[str, object]:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return dict(json.load(response))
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.parametrize("by", ["name", "detection"])
def test_serve_serves_it_until_ctrl_c(installed, tmp_path, by):
    _, env = installed
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "my-format.json").write_text("{}")
    port = _free_port()
    chosen = ["--model-type", "my_runtime"] if by == "name" else []
    with (tmp_path / "err").open("w+") as err:
        proc = subprocess.Popen(
            [CLI, "serve", str(model), *chosen, "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            deadline = time.monotonic() + 60
            assert _get(f"http://127.0.0.1:{port}/health", deadline) == {"status": "ok"}
            models = _get(f"http://127.0.0.1:{port}/v1/models", deadline)
            assert models["data"] == [{"id": str(model), "card": {}}]
            proc.send_signal(signal.SIGINT)  # Ctrl+C
            status = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        err.seek(0)
        stderr = err.read()
    assert status == 130, stderr  # KeyboardInterrupt out of run(): serve's stop by SIGINT
    assert "Traceback" not in stderr
    assert "'my_runtime' (from my-runtime)" in stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_template_stops_cleanly_under_both_hosts(installed, tmp_path, signum):
    """Ctrl+C or SIGTERM: 130 or 143 under sglang-backends serve and the stand-in sglang serve."""
    from sglang_standin import install_sglang

    from sglang_backends.testing import PluginSite, assert_stops_cleanly

    _, env = installed
    sglang = PluginSite(tmp_path / "sglang-site")
    install_sglang(sglang)
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "my-format.json").write_text("{}")
    hosts = ("sglang-backends serve", "sglang serve")
    statuses = assert_stops_cleanly(
        "my_runtime",
        ["--model-path", str(model), "--port", "0"],
        ready="serving on",
        env=sglang.environ(env),
        hosts=hosts,
        signum=signum,
        stop_timeout=5.0,  # serve's default stop timeout
    )
    assert statuses == dict.fromkeys(hosts, 128 + signum)
