"""Plugins written for SGLang's ``sglang.cli.serve_backends`` load unchanged.

SGLang is not installed: a stand-in ``sglang`` distribution with the same
dataclass and enum shapes is installed in the test site, and plugins import
it exactly as they would import SGLang.
"""

from __future__ import annotations

import sys

import pytest
from sglang_standin import MODULES

from sglang_backends import (
    BackendLoadError,
    BackendTypeError,
    ServeBackend,
    ServeBackendDetection,
    ServeBackendRegistry,
    ServeRequest,
)
from sglang_backends._core.detection import Verdict
from sglang_backends._sglang.builtins import default_builtins

#: SGLang's contract module, as the stand-in SGLang distribution provides it.
STAND_IN = MODULES["sglang/cli/serve_backends.py"]

UPSTREAM_PLUGIN = """
from sglang.cli.serve_backends import ServeBackend, ServeBackendDetection

RUNS = []

def run(request):
    RUNS.append(request)

def detect(request):
    if request.model_path and request.model_path.startswith("legacy/"):
        return ServeBackendDetection.MATCH
    return ServeBackendDetection.{otherwise}

def factory():
    return ServeBackend(api_version={version}, run=run, detect=detect, requires_model_path=False)
"""


@pytest.fixture
def upstream(site, install_backend):
    """Install the stand-in ``sglang`` and a plugin written against it."""
    site.install(
        "sglang",
        version="0.0.0",
        modules={
            "sglang/__init__.py": "",
            "sglang/cli/__init__.py": "",
            "sglang/cli/serve_backends.py": STAND_IN,
        },
    )

    def install(otherwise: str = "NO_MATCH", version: int = 1) -> str:
        return install_backend(
            "legacy-runtime",
            "legacy",
            source=UPSTREAM_PLUGIN.format(otherwise=otherwise, version=version),
        )

    return install


def test_listing_an_upstream_plugin_imports_neither_it_nor_sglang(upstream, preinstalled):
    module = upstream()
    registry = ServeBackendRegistry(default_builtins())
    assert registry.available_names == ("llm", "diffusion", *sorted({"legacy", *preinstalled}))
    assert module not in sys.modules
    assert "sglang" not in sys.modules


def test_upstream_backend_is_accepted_by_structure(upstream, site):
    module = upstream()
    loaded = ServeBackendRegistry(default_builtins()).get("legacy")
    plugin = sys.modules[module]
    assert sys.modules["sglang"].__file__.startswith(str(site.path))  # the stand-in
    assert isinstance(loaded.backend, ServeBackend)
    assert loaded.backend.run is plugin.run
    assert loaded.backend.detect is plugin.detect
    assert loaded.backend.requires_model_path is False
    assert loaded.distribution == "legacy-runtime"
    request = ServeRequest(argv=("--port", "1"), model_path=None)
    loaded.backend.run(request)
    assert plugin.RUNS == [request]


def test_upstream_match_selects_the_plugin(upstream):
    upstream()
    registry = ServeBackendRegistry(default_builtins())
    chosen = registry.auto_detect(ServeRequest(argv=(), model_path="legacy/model"))
    assert chosen.name == "legacy"
    outcomes = registry.explain(ServeRequest(argv=(), model_path="other/model")).outcomes
    outcome = next(o for o in outcomes if o.name == "legacy")
    assert outcome.verdict is Verdict.NO_MATCH
    assert registry.auto_detect(ServeRequest(argv=(), model_path="other/model")).name == "llm"


def test_upstream_unknown_is_unknown(upstream):
    upstream(otherwise="UNKNOWN")
    report = ServeBackendRegistry(default_builtins()).explain(
        ServeRequest(argv=(), model_path="other")
    )
    outcome = next(o for o in report.outcomes if o.name == "legacy")
    assert outcome.verdict is Verdict.UNKNOWN


def test_upstream_backend_with_another_version_is_refused(upstream):
    upstream(version=2)
    with pytest.raises(BackendLoadError, match="uses API version 2"):
        ServeBackendRegistry(default_builtins()).get("legacy")


LOOK_ALIKES = {
    "other-class-name": (
        "class Backend:\n"
        "    api_version = 1\n    run = print\n    detect = None\n    requires_model_path = True\n",
        "Backend",
    ),
    "missing-field": (
        "class ServeBackend:\n    api_version = 1\n    run = print\n    detect = None\n",
        "ServeBackend",
    ),
}


@pytest.mark.parametrize("case", sorted(LOOK_ALIKES))
def test_look_alikes_are_refused(install_backend, case):
    body, type_name = LOOK_ALIKES[case]
    cls = body.split()[1].rstrip(":")
    install_backend("fake-runtime", "fake", source=f"{body}\ndef factory():\n    return {cls}()\n")
    with pytest.raises(BackendTypeError, match=f"factory returned {type_name};"):
        ServeBackendRegistry(default_builtins()).get("fake")


def test_foreign_detection_with_an_unknown_value_is_an_error(install_backend, registry_warnings):
    source = (
        "import enum\n"
        "from sglang_backends import ServeBackend\n"
        "class ServeBackendDetection(str, enum.Enum):\n    MAYBE = 'maybe'\n"
        "def factory():\n"
        "    return ServeBackend(1, print, lambda r: ServeBackendDetection.MAYBE)\n"
    )
    install_backend("odd-runtime", "odd", source=source)
    registry = ServeBackendRegistry(default_builtins())
    assert registry.auto_detect(ServeRequest(argv=(), model_path="m")).name == "llm"
    assert any("'odd'" in r.getMessage() for r in registry_warnings.records)


def test_our_detection_enum_is_what_the_registry_reports(upstream):
    upstream()
    registry = ServeBackendRegistry(default_builtins())
    backend = registry.get("legacy").backend
    result = backend.detect(ServeRequest(argv=(), model_path="legacy/x"))
    assert type(result).__module__ == "sglang.cli.serve_backends"
    assert result == ServeBackendDetection.MATCH  # equal by value, being str enums


def test_structure_alone_is_enough_without_any_sglang(install_backend):
    source = (
        "import enum\n"
        "class ServeBackendDetection(str, enum.Enum):\n"
        "    MATCH = 'match'\n    NO_MATCH = 'no_match'\n    UNKNOWN = 'unknown'\n"
        "class ServeBackend:\n"
        "    def __init__(self, api_version, run, detect=None, requires_model_path=True):\n"
        "        self.api_version, self.run = api_version, run\n"
        "        self.detect, self.requires_model_path = detect, requires_model_path\n"
        "def factory():\n"
        "    return ServeBackend(1, print, lambda request: ServeBackendDetection.MATCH)\n"
    )
    install_backend("vendored-runtime", "vendored", source=source)
    registry = ServeBackendRegistry(default_builtins())
    chosen = registry.auto_detect(ServeRequest(argv=(), model_path="m"))
    assert chosen.name == "vendored"
    assert isinstance(chosen.backend, ServeBackend)
    assert chosen.backend.run is print
    assert "sglang" not in sys.modules
