"""Running the real ``sglang-backends`` console script against a test's plugin site."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from sglang_backends.testing import PluginSite

#: The console script installed next to this interpreter.
CLI = str(Path(sys.executable).with_name("sglang-backends"))


def clean_environ(env: Mapping[str, str]) -> dict[str, str]:
    """*env* without configuration variables, so commands use their defaults."""
    return {k: v for k, v in env.items() if not k.startswith("OS_SERVE_BACKENDS__")}


def run_pytest_in(directory: object, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest run in *directory* on the tests it holds (no cache, no xdist), its output
    captured: a plugin author's test session."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=directory,
        env=clean_environ(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


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


_PROBE = """\
import atexit as _atexit, sys as _sys
def _report(watched={watched!r}):
    loaded = sorted(
        name for name in watched
        if any(m == name or m.startswith(name + ".") for m in _sys.modules)
    )
    print("IMPORTED " + " ".join(loaded), file=_sys.stderr)  # json would count itself
_atexit.register(_report)
"""


def imported_by(
    code: str, watched: Iterable[str], env: Mapping[str, str] | None = None
) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """Run *code* in a fresh interpreter; return which *watched* modules it imported, and the run.

    A name counts when it or any of its submodules is imported; the report is
    made at exit, so *code* may end with ``sys.exit(...)``.
    """
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(watched=tuple(watched)) + code],
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    report = [line for line in result.stderr.splitlines() if line.startswith("IMPORTED ")]
    assert report, result.stderr
    return report[-1].removeprefix("IMPORTED ").split(), result


def serve_in_process(args: Sequence[str]) -> str:
    """Code running ``sglang-backends serve ARGS`` in the interpreter, exiting with its status."""
    return (
        "from sglang_backends._cli import main\n"
        f"raise SystemExit(main(['serve', *{list(args)!r}]))\n"
    )
