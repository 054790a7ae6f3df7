"""Configuration that fights back: pipes, unreadable files and directories, huge timeouts."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading

import pytest
from clitools import CLI, clean_environ, run_cli
from servetools import RECORDER, read_json, run_serve


@pytest.fixture
def recorder(site, tmp_path):
    """The recording plugin installed; returns (environ, record file)."""
    site.install(
        "recorder-dist",
        entry_points={"recorder": "recorder_plugin:recorder"},
        modules={"recorder_plugin.py": RECORDER},
    )
    record = tmp_path / "record.json"
    env = site.environ()
    env["SERVE_RECORD"] = str(record)
    return env, record


def feed(path, text: str) -> threading.Thread:
    """Write *text* into the FIFO at *path* once, when a reader opens it."""

    def write() -> None:
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_fifo_given_as_the_configuration_file_is_read_once(recorder, tmp_path):
    env, record = recorder
    fifo = tmp_path / "serve.conf"
    os.mkfifo(fifo)
    # An unknown option too: a pipe is read once, by oslo.config (so it is not checked for
    # misspelt names); reading it again would wait for a second writer that never comes.
    writer = feed(fifo, "[serve_backends]\nmodel_type = recorder\nmodel_typo = x\n")
    result = run_serve(["--config-file", str(fifo), "m"], env, timeout=30)
    writer.join(5)
    assert result.returncode == 0, result.stderr
    assert "Using serve backend 'recorder'" in result.stderr
    assert read_json(record)["model_path"] == "m"


def test_an_invalid_value_in_a_pipe_names_it(recorder, tmp_path):
    env, record = recorder
    fifo = tmp_path / "serve.conf"
    os.mkfifo(fifo)
    writer = feed(fifo, "[serve_backends]\ndetect_timeout = soon\n")
    result = run_serve(["--config-file", str(fifo), "m"], env, timeout=30)
    writer.join(5)
    assert result.returncode == 2, result.stderr
    [line] = result.error_lines
    assert f"Invalid value for option [serve_backends] detect_timeout in {fifo}" in line
    assert "must be a number of seconds from 0.001 to 1e+09" in line
    assert not record.exists()


def test_an_invalid_value_in_a_pipe_after_a_file_names_the_pipe_not_the_file(recorder, tmp_path):
    """oslo.config reads sources in command-line order: the later pipe set the value."""
    env, record = recorder
    valid = tmp_path / "valid.conf"
    valid.write_text("[serve_backends]\ndetect_timeout = 3\n", encoding="utf-8")
    fifo = tmp_path / "late.conf"
    os.mkfifo(fifo)
    writer = feed(fifo, "[serve_backends]\ndetect_timeout = soon\n")
    args = ["--config-file", str(valid), "--config-file", str(fifo), "m"]
    result = run_serve(args, env, timeout=30)
    writer.join(5)
    assert result.returncode == 2, result.stderr
    [line] = result.error_lines
    assert f"Invalid value for option [serve_backends] detect_timeout in {fifo}: " in line
    assert str(valid) not in line
    assert not record.exists()


def test_a_pipe_that_is_not_utf8_is_named(recorder, tmp_path):
    env, record = recorder
    fifo = tmp_path / "serve.conf"
    os.mkfifo(fifo)

    def write() -> None:
        fifo.write_bytes(b"[serve_backends]\nmodel_type = \xff\n")

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result = run_serve(["--config-file", str(fifo), "m"], env, timeout=30)
    writer.join(5)
    assert result.returncode == 2, result.stderr
    [line] = result.error_lines
    assert f"Cannot read configuration file {fifo}: it is not utf-8 text" in line
    assert not record.exists()


def test_a_fifo_in_a_configuration_directory_is_an_error_not_a_wait(recorder, tmp_path):
    env, record = recorder
    directory = tmp_path / "conf.d"
    directory.mkdir()
    os.mkfifo(directory / "deny.conf")  # no writer will ever come
    result = run_serve(["--config-dir", str(directory), "m", "--model-type", "recorder"], env)
    assert result.returncode == 2, result.stderr
    [line] = result.error_lines
    assert f"{directory / 'deny.conf'} is not a regular file" in line
    assert not record.exists()


def test_a_device_given_as_the_configuration_file_is_refused(recorder):
    env, record = recorder
    result = run_serve(["--config-file", "/dev/zero", "m", "--model-type", "recorder"], env)
    assert result.returncode == 2, result.stderr
    [line] = result.error_lines
    assert "Configuration file /dev/zero is not a regular file" in line
    assert not record.exists()


@functools.cache
def _unprivileged() -> tuple[str, ...]:
    """A command prefix under which file permissions apply, or skip.

    As root, ``setpriv`` drops the capabilities that bypass file permissions
    (so a ``chmod 000`` holds) while the interpreter, which may live in a
    directory only root reads, stays reachable.
    """
    if os.geteuid() != 0:
        return ()
    prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    try:
        probe = subprocess.run(
            [*prefix, sys.executable, "-c", "import sglang_backends"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        probe = None
    if probe is None or probe.returncode != 0:
        pytest.skip("cannot run without the capability to bypass file permissions")
    return prefix


def run_unprivileged(env, *args: str) -> subprocess.CompletedProcess[str]:
    return run_in(None, env, *args, prefix=_unprivileged())


def run_in(cwd, env, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run ``sglang-backends ARGS`` in directory *cwd* (``None``: this one), after *prefix*."""
    return subprocess.run(
        [*prefix, CLI, *args],
        env=clean_environ(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("what", ["directory", "file in directory", "file"])
def test_an_unreadable_deny_list_stops_serve_and_names_it(recorder, tmp_path, what):
    env, record = recorder
    directory = tmp_path / "conf.d"
    directory.mkdir()
    deny = directory / "deny.conf"
    deny.write_text("[serve_backends]\ndisabled_backends = recorder\n")
    locked = {"directory": directory, "file in directory": deny, "file": deny}[what]
    option = ["--config-file", str(deny)] if what == "file" else ["--config-dir", str(directory)]
    locked.chmod(0)
    try:
        result = run_unprivileged(env, "serve", *option, "m", "--model-type", "recorder")
    finally:
        locked.chmod(0o755)
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "error" in line]
    assert f"{locked} is not readable: Permission denied" in line
    assert "Traceback" not in result.stderr
    assert not record.exists()  # the plugin the unread list disables never ran


def test_an_unreadable_configuration_directory_stops_the_commands_too(recorder, tmp_path):
    env, _ = recorder
    directory = tmp_path / "conf.d"
    directory.mkdir()
    directory.chmod(0)
    try:
        result = run_unprivileged(env, "list", "--config-dir", str(directory))
    finally:
        directory.chmod(0o755)
    assert result.returncode == 2, result.stderr
    assert f"Configuration directory {directory} is not readable" in result.stderr
    assert "recorder" not in result.stdout


@pytest.mark.parametrize(
    "option", ["detect_timeout = 1e10", "load_timeout = 1e300", "stop_timeout = 9223372037"]
)
def test_a_timeout_past_what_the_platform_waits_is_refused_in_one_line(recorder, tmp_path, option):
    env, record = recorder
    path = tmp_path / "serve.conf"
    path.write_text(f"[serve_backends]\n{option}\n")
    result = run_serve(["--config-file", str(path), "m"], env)
    assert result.returncode == 2, result.stderr
    [line] = result.error_lines
    name, _, value = option.partition(" = ")
    assert f"Invalid value '{value}' for option [serve_backends] {name} in {path}" in line
    assert "must be a number of seconds from 0" in line and "to 1e+09" in line
    assert "Traceback" not in result.stderr and not record.exists()


def test_detect_refuses_a_timeout_past_the_bound(site):
    result = run_cli(site, "detect", "--detect-timeout", "1e10", "m", timeout=60)
    assert result.returncode == 2, result.stderr
    assert "from 0.001 to 1e+09" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--config-dir", "--config-file"])
@pytest.mark.parametrize(
    "args",
    [
        ["serve", "FLAG", "", "m", "--model-type", "recorder"],
        ["list", "FLAG", ""],
        ["FLAG", "", "list"],
        ["detect", "FLAG", "", "m"],
    ],
    ids=["serve", "list", "global", "detect"],
)
def test_an_empty_path_is_refused_never_the_working_directory(recorder, tmp_path, flag, args):
    """``--config-dir "$UNSET"`` is a slip every command refuses, as serve does: the working
    directory's own ``*.conf`` files are not read in its stead."""
    env, record = recorder
    work = tmp_path / "work"
    work.mkdir()
    (work / "stray.conf").write_text("[serve_backends]\nmodel_type = nowhere\n")
    result = run_in(work, env, *(flag if arg == "FLAG" else arg for arg in args))
    assert result.returncode == 2, result.stderr
    assert f"{flag} expects a value" in result.stderr or f"argument {flag}: expects a value" in (
        result.stderr
    )
    assert "nowhere" not in result.stderr and "Traceback" not in result.stderr
    assert not record.exists() and result.stdout == ""


@pytest.mark.parametrize("command", ["serve", "list"])
def test_a_substitution_referring_back_to_its_option_is_one_line_each(recorder, tmp_path, command):
    env, record = recorder
    path = tmp_path / "loop.conf"
    path.write_text(
        "[serve_backends]\nmodel_type = $model_type\n"
        "enabled_backends = $disabled_backends\ndisabled_backends = $enabled_backends\n"
    )
    args = ["m", "--model-type", "recorder"] if command == "serve" else []
    result = run_in(tmp_path, env, command, "--config-file", str(path), *args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "recursion" not in result.stderr
    lines = result.stderr.splitlines()
    for option, value in [
        ("model_type", "$model_type"),
        ("enabled_backends", "$disabled_backends"),
        ("disabled_backends", "$enabled_backends"),
    ]:
        [line] = [line for line in lines if f"[serve_backends] {option} in" in line]
        assert f"Invalid value '{value}' for option [serve_backends] {option} in {path}" in line
        assert line.endswith("its $ substitutions refer back to it; write $$ for a literal $")
    assert not record.exists()
