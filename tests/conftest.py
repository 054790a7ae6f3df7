"""Shared fixtures: a private site of real installed distributions per test."""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import Iterator

import pytest

from sglang_backends.testing import PluginSite

#: Signals whose inherited disposition would change what the tests observe.
_RESET_SIGNALS = ("SIGHUP", "SIGTERM", "SIGQUIT", "SIGCHLD", "SIGUSR1", "SIGUSR2")


def pytest_configure(config: pytest.Config) -> None:
    """Start from default signal dispositions, whatever the suite inherited.

    A shell runs a background job with SIGINT ignored (``nohup`` ignores
    SIGHUP), and an ignored signal stays ignored across ``exec``: every
    process the tests start would inherit it. Reset here, each process
    (pytest's, xdist's workers, and so every subprocess) starts as from a
    terminal: SIGINT raises KeyboardInterrupt, the others do their default,
    nothing is blocked. (SIGPIPE is left alone: Python ignores it on purpose,
    and :mod:`subprocess` restores it in children.)
    """
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in _RESET_SIGNALS:
        signum = getattr(signal, name)
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)


@pytest.fixture
def site(tmp_path) -> Iterator[PluginSite]:
    """A directory of installed distributions, first on ``sys.path`` for this test."""
    plugin_site = PluginSite(tmp_path / "site")
    with plugin_site.activated():
        yield plugin_site


@pytest.fixture
def registry_warnings(caplog) -> pytest.LogCaptureFixture:
    """Capture the registry's warnings."""
    caplog.set_level(logging.WARNING, logger="sglang_backends")
    return caplog


@pytest.fixture(scope="session")
def preinstalled() -> tuple[str, ...]:
    """Serve backends installed in the test environment itself (the example plugin, say).

    Tests that expect an exact list of backends add these, so they hold in any
    environment.
    """
    from sglang_backends._core.discovery import discover

    return tuple(sorted(discover()))


def backend_module(*, detect: str | None = None, prelude: str = "", api_version: int = 1) -> str:
    """Source of a plugin module whose ``factory`` counts its calls in ``CALLS``.

    :param detect: the body of ``detect(request)``, one statement; ``None``
        for a backend without a detector.
    :param prelude: statements run at import, after the counters (set
        ``FACTORY_DELAY`` to make the factory slow).
    """
    detector = "detect" if detect is not None else "None"
    return (
        "import time\n"
        "from sglang_backends import ServeBackend, ServeBackendDetection\n"
        "CALLS = 0\n"
        "FACTORY_DELAY = 0.0\n"
        f"{prelude}\n"
        "def detect(request):\n"
        f"    {detect or 'return ServeBackendDetection.UNKNOWN'}\n"
        "def factory():\n"
        "    global CALLS\n"
        "    CALLS += 1\n"
        "    time.sleep(FACTORY_DELAY)\n"
        f"    return ServeBackend(api_version={api_version}, run=lambda request: None,"
        f" detect={detector})\n"
    )


@pytest.fixture
def install_backend(site):
    """Install a distribution providing one backend; returns its module name.

    ``install_backend(dist, name, detect=..., prelude=..., target=...)``: the
    module is ``<dist>_<name>_plugin`` (made an identifier) unless *module* is given.
    """

    def install(
        dist: str,
        name: str,
        *,
        detect: str | None = None,
        prelude: str = "",
        api_version: int = 1,
        module: str | None = None,
        source: str | None = None,
        target: str | None = None,
        version: str = "1.0",
    ) -> str:
        module = module or re.sub(r"\W", "_", f"{dist}_{name}_plugin")
        if source is None:
            source = backend_module(detect=detect, prelude=prelude, api_version=api_version)
        site.install(
            dist,
            version=version,
            entry_points={name: target or f"{module}:factory"},
            modules={f"{module}.py": source},
        )
        return module

    return install
