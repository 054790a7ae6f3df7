"""A load or detector its caller interrupts is the caller's: the user's Ctrl-C, or a
``BaseException`` the caller's progress callback raises, reaches that caller alone, blames no
plugin, and leaves no load behind: whoever asks next loads the backend anew.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from sglang_backends import ServeBackendRegistry, ServeRequest
from sglang_backends._sglang.builtins import default_builtins

REQUEST = ServeRequest.from_argv(["m"])
MATCH = "return ServeBackendDetection.MATCH"


class Stop(BaseException):
    """The host's own way to cancel, raised by its progress callback."""


def stop_on(wanted: str):
    """A progress callback raising :class:`Stop` on the event *wanted*."""

    def progress(event: str, label: str) -> None:
        if event == wanted:
            raise Stop(f"host cancels on {event}")

    return progress


def run_python(site, code: str) -> subprocess.CompletedProcess[str]:
    """Run *code* in a fresh interpreter seeing *site*'s distributions."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=site.environ(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("event", ["loading", "loaded"])
def test_a_host_exception_while_detection_loads_reaches_the_caller_and_the_load_is_forgotten(
    site, install_backend, event
):
    """No worker prints it as its own traceback; later plain gets load each backend anew."""
    module = install_backend("cnt-rt", "cnt", prelude="FACTORY_DELAY = 0.5")
    result = run_python(
        site,
        f"""
        from sglang_backends import ServeBackendRegistry, ServeRequest
        from sglang_backends._sglang.builtins import default_builtins
        import {module} as plugin

        class Stop(BaseException):
            pass

        def progress(event, label):
            if event == {event!r}:
                raise Stop("host cancels")

        registry = ServeBackendRegistry(default_builtins())
        try:
            registry.auto_detect(ServeRequest.from_argv(["m"]), progress=progress)
        except Stop as exc:
            print("caller got", exc)
        for name in ("cnt", "diffusion"):
            print(name, registry.get(name).name)
        print("factory calls", plugin.CALLS)
        """,
    )
    assert result.returncode == 0, result.stderr
    # Told "loaded", the factory had run; its backend, never handed over, is loaded anew.
    calls = 1 if event == "loading" else 2
    assert result.stdout.splitlines() == [
        "caller got host cancels",
        "cnt cnt",
        "diffusion diffusion",
        f"factory calls {calls}",
    ]
    assert "Traceback" not in result.stderr and "Exception in thread" not in result.stderr


@pytest.mark.parametrize("event", ["detecting", "detected"])
@pytest.mark.parametrize("call", ["explain", "auto_detect"])
def test_a_host_exception_while_detecting_reaches_the_caller_and_blames_no_detector(
    install_backend, registry_warnings, event, call
):
    install_backend("cnt-rt", "cnt", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins())
    with pytest.raises(Stop, match=f"host cancels on {event}"):
        getattr(registry, call)(REQUEST, progress=stop_on(event))
    assert "Skipping" not in registry_warnings.text
    assert registry.auto_detect(REQUEST).name == "cnt"


@pytest.mark.parametrize("event", ["loading", "loaded"])
def test_a_host_exception_in_get_reaches_the_caller_and_the_load_is_forgotten(
    install_backend, event
):
    module = install_backend("cnt-rt", "cnt")
    registry = ServeBackendRegistry(default_builtins())
    with pytest.raises(Stop):
        registry.get("cnt", progress=stop_on(event))
    assert registry.get("cnt").distribution == "cnt-rt"
    assert sys.modules[module].CALLS == (1 if event == "loading" else 2)


def await_while_main_loads(registry: ServeBackendRegistry, call) -> tuple[list, threading.Thread]:
    """A thread starting *call(registry)* 0.2 s from now, keeping what it returns or raises."""
    got: list = []

    def waiter() -> None:
        threading.Event().wait(0.2)
        try:
            got.append(call(registry))
        except BaseException as exc:  # noqa: BLE001 - what it got is the test's finding
            got.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    return got, thread


def test_a_thread_awaiting_a_load_its_owner_interrupted_loads_it_anew(install_backend):
    """The owner's progress callback raising is the owner's alone, not the waiter's."""
    module = install_backend("slow-rt", "slow", prelude="FACTORY_DELAY = 1.0")
    registry = ServeBackendRegistry(default_builtins())
    got, thread = await_while_main_loads(registry, lambda r: r.get("slow"))
    with pytest.raises(Stop):
        registry.get("slow", progress=stop_on("loaded"))
    thread.join(10)
    assert [type(item).__name__ for item in got] == ["RegisteredServeBackend"], got
    assert got[0].distribution == "slow-rt"
    assert sys.modules[module].CALLS == 2
    assert registry.get("slow") is got[0]


def test_detection_awaiting_a_load_its_owner_interrupted_loads_it_anew(install_backend):
    install_backend("slow-rt", "slow", prelude="FACTORY_DELAY = 1.0", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins())
    got, thread = await_while_main_loads(registry, lambda r: r.explain(REQUEST))
    with pytest.raises(Stop):
        registry.get("slow", progress=stop_on("loaded"))
    thread.join(10)
    [report] = got
    assert report.selected == "slow", report


def test_a_thread_awaiting_a_load_the_users_ctrl_c_interrupted_loads_it_anew(site, install_backend):
    """A real SIGINT during the main thread's get(): the main thread alone sees it."""
    module = install_backend("slow-rt", "slow", prelude="FACTORY_DELAY = 1.5")
    result = run_python(
        site,
        f"""
        import os, signal, threading
        from sglang_backends import ServeBackendRegistry
        from sglang_backends._sglang.builtins import default_builtins
        import {module} as plugin

        registry = ServeBackendRegistry(default_builtins())
        got = []

        def waiter():
            threading.Event().wait(0.2)
            try:
                got.append(registry.get("slow").distribution)
            except BaseException as exc:
                got.append(f"waiter got {{type(exc).__name__}}")

        thread = threading.Thread(target=waiter)
        thread.start()
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            registry.get("slow")
        except KeyboardInterrupt:
            print("main got KeyboardInterrupt")
        thread.join()
        print(got, plugin.CALLS)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["main got KeyboardInterrupt", "['slow-rt'] 2"]
