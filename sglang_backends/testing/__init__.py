"""Tools for testing serve backends: real installed distributions and a contract check.

- :class:`PluginSite` / :func:`write_distribution` write real ``*.dist-info``
  directories that :mod:`importlib.metadata` finds like any installed package;
  installing a distribution again replaces it, as pip does, at any version.
- :func:`assert_backend_contract` checks a factory or an installed backend, and
  where SGLang is installed that SGLang's own host accepts it too
  (:func:`assert_sglang_accepts`); it warns (:class:`SGLangNotCheckedWarning`)
  and says so in its report when SGLang is not there to check.
- :func:`assert_stops_cleanly` serves the backend under each installed host
  and stops it as Ctrl+C does: no traceback, no process left.
- SGLang counts as installed where its package has the serve-backend API
  (:func:`sglang_backends._sglang.installed.sglang_installed`): beside a fork shipping
  ``sglang`` without it, SGLang is reported as not checked, naming the fork.
- A failing check is a pytest failure showing the plugin's test, the breach and what
  the plugin raised in a few lines: the kit's own frames are hidden
  (``__tracebackhide__``), and those that called plugin code (the registry's,
  stevedore's, the import system's) are cut from what it raised.
- The ``serve_backends`` pytest fixture combines both; pytest comes with
  ``pip install "sglang-backends[testing]"``.
"""

from __future__ import annotations

from sglang_backends._core import lazy as _lazy

# typing itself costs milliseconds a pytest session need not pay.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from sglang_backends.testing._conformance import (
        ContractReport,
        ContractViolation,
        SGLangNotCheckedWarning,
        assert_backend_contract,
        assert_sglang_accepts,
        awkward_requests,
    )
    from sglang_backends.testing._distributions import PluginSite, write_distribution
    from sglang_backends.testing._stopping import assert_stops_cleanly, installed_hosts

__all__ = [
    "ContractReport",
    "ContractViolation",
    "PluginSite",
    "SGLangNotCheckedWarning",
    "assert_backend_contract",
    "assert_sglang_accepts",
    "assert_stops_cleanly",
    "awkward_requests",
    "installed_hosts",
    "write_distribution",
]

#: The module each name of ``__all__`` lives in, when not the contract checks (``_conformance``).
_HOMES = {
    "PluginSite": "sglang_backends.testing._distributions",
    "write_distribution": "sglang_backends.testing._distributions",
    "assert_stops_cleanly": "sglang_backends.testing._stopping",
    "installed_hosts": "sglang_backends.testing._stopping",
}


def __getattr__(name: str) -> Any:
    """Import a tool on first use: the pytest plugin starts in every session of an environment
    holding this package, and the checks (the registry's companions, psutil) are not for all."""
    return _lazy.attribute(globals(), name, _HOMES, "sglang_backends.testing._conformance")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
