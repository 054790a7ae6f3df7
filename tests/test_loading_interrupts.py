"""A load or detector its caller interrupts is the caller's: the user's Ctrl-C, or a
``BaseException`` the caller's progress callback raises, reaches that caller alone, blames no
plugin, and leaves no load behind: whoever asks next loads the backend anew.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
