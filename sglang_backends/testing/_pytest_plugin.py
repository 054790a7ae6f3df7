"""pytest plugin (entry point ``pytest11``): the ``serve_backends`` fixture.

It installs real distributions into a private directory first on ``sys.path``
and builds registries that see them; what one test installs never leaks into the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

import sglang_backends
from sglang_backends.contract import ServeBackend
from sglang_backends.testing._distributions import PluginSite


class ServeBackendsFixture(PluginSite):
    """A :class:`~sglang_backends.testing.PluginSite` that also builds registries over itself."""

    def registry(
        self,
        builtins: Mapping[str, ServeBackend | Callable[[], ServeBackend]] | None = None,
        **options: Any,
    ) -> Any:
        """A new :class:`~sglang_backends.ServeBackendRegistry` seeing what is installed now.

        *builtins* defaults to the package's own (``llm``, ``diffusion``); *options* are the
        registry's (``enabled``, ``disabled``, ``detect_timeout``, ``load_timeout``), checked
        as it checks them: a string for a list of names is refused
        (:class:`~sglang_backends.errors.ConfigurationError`).

        A distribution installed again since replaces the earlier copy (see
        :func:`~sglang_backends.testing.write_distribution`); a registry built before
        keeps what it loaded.
        """
        return sglang_backends.ServeBackendRegistry(builtins, **options)


@pytest.fixture
def serve_backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeBackendsFixture]:
    """Install real plugin distributions for this test and build registries over them."""
    site = ServeBackendsFixture(tmp_path_factory.mktemp("serve-backends-site"))
    with site.activated():
        yield site
