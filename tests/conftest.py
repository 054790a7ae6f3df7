"""Shared fixtures: a private site of real installed distributions per test."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from sglang_backends.testing import PluginSite


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
    from sglang_backends.discovery import discover

    return tuple(sorted(discover()))
