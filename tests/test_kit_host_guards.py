"""The contract check keeps what would end or hang a host from passing, or from ending the run:
``os._exit``, double-forked processes, non-daemon threads; and it names, escapes and refuses
as the package does."""

from __future__ import annotations

import ctypes
import math
import os
import subprocess
import sys
import threading

import psutil
import pytest
from clitools import run_pytest_in

from sglang_backends import ServeBackend, ServeBackendDetection
from sglang_backends.errors import ConfigurationError
from sglang_backends.testing import (
    ContractViolation,
    assert_backend_contract,
    assert_sglang_accepts,
)

EXITING_PLUGIN_TESTS = """
import os
import pytest
from sglang_backends import ServeBackend, ServeBackendDetection
from sglang_backends.testing import ContractViolation, assert_backend_contract

REAL_EXIT = os._exit

def help_exiting(status):
    def run(request):
        if "--help" in request.argv:
            print("usage: p")
            os._exit(status)
    return run

def test_help_ending_with_os_exit_0_passes():
    assert_backend_contract(lambda: ServeBackend(api_version=1, run=help_exiting(0)), sglang=False)

def test_help_ending_with_another_status():
    assert_backend_contract(lambda: ServeBackend(api_version=1, run=help_exiting(3)), sglang=False)

def exiting_factory():
    os._exit(0)

def test_factory():
    assert_backend_contract(exiting_factory, sglang=False)

def exiting_detect(request):
    os._exit(0)

def test_detect():
    assert_backend_contract(
        lambda: ServeBackend(api_version=1, run=print, detect=exiting_detect), sglang=False
    )

def test_import(serve_backends):
    serve_backends.install("exiting-dist", entry_points={"exiting": "exiting_mod:factory"},
                           modules={"exiting_mod.py": "import os\\nos._exit(0)\\n"})
    assert_backend_contract("exiting", registry=serve_backends.registry(), sglang=False)

def test_the_run_goes_on_with_os_exit_restored():
    assert os._exit is REAL_EXIT
    assert False, "reached"
"""


def test_os_exit_in_plugin_code_is_a_breach_not_a_green_end_of_the_run(tmp_path):
    (tmp_path / "test_plugin.py").write_text(EXITING_PLUGIN_TESTS, encoding="utf-8")
    result = run_pytest_in(tmp_path, "-q", "-rf")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "5 failed, 1 passed" in output, output
    for breach in (
        "ContractViolation: Serve backend 'test_plugin.test_help_ending_with_another_status."
        "<locals>.<lambda>': run(['--help']) called os._exit(3)",
        "ContractViolation: Factory 'test_plugin.exiting_factory' called os._exit(0) while loading",
        "ContractViolation: Serve backend 'test_plugin.test_detect.<locals>.<lambda>': detect() "
        "called os._exit(0) for a request with no model path: it would end the host",
        "ContractViolation: Failed to load serve backend 'exiting' from exiting-dist: plugin "
        "called os._exit(0) while loading",
        "AssertionError: reached",
    ):
        assert breach in output, output


def subreaper() -> int:
    """This process's PR_GET_CHILD_SUBREAPER."""
    state = ctypes.c_int()
    assert ctypes.CDLL(None).prctl(37, ctypes.byref(state), 0, 0, 0) == 0
    return state.value


def sleeping(seconds: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", seconds]]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_help_leaving_a_double_forked_process_is_a_breach_and_it_is_killed():
    seconds = f"3333.{os.getpid()}"  # this run's alone

    def run(request):
        # setsid -f forks, and its child outlives it: an orphan at once.
        subprocess.Popen(["setsid", "-f", "sleep", seconds]).wait()
        print("usage: p")

    assert subreaper() == 0
    with pytest.raises(ContractViolation, match=r"run\(\['--help'\]\) left processes running"):
        assert_backend_contract(lambda: ServeBackend(api_version=1, run=run), sglang=False)
    assert not sleeping(seconds)  # killed and reaped, not left to init
    assert subreaper() == 0  # as it was


THREADS = """
import threading
from sglang_backends import ServeBackend

STOP = threading.Event()
if {at_import}:
    threading.Thread(target=STOP.wait, daemon={daemon}).start()

def run(request):
    if {in_help}:
        threading.Thread(target=STOP.wait, name="helper", daemon={daemon}).start()
    print("usage: t")

def factory():
    return ServeBackend(api_version=1, run=run)
"""


@pytest.mark.parametrize("where", ["at_import", "in_help"])
def test_a_non_daemon_thread_left_running_is_a_breach(serve_backends, where):
    """Started in the check's worker thread, a daemon, it would be a daemon too: under both
    hosts it starts from the main thread, and sglang serve waits for it at exit."""
    source = THREADS.format(at_import=where == "at_import", in_help=where == "in_help", daemon=None)
    serve_backends.install(
        "threads-dist",
        entry_points={"threads": "threads_mod:factory"},
        modules={"threads_mod.py": source},
    )
    try:
        with pytest.raises(ContractViolation) as caught:
            assert_backend_contract("threads", registry=serve_backends.registry(), sglang=False)
    finally:
        sys.modules["threads_mod"].STOP.set()
    name = "helper" if where == "in_help" else "Thread-"
    assert str(caught.value).startswith(
        f"Serve backend 'threads' from threads-dist: left non-daemon threads running: '{name}"
    ), caught.value
    assert str(caught.value).endswith(
        "; sglang serve would wait for them for ever before it exits: make them daemon "
        "threads or join them"
    )


def test_a_daemon_thread_left_running_passes(serve_backends):
    source = THREADS.format(at_import=True, in_help=True, daemon=True)
    serve_backends.install(
        "threads-dist",
        entry_points={"threads": "threads_mod:factory"},
        modules={"threads_mod.py": source},
    )
    try:
        assert_backend_contract("threads", registry=serve_backends.registry(), sglang=False)
    finally:
        sys.modules["threads_mod"].STOP.set()
    assert not threading.current_thread().daemon


HELP_EXITING_2 = """
import argparse
from sglang_backends import ServeBackend

def run(request):
    argparse.ArgumentParser(prog="h").parse_args(["--bad"])

def factory():
    return ServeBackend(api_version=1, run=run)
"""


def test_a_breach_of_an_installed_backend_names_its_distribution(serve_backends):
    serve_backends.install(
        "helpexit-dist",
        entry_points={"bad_helpexit": "helpexit_mod:factory"},
        modules={"helpexit_mod.py": HELP_EXITING_2},
    )
    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract("bad_helpexit", registry=serve_backends.registry(), sglang=False)
    assert str(caught.value) == (
        "Serve backend 'bad_helpexit' from helpexit-dist: run(['--help']) raised SystemExit: 2"
    )
    assert (caught.value.name, caught.value.distribution) == ("bad_helpexit", "helpexit-dist")


def test_sglangs_refusal_names_the_distribution(serve_backends):
    from sglang_standin import install_sglang

    install_sglang(serve_backends)
    serve_backends.install(
        "plain-rt",
        entry_points={"plain_rt": "plain_mod:factory"},
        modules={"plain_mod.py": HELP_EXITING_2.replace('parse_args(["--bad"])', "parse_args([])")},
    )
    with pytest.raises(ContractViolation) as caught:
        assert_sglang_accepts("plain_rt")
    assert str(caught.value).startswith(
        "SGLang's registry refuses serve backend 'plain_rt' from plain-rt: "
    ), caught.value


def a_factory():
    return ServeBackend(api_version=1, run=print, detect=lambda request: "yes")


def test_a_factory_object_is_named_by_module_and_qualname():
    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract(a_factory, sglang=False)
    assert str(caught.value).startswith(
        "Serve backend 'test_kit_host_guards.a_factory': detect() returned str"
    ), caught.value


def test_what_the_plugin_says_is_escaped_in_the_breach():
    def detect(request):
        if request.model_path and "\x00" in request.model_path:
            raise ValueError("cannot read " + request.model_path)
        return ServeBackendDetection.UNKNOWN

    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract(
            lambda: ServeBackend(api_version=1, run=print, detect=detect), sglang=False
        )
    message = str(caught.value)
    assert message.isprintable(), message
    # Its white space folded, as every message of plugin code is.
    assert "cannot read \\x00\\udcff../ *?;" in message, message


@pytest.mark.parametrize(
    ("timeout", "refusal"),
    [
        (0, "Invalid value 0 for timeout: must be a number of seconds from 0.001 to 1e+09"),
        (-1, "Invalid value -1 for timeout: must be a number of seconds from 0.001 to 1e+09"),
        (math.nan, "Invalid value nan for timeout: must be a number of seconds from 0.001 to"),
        ("5", "timeout must be a number of seconds, not a string"),
    ],
)
@pytest.mark.parametrize("check", [assert_backend_contract, assert_sglang_accepts])
def test_a_bad_timeout_is_refused_not_blamed_on_the_plugin(check, timeout, refusal):
    ran = []

    def factory():
        ran.append(True)
        return ServeBackend(api_version=1, run=print)

    with pytest.raises(ConfigurationError) as caught:
        check(factory, timeout=timeout)
    assert not isinstance(caught.value, ContractViolation)
    assert str(caught.value).startswith(refusal), caught.value
    assert not ran
