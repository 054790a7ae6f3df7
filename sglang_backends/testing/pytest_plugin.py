"""pytest plugin (entry point ``pytest11``): fixtures for testing serve backends.

``serve_backends`` installs real distributions into a private directory put
first on ``sys.path`` and hands out fresh registries that see them. Module
and import caches are reset on the way in and out, so what one test installs
never leaks into the next.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sglang_backends.contract import SERVE_BACKENDS_GROUP, ServeBackend
from sglang_backends.testing.distributions import PluginSite

__all__ = ["ServeBackendsFixture", "serve_backends"]


class ServeBackendsFixture:
    """Installs distributions for one test and builds registries over them."""

    def __init__(self, site: PluginSite) -> None:
        self.site = site

    @property
    def path(self) -> Path:
        """The directory the distributions are installed in."""
        return self.site.path

    def install(
        self,
        name: str,
        *,
        version: str = "1.0",
        entry_points: Mapping[str, str] | None = None,
        group: str = SERVE_BACKENDS_GROUP,
        modules: Mapping[str, str] | None = None,
    ) -> Path:
        """Install distribution *name*; see :func:`~sglang_backends.testing.write_distribution`."""
        path = self.site.install(
            name, version=version, entry_points=entry_points, group=group, modules=modules
        )
        self.site.forget_modules()
        importlib.invalidate_caches()
        return path

    def registry(self, builtins: Mapping[str, ServeBackend] | None = None, **options: Any) -> Any:
        """A new :class:`~sglang_backends.ServeBackendRegistry` seeing what is installed now.

        *builtins* defaults to the package's own (``llm``, ``diffusion``);
        *options* are passed on (``enabled``, ``disabled``, ``detect_timeout``).
        """
        from sglang_backends.builtins import default_builtins
        from sglang_backends.registry import ServeBackendRegistry

        return ServeBackendRegistry(default_builtins() if builtins is None else builtins, **options)

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for a subprocess that should see these distributions."""
        return self.site.environ(base)


@pytest.fixture
def serve_backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeBackendsFixture]:
    """Install real plugin distributions for this test and build registries over them."""
    site = PluginSite(tmp_path_factory.mktemp("serve-backends-site"))
    with site.activated():
        yield ServeBackendsFixture(site)
