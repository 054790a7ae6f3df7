"""The plugin guide's complete plugin, built from the guide's own text.

Every ``code-block`` of doc/source/user/plugins.rst with a ``:caption:``
naming a file is written to that path in a temporary directory, exactly as
a newcomer copies it. The result is installed with pip, its own kit tests
run in a subprocess, and ``sglang-backends serve`` serves it, by name and by
auto-detection, answering over HTTP until SIGINT. The guide's console
blocks (captioned with where they run) are run verbatim: the section on
testing inside an SGLang installation here, in an environment holding the
stand-in SGLang; the fresh virtual environment's by ``tox -e package``
(.ci/check_package.py). If the guide goes stale, this fails.
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
from collections.abc import Callable
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


def write_project(project: Path) -> Path:
    """Write the guide's files into *project*, as a reader copies them."""
    for relative, text in guide_files().items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return project


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The guide's plugin, written out and installed into a private site; (project, env)."""
    root = tmp_path_factory.mktemp("guide")
    project = write_project(root / "my-runtime")
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


_CONSOLE = re.compile(
    r"^\.\. code-block:: console\n(?:   :caption: (?P<caption>.+)\n)?\n(?P<lines>(?:   \$ .*\n)+)",
    re.MULTILINE,
)


def console_blocks() -> list[tuple[str | None, list[str]]]:
    """The guide's console blocks in order: (caption, the shell commands)."""
    return [
        (match["caption"], [line.strip()[2:] for line in match["lines"].splitlines()])
        for match in _CONSOLE.finditer(GUIDE.read_text(encoding="utf-8"))
    ]


def guide_commands(caption: str) -> list[str]:
    """The commands of the guide's console block captioned *caption*."""
    [commands] = [commands for shown, commands in console_blocks() if shown == caption]
    return commands


CHECKOUT = "In the sglang-backends checkout"
SGLANG_ENV = "In my-runtime, with SGLang's environment active"


def test_the_guide_installs_sglang_backends_before_the_plugin():
    """sglang-backends is on no index: pip install -e ".[test]" alone cannot resolve it."""
    assert guide_commands(CHECKOUT) == ['export SGLANG_BACKENDS="$PWD"']
    assert guide_commands("In my-runtime")[:4] == [
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        'pip install "$SGLANG_BACKENDS[testing]"',
        'pip install -e ".[test]"',
    ]


def test_every_variable_is_set_in_a_block_before_it_is_used():
    """A reader running the blocks in order never meets a variable nothing has set."""
    given = {"PWD", "PYTHONPATH"}  # the shell's; PYTHONPATH is only extended
    blocks = console_blocks()
    assert [caption for caption, _ in blocks if caption] == [
        CHECKOUT,
        "In the sglang-backends checkout, for a wheel",
        "In my-runtime",
        SGLANG_ENV,
    ]
    unset = []
    for caption, commands in blocks:
        for command in commands:
            used = set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", command)) - given
            unset += [f"{caption}: {command}: ${name}" for name in sorted(used)]
            given |= set(re.findall(r"^(?:export )?([A-Z_][A-Z0-9_]*)=", command))
    assert unset == []


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


def _get(
    url: str, deadline: float, proc: subprocess.Popen[bytes] | None = None
) -> dict[str, object]:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return dict(json.load(response))
        except OSError:
            if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
                raise
            time.sleep(0.1)


def _serve_until_ctrl_c(
    command: list[str],
    port: int,
    log: Path,
    *,
    env: dict[str, str],
    wait: float,
    cwd: Path | None = None,
    also: Callable[[str, float], None] | None = None,
) -> tuple[int, str]:
    """Start *command*, wait for its /health on *port*, Ctrl+C it: (exit status, output)."""
    with log.open("w+") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + wait
            url = f"http://127.0.0.1:{port}"
            assert _get(f"{url}/health", deadline, proc) == {"status": "ok"}
            if also is not None:
                also(url, deadline)
            proc.send_signal(signal.SIGINT)  # Ctrl+C
            status = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        out.seek(0)
        return status, out.read()


@pytest.mark.parametrize("by", ["name", "detection"])
def test_serve_serves_it_until_ctrl_c(installed, tmp_path, by):
    _, env = installed
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "my-format.json").write_text("{}")
    port = _free_port()
    chosen = ["--model-type", "my_runtime"] if by == "name" else []

    def models_listed(url: str, deadline: float) -> None:
        models = _get(f"{url}/v1/models", deadline)
        assert models["data"] == [{"id": str(model), "card": {}}]

    status, output = _serve_until_ctrl_c(
        [CLI, "serve", str(model), *chosen, "--port", str(port)],
        port,
        tmp_path / "err",
        env=env,
        wait=60,
        also=models_listed,
    )
    assert status == 130, output  # KeyboardInterrupt out of run(): serve's stop by SIGINT
    assert "Traceback" not in output
    assert "'my_runtime' (from my-runtime)" in output


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


def test_the_sglang_section_runs_verbatim(tmp_path):
    """Overlay, kit tests and serve inside an environment that has (the stand-in) SGLang.

    The environment holds the stand-in ``sglang`` and sees the base
    interpreter's packages (pip among them), not sglang-backends' dependencies
    nor pytest, which the overlay must bring; the guide's commands
    run in one shell, in order, as a reader runs them, after the checkout's
    block sets ``SGLANG_BACKENDS``. The last command serves until Ctrl+C; it is
    run on a free port rather than 30000, which a parallel run may hold.
    """
    from sglang_standin import install_sglang

    from sglang_backends.testing import PluginSite

    sglang_env = tmp_path / "sglang-env"
    # pip from the base interpreter's site-packages: seeding the environment with
    # its own copy (ensurepip) takes tens of seconds on a busy machine.
    command = [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages"]
    subprocess.run([*command, sglang_env], check=True, timeout=240)
    python = sglang_env / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    install_sglang(PluginSite(purelib))
    project = write_project(tmp_path / "my-runtime")
    *setup, serve = guide_commands(SGLANG_ENV)
    env = {
        key: value
        for key, value in clean_environ(os.environ).items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "SGLANG_PLUGINS")
        and not key.startswith(("PIP_", "PYTEST_"))
    }
    script = "\n".join(
        [
            f". {sglang_env}/bin/activate",
            f"cd {Path(__file__).resolve().parents[1]}",
            *guide_commands(CHECKOUT),
            f"cd {project}",
            *setup,
            f"exec {serve.replace('--port 30000', f'--port {_free_port()}')}",
        ]
    )
    port = int(re.findall(r"--port (\d+)", script)[-1])
    status, output = _serve_until_ctrl_c(
        ["bash", "-euc", script],
        port,
        tmp_path / "out",
        env=env,
        cwd=tmp_path,
        wait=600,  # the installs download from the index
    )
    assert status == 130, output
    # The kit saw SGLang: its acceptance and the stop under sglang serve were checked.
    assert "3 passed" in output, output
    assert "SGLangNotCheckedWarning" not in output, output
    assert "Traceback" not in output, output
    assert (project / "overlay" / "sglang_backends" / "__init__.py").is_file()
    assert "'my_runtime' (from my-runtime)" in output


def test_the_guide_gives_every_kit_timeout_with_its_default():
    """Each timeout parameter of the kit's functions, with its default, as the guide shows it."""
    import inspect

    from sglang_backends import testing

    text = GUIDE.read_text(encoding="utf-8")
    documented = []
    for name in testing.__all__:
        function = getattr(testing, name)
        if not inspect.isfunction(function):
            continue
        bounds = [p for p in inspect.signature(function).parameters.values() if "timeout" in p.name]
        if bounds:
            shown = ", ".join(f"{p.name}={p.default!r}" for p in bounds)
            assert f"``{name}(..., {shown})``" in text
            documented.append(name)
    assert {"assert_backend_contract", "assert_stops_cleanly"} <= set(documented)
