"""Importing the contract is cheap: no stevedore, no importlib.metadata, no registry."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("stevedore", "importlib.metadata", "sglang")


def imported_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a fresh interpreter holds after running *code*."""
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "from sglang_backends import ServeBackend, ServeRequest, ServeBackendDetection",
        "import sglang_backends.contract",
        "import sglang_backends.errors",
        "from sglang_backends.builtins import default_builtins; default_builtins()",
    ],
)
def test_contract_import_is_lean(code):
    modules = imported_after(code)
    assert not [m for m in HEAVY if m in modules]
    assert not modules & {
        "sglang_backends.registry",
        "sglang_backends.discovery",
        "sglang_backends.loading",
        "sglang_backends.detection",
    }


def test_registry_is_imported_on_first_use():
    modules = imported_after("import sglang_backends; sglang_backends.ServeBackendRegistry")
    assert "sglang_backends.registry" in modules
    assert "stevedore" not in modules  # only loading a plugin needs it


def test_listing_in_a_fresh_interpreter_imports_no_plugin_and_no_sglang(site, install_backend):
    module = install_backend("omni-runtime", "omni")
    modules = imported_after(
        """
        from sglang_backends import ServeBackendRegistry
        from sglang_backends.builtins import default_builtins
        assert "omni" in ServeBackendRegistry(default_builtins()).available_names
        """,
        env=site.environ(),
    )
    assert module not in modules
    assert "sglang" not in modules
    assert "stevedore" not in modules


def test_get_in_a_fresh_interpreter_imports_only_the_selected_plugin(site, install_backend):
    wanted = install_backend("omni-runtime", "omni")
    other = install_backend("other-runtime", "other")
    modules = imported_after(
        """
        from sglang_backends import ServeBackendRegistry
        from sglang_backends.builtins import default_builtins
        ServeBackendRegistry(default_builtins()).get("omni")
        """,
        env=site.environ(),
    )
    assert wanted in modules
    assert other not in modules
    assert "stevedore" in modules
