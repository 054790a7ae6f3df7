"""Running the real ``sglang-backends`` console script against a test's plugin site."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from sglang_backends.testing import PluginSite

#: The console script installed next to this interpreter.
CLI = str(Path(sys.executable).with_name("sglang-backends"))


def clean_environ(env: Mapping[str, str]) -> dict[str, str]:
    """*env* without configuration variables, so commands use their defaults."""
    return {k: v for k, v in env.items() if not k.startswith("OS_SERVE_BACKENDS__")}


def run_cli(
    site: PluginSite,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``sglang-backends ARGS`` seeing *site*, with no stray configuration.

    stevedore's cache directory is private to the test, and *env* is added last.
    """
    environ = clean_environ(site.environ())
    environ["XDG_CACHE_HOME"] = str(site.path.parent / "cache")
    environ.update(env or {})
    return subprocess.run(
        [CLI, *args], env=environ, capture_output=True, text=True, timeout=timeout, check=False
    )
