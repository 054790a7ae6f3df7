"""One plugin source stops cleanly under both hosts, and the kit checks that it does.

``sglang serve`` runs ``run()`` in its one process with Python's own signal
handling (the stand-in SGLang of tests/sglang_standin.py does as upstream's
serve.py): a ``KeyboardInterrupt`` leaving ``run()`` is a traceback and
exit status 1 there. Served within :func:`sglang_backends.stop_quietly`, a
backend ends on Ctrl+C or SIGTERM with 130 or 143 under both hosts.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import time

import psutil
import pytest
from clitools import clean_environ
from sglang_standin import install_sglang

from sglang_backends import ConfigurationError
from sglang_backends.testing import (
    ContractViolation,
    SGLangNotCheckedWarning,
    assert_stops_cleanly,
    installed_hosts,
)

BOTH = ("sglang-backends serve", "sglang serve")

SERVER = """
import http.server
from sglang_backends import portable_backend, stop_quietly

def serve(port_file):
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    print("serving on", server.server_port, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()

def run(request):
    serve(request.argv)

def run_quietly(request):
    with stop_quietly():
        serve(request.argv)

def plain():
    return portable_backend(api_version=1, run=run, requires_model_path=False)

def quiet():
    return portable_backend(api_version=1, run=run_quietly, requires_model_path=False)
"""


@pytest.fixture
def hosts_env(site):
    """A site holding the stand-in SGLang and two plugins: ``plain`` and ``quiet``."""
    install_sglang(site)
    site.install(
        "stop-runtime",
        entry_points={"plain": "stop_plugin:plain", "quiet": "stop_plugin:quiet"},
        modules={"stop_plugin.py": SERVER},
    )
    return clean_environ(site.environ())


def test_the_installed_hosts_are_found_without_importing_sglang(hosts_env):
    assert installed_hosts() == BOTH
    assert "sglang" not in sys.modules


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_a_backend_serving_within_stop_quietly_stops_cleanly_under_both_hosts(hosts_env, signum):
    statuses = assert_stops_cleanly(
        "quiet", [], ready="serving on", env=hosts_env, hosts=BOTH, signum=signum
    )
    assert statuses == dict.fromkeys(BOTH, 128 + signum)


def test_the_kit_catches_a_keyboard_interrupt_traceback_under_sglang(hosts_env):
    assert assert_stops_cleanly("plain", [], ready="serving on", env=hosts_env, hosts=BOTH[:1])
    with pytest.raises(ContractViolation, match="under sglang serve printed a traceback"):
        assert_stops_cleanly("plain", [], ready="serving on", env=hosts_env, hosts=BOTH[1:])


LEAKY = """
import os, subprocess, time
from sglang_backends import portable_backend

def run(request):
    child = subprocess.Popen(["sleep", "313"], start_new_session=True)
    with open(os.environ["LEAKY_PID"], "w") as stream:
        stream.write(str(child.pid))
    print("starting...", flush=True)
    time.sleep(100)

def factory():
    return portable_backend(api_version=1, run=run, requires_model_path=False)
"""


@pytest.mark.parametrize("host", BOTH)
def test_a_start_that_fails_leaves_nothing_running(site, hosts_env, tmp_path, host):
    """A ``ready`` text never printed is the commonest failure: what the backend started
    goes with it, in a session of its own too, and its output pipe is closed."""
    site.install(
        "leaky-runtime",
        entry_points={"leaky": "leaky_plugin:factory"},
        modules={"leaky_plugin.py": LEAKY},
    )
    record = tmp_path / "pid"
    env = {**hosts_env, "LEAKY_PID": str(record)}
    with pytest.raises(ContractViolation, match="did not print 'NEVER'"):
        assert_stops_cleanly("leaky", [], ready="NEVER", start_timeout=2, env=env, hosts=[host])
    child = int(record.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_the_kit_warns_when_sglang_is_not_there_to_stop_under(site):
    site.install(
        "stop-runtime",
        entry_points={"quiet": "stop_plugin:quiet"},
        modules={"stop_plugin.py": SERVER},
    )
    env = clean_environ(site.environ())
    with pytest.warns(SGLangNotCheckedWarning, match="'sglang serve' was not checked"):
        statuses = assert_stops_cleanly("quiet", [], ready="serving on", env=env)
    assert list(statuses) == ["sglang-backends serve"]


def test_beside_a_fork_only_this_packages_host_is_checked_and_the_fork_is_named(site):
    from sglang_standin import FORK, install_fork

    install_fork(site)
    site.install(
        "stop-runtime",
        entry_points={"quiet": "stop_plugin:quiet"},
        modules={"stop_plugin.py": SERVER},
    )
    assert installed_hosts() == BOTH[:1]
    env = clean_environ(site.environ())
    with pytest.warns(SGLangNotCheckedWarning, match=f"'sglang' package \\(from {FORK} 0.7.2\\)"):
        statuses = assert_stops_cleanly("quiet", [], ready="serving on", env=env)
    assert list(statuses) == ["sglang-backends serve"]
    assert "sglang" not in sys.modules


# -- the echo example ------------------------------------------------------------

echo = pytest.importorskip("sglang_echo_backend")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_echo_example_stops_cleanly_under_both_hosts(hosts_env, tmp_path, signum):
    (tmp_path / "echo").write_text("")
    argv = ["--model-path", str(tmp_path), "--port", "0", "--workers", "2"]
    statuses = assert_stops_cleanly(
        "echo", argv, ready="echo: ready", env=hosts_env, hosts=BOTH, signum=signum
    )
    assert statuses == dict.fromkeys(BOTH, 128 + signum)


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        (["-m", "sglang_backends", "serve"], "usage: sglang-backends serve --model-type echo "),
        (
            ["-c", "import sys; from sglang.cli.serve import serve; serve(None, sys.argv[1:])"],
            "usage: sglang serve --model-type echo ",
        ),
    ],
)
def test_the_echo_usage_line_names_the_host_it_runs_under(hosts_env, command, usage):
    result = subprocess.run(
        [sys.executable, *command, "--model-type", "echo", "--help"],
        env=hosts_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(usage), result.stdout


def test_the_echo_example_logs_a_reset_connection_in_one_line(hosts_env, tmp_path):
    (tmp_path / "echo").write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_backends", "serve", str(tmp_path), "--port", "0"],
        env=hosts_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if " on http://" in line:
                port = int(line.rsplit(":", 1)[1].split()[0])
        assert port is not None
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
            time.sleep(0.3)
            # SO_LINGER 0: close with a reset, as a client killed mid-request does.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in rest
    assert len([line for line in rest.splitlines() if "connection" in line.lower()]) <= 1, rest
    assert proc.returncode == 130


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        (
            ["sglang-backends-serve"],
            "Unknown host 'sglang-backends-serve'; did you mean 'sglang-backends serve'? "
            "Known hosts: sglang-backends serve, sglang serve.",
        ),
        (
            "sglang serve",
            "hosts must be a collection of host names, not a string",
        ),
    ],
)
def test_a_host_the_kit_does_not_know_is_refused_naming_the_known_ones(hosts, expected):
    """Before anything is started: not a bare KeyError, nor one host per letter."""
    with pytest.raises(ConfigurationError) as raised:
        assert_stops_cleanly("plain", [], hosts=hosts)
    assert str(raised.value) == expected


def test_arguments_given_as_one_string_are_refused_not_split_into_letters():
    with pytest.raises(ConfigurationError) as raised:
        assert_stops_cleanly("plain", "--port 0", hosts=["sglang-backends serve"])
    assert str(raised.value) == "argv must be a sequence of arguments, not a string"


ESCAPING = """
import subprocess, sys, time
from sglang_backends import portable_backend, stop_quietly

def run(request):
    # A double fork: its grandchild is nobody's child once the middle one has gone.
    subprocess.run(
        [sys.executable, "-c", "import subprocess; subprocess.Popen(['sleep', '3334'], "
         "start_new_session=True)"], check=True)
    print("serving", flush=True)
    with stop_quietly():
        time.sleep(100)

def returning(request):
    print("serving", flush=True)
    # Served for a moment: a signal sent at once would still find it running.
    time.sleep(0.2)

def warned(request):
    import logging
    try:
        import no_such_accelerator
    except ImportError:
        logging.getLogger("rt").warning("accelerator missing", exc_info=True)
    print("serving", flush=True)
    with stop_quietly():
        time.sleep(100)

def unended(request):
    print("loading 50%\\rready now", end="", flush=True)
    with stop_quietly():
        time.sleep(100)

def partial():
    return portable_backend(api_version=1, run=unended, requires_model_path=False)

def escaping():
    return portable_backend(api_version=1, run=run, requires_model_path=False)

def done():
    return portable_backend(api_version=1, run=returning, requires_model_path=False)

def noisy():
    return portable_backend(api_version=1, run=warned, requires_model_path=False)
"""


@pytest.fixture
def odd_env(site, hosts_env):
    site.install(
        "odd-runtime",
        entry_points={n: f"odd_plugin:{n}" for n in ("escaping", "done", "noisy", "partial")},
        modules={"odd_plugin.py": ESCAPING},
    )
    return clean_environ(site.environ())


def _sleepers() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "3334"]]


def test_a_double_forked_process_left_running_is_a_breach_and_killed(odd_env):
    """sglang-backends serve's supervisor stops it; under sglang serve nothing between the
    backend and init adopts it but the kit."""
    ours = assert_stops_cleanly("escaping", [], ready="serving", env=odd_env, hosts=BOTH[:1])
    assert ours == {BOTH[0]: 130}
    with pytest.raises(ContractViolation, match="under sglang serve left processes running"):
        assert_stops_cleanly("escaping", [], ready="serving", env=odd_env, hosts=BOTH[1:])
    assert [p for p in _sleepers() if p.status() != psutil.STATUS_ZOMBIE] == []


@pytest.mark.parametrize("host", BOTH)
def test_a_run_that_returns_after_its_ready_text_has_not_served(odd_env, host):
    with pytest.raises(ContractViolation, match="ended before it was stopped, with status 0"):
        assert_stops_cleanly("done", [], ready="serving", env=odd_env, hosts=[host])


def test_a_traceback_logged_before_the_signal_is_not_how_it_stopped(odd_env):
    statuses = assert_stops_cleanly("noisy", [], ready="serving", env=odd_env, hosts=BOTH)
    assert statuses == dict.fromkeys(BOTH, 130)


def test_a_ready_text_without_its_newline_is_seen_as_soon_as_printed(odd_env):
    started = time.monotonic()
    statuses = assert_stops_cleanly(
        "partial", [], ready="ready now", start_timeout=20, env=odd_env, hosts=BOTH
    )
    assert statuses == dict.fromkeys(BOTH, 130)
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    ("given", "expected"),
    [({"signum": 0}, "Invalid value 0 for signum"),
     ({"signum": 999}, "Invalid value 999 for signum"),
     ({"stop_timeout": -1}, "Invalid value -1 for stop_timeout"),
     ({"start_timeout": float("nan")}, "Invalid value nan for start_timeout")],
)  # fmt: skip
def test_a_bad_parameter_is_refused_before_anything_starts(given, expected):
    with pytest.raises(ConfigurationError, match=expected):
        assert_stops_cleanly("plain", [], hosts=["sglang-backends serve"], **given)
