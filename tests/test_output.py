"""Output never ends in a traceback: a reader gone, a full disk, a stream that cannot carry a name.

As cliff's commands do: a closed pipe exits 141 silently, a write that
fails otherwise (``/dev/full``) is one line and status 1, and what the
stream's encoding cannot carry (``PYTHONIOENCODING=ascii``, ``LC_ALL=C``)
is escaped.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from clitools import CLI, clean_environ

NAMED = """
from sglang_backends import ServeBackend, ServeBackendDetection

def detect(request):
    return ServeBackendDetection.UNKNOWN

def factory():
    \"\"\"Sert des modèles « naïfs ».\"\"\"
    return ServeBackend(api_version=1, run=lambda request: print("aide: modèle"), detect=detect)
"""


@pytest.fixture
def accented(site):
    site.install(
        "café-runtime",
        version="1.0",
        entry_points={"café": "cafe_plugin:factory"},
        modules={"cafe_plugin.py": NAMED},
    )
    return site


def _run(site, args, *, argv0=True, **streams) -> subprocess.CompletedProcess[bytes]:
    """Run ``sglang-backends ARGS`` (*args* alone without *argv0*) seeing *site*."""
    env = clean_environ(site.environ())
    env.update(streams.pop("env", {}))
    command = [CLI, *args] if argv0 else list(args)
    return subprocess.run(
        command, env=env, stderr=subprocess.PIPE, timeout=120, check=False, **streams
    )


def test_serve_help_into_a_closed_pipe_exits_141_silently(accented):
    read, write = os.pipe()
    os.close(read)  # the reader is gone, as after `| head -1`
    try:
        result = _run(accented, ["serve", "--help"], stdout=write)
    finally:
        os.close(write)
    assert result.returncode == 141, result.stderr
    assert result.stderr == b""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [["serve", "--help"], ["list"], ["show", "café"], ["check"], ["--help"], ["help"]],
)
def test_a_full_disk_is_one_line_saying_so_and_status_1(accented, args):
    with open("/dev/full", "wb") as full:
        result = _run(accented, args, stdout=full)
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].endswith("Cannot write the output: No space left on device")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("verbosity", [[], ["-v"]])
def test_a_log_file_on_a_full_disk_is_one_warning_and_the_command_goes_on(accented, verbosity):
    """logging's own report is a traceback for every record; the log file is left instead."""
    result = _run(
        accented, ["--log-file", "/dev/full", *verbosity, "show", "café"], stdout=subprocess.PIPE
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.decode().splitlines() == [
        "Cannot write the log file /dev/full: No space left on device; logging to stderr only"
    ]
    assert "café-runtime" in result.stdout.decode()


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--help"],
        ["serve", "--model-type", "café", "--help"],
        ["list"],
        ["show", "café"],
        ["check"],
        ["detect", "m"],
    ],
)
def test_every_command_escapes_what_an_ascii_stream_cannot_carry(accented, args):
    env = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}
    result = _run(accented, args, stdout=subprocess.PIPE, env=env)
    assert result.returncode == 0, result.stderr.decode()
    assert b"Traceback" not in result.stderr
    result.stdout.decode("ascii")  # nothing but ASCII reached the stream
    assert b"\\xe" in result.stdout  # caf\xe9, mod\xe8le: escaped, not lost


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["show", "café"],
        ["detect", "m"],
        ["serve", "--help"],
        ["serve", "m", "--model-type", "café"],
    ],
)
def test_a_closed_standard_output_is_the_null_device_not_a_traceback(accented, args):
    """Started with descriptor 1 closed (``>&-``), as Python lets ``print`` write nowhere, the
    command writes nowhere and ends as it would; a backend printing there is no failure."""
    result = _run(accented, ["sh", "-c", 'exec "$@" >&-', "sh", CLI, *args], argv0=False)
    assert result.returncode == 0, result.stderr.decode()
    assert b"Traceback" not in result.stderr and b"Error" not in result.stderr


@pytest.mark.parametrize("where", ["missing/dir/serve.log", "."])
def test_a_log_file_that_cannot_be_opened_is_named_as_the_log_file(accented, tmp_path, where):
    """A usage slip, status 2: cliff's line was the errno alone, ``[Errno 21] Is a directory:
    '.'``, status 1."""
    path = tmp_path / where
    result = _run(accented, ["--log-file", str(path), "list"], stdout=subprocess.PIPE)
    assert result.returncode == 2
    [line] = result.stderr.decode().splitlines()
    assert line.startswith(f"Cannot open the log file {path}: ")
    assert b"Errno" not in result.stderr
