"""The suite's results do not depend on the signal dispositions it inherits."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import signal
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "SIGINT"
for name in ("SIGHUP", "SIGTERM", "SIGQUIT", "SIGCHLD", "SIGUSR1", "SIGUSR2"):
    assert signal.getsignal(getattr(signal, name)) is signal.SIG_DFL, name
assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set(), "mask"
"""


def test_a_suite_started_with_signals_ignored_gives_its_processes_the_defaults():
    """Run like a shell's background job (``trap "" INT``, ``nohup``): the children see defaults.

    conftest.py resets the dispositions in pytest's own process; this runs a
    small suite in a fresh pytest started with SIGINT, SIGHUP and SIGTERM
    ignored and SIGUSR1 blocked, and checks what its subprocess sees.
    """
    code = (
        "import signal, subprocess, sys\n"
        "for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):\n"
        "    signal.signal(s, signal.SIG_IGN)\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])\n"
        "import pytest\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'no:xdist', "
        "'-k', 'a_subprocess_of_the_suite', __file__]))\n"
    ).replace("__file__", repr(__file__))
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout, result.stdout


def test_a_subprocess_of_the_suite_starts_with_default_dispositions():
    result = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
