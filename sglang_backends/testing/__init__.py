"""Tools for testing serve backends: real installed distributions and a contract check.

- :class:`PluginSite` / :func:`write_distribution` write real ``*.dist-info``
  directories that :mod:`importlib.metadata` finds like any installed package.
- :func:`assert_backend_contract` checks a factory or an installed backend, and
  where SGLang is installed that SGLang's own host accepts it too
  (:func:`assert_sglang_accepts`).
- The ``serve_backends`` pytest fixture combines both; pytest comes with
  ``pip install "sglang-backends[testing]"``.
"""

from sglang_backends.testing.conformance import (
    ContractReport,
    ContractViolation,
    assert_backend_contract,
    assert_sglang_accepts,
    awkward_requests,
)
from sglang_backends.testing.distributions import PluginSite, write_distribution

__all__ = [
    "ContractReport",
    "ContractViolation",
    "PluginSite",
    "assert_backend_contract",
    "assert_sglang_accepts",
    "awkward_requests",
    "write_distribution",
]
