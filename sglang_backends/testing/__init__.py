"""Tools for testing serve backends against real installed metadata."""

from sglang_backends.testing.distributions import PluginSite, write_distribution

__all__ = ["PluginSite", "write_distribution"]
