"""One plugin source for both hosts: ``portable_backend`` and the kit's SGLang check.

SGLang is not installed here: the stand-in ``sglang`` distribution
(tests/sglang_standin.py) provides a ``sglang.cli.serve_backends`` that, like
upstream's, accepts only its own ``ServeBackend`` and compares detections
with ``is MATCH``. The real one is exercised by ``tox -e sglang``
(tests/differential/).
"""

from __future__ import annotations

import importlib
import sys

import pytest
from sglang_standin import install_sglang

from sglang_backends import (
    ServeBackend,
    ServeBackendDetection,
    ServeBackendRegistry,
    ServeRequest,
    host_contract,
    portable_backend,
)
from sglang_backends._sglang.builtins import default_builtins
from sglang_backends.contract import SGLANG_CONTRACT_MODULE
from sglang_backends.testing import ContractViolation, assert_backend_contract
from sglang_backends.testing._conformance import assert_sglang_accepts

PORTABLE = """
import os
from sglang_backends import ServeBackendDetection, portable_backend

def run(request):
    if "--help" in request.argv:
        print("portable help")

def detect(request):
    if request.model_path and request.model_path.endswith("portable-model"):
        return ServeBackendDetection.MATCH
    return ServeBackendDetection.UNKNOWN

def factory():
    \"\"\"A backend both hosts accept.\"\"\"
    return portable_backend(api_version=1, run=run, detect=detect)
"""

#: Written as the guide used to teach: this package's classes, refused by SGLang.
OURS_ONLY = """
from sglang_backends import ServeBackend, ServeBackendDetection

def run(request):
    pass

def detect(request):
    return ServeBackendDetection.UNKNOWN

def factory():
    return ServeBackend(api_version=1, run=run, detect=detect)
"""

#: SGLang's ServeBackend, but a detector answering in this package's enum.
MIXED = """
from sglang.cli.serve_backends import ServeBackend
from sglang_backends import ServeBackendDetection

def run(request):
    pass

def detect(request):
    return ServeBackendDetection.UNKNOWN

def factory():
    return ServeBackend(api_version=1, run=run, detect=detect)
"""


@pytest.fixture
def sglang_site(site, tmp_path, monkeypatch):
    """The test site with the stand-in SGLang installed (not yet imported)."""
    monkeypatch.setenv("SGLANG_STANDIN_LOG", str(tmp_path / "events.jsonl"))
    install_sglang(site)
    assert SGLANG_CONTRACT_MODULE not in sys.modules
    return site


def _install(site, source: str, name: str = "portable") -> None:
    site.install(
        f"{name}-runtime",
        entry_points={name: f"{name}_runtime:factory"},
        modules={f"{name}_runtime.py": source},
    )


def test_without_sglang_loaded_the_host_is_ours():
    assert SGLANG_CONTRACT_MODULE not in sys.modules
    assert host_contract() == (ServeBackend, ServeBackendDetection)
    detect = lambda request: ServeBackendDetection.MATCH  # noqa: E731
    backend = portable_backend(api_version=1, run=print, detect=detect)
    assert type(backend) is ServeBackend
    assert backend.detect is detect  # nothing to translate


def test_under_sglangs_host_it_answers_with_sglangs_classes(sglang_site):
    upstream = importlib.import_module(SGLANG_CONTRACT_MODULE)  # as `sglang serve` does
    assert host_contract() == (upstream.ServeBackend, upstream.ServeBackendDetection)

    def detect(request):
        """Mine."""
        return ServeBackendDetection.MATCH

    backend = portable_backend(api_version=1, run=print, detect=detect)
    assert isinstance(backend, upstream.ServeBackend)
    answer = backend.detect(upstream.ServeRequest(argv=(), model_path="m"))
    assert answer is upstream.ServeBackendDetection.MATCH
    assert (backend.detect.__name__, backend.detect.__doc__) == ("detect", "Mine.")
    # An answer that is no detection at all reaches the host unchanged, to be reported.
    odd = portable_backend(api_version=1, run=print, detect=lambda request: "match")
    assert odd.detect(upstream.ServeRequest(argv=(), model_path="m")) == "match"


def test_sglangs_registry_and_ours_both_serve_a_portable_plugin(sglang_site, tmp_path):
    _install(sglang_site, PORTABLE)
    model = tmp_path / "portable-model"
    model.mkdir()
    upstream = importlib.import_module(SGLANG_CONTRACT_MODULE)
    theirs = upstream.ServeBackendRegistry({"llm": upstream.ServeBackend(1, print)})
    request = upstream.ServeRequest(argv=("--model-path", str(model)), model_path=str(model))
    assert theirs.auto_detect(request).name == "portable"
    # Ours, in the same process (SGLang's module loaded): it accepts SGLang's objects.
    ours = ServeBackendRegistry(default_builtins())
    assert ours.auto_detect(ServeRequest(request.argv, str(model))).name == "portable"


def test_a_plugin_written_for_sglang_still_loads_here(sglang_site):
    source = MIXED.replace(
        "from sglang_backends import ServeBackendDetection",
        "from sglang.cli.serve_backends import ServeBackendDetection",
    )
    _install(sglang_site, source, name="upstreamish")
    assert ServeBackendRegistry(default_builtins()).get("upstreamish").backend.api_version == 1


def test_the_kit_checks_that_sglang_accepts_a_portable_plugin(sglang_site):
    _install(sglang_site, PORTABLE)
    report = assert_backend_contract("portable")
    assert report.sglang_checked
    assert report.detections["no model path"] == "unknown"


def test_the_kit_checks_a_factory_under_sglang_too(sglang_site):
    _install(sglang_site, PORTABLE)
    from portable_runtime import factory

    assert assert_backend_contract(factory).sglang_checked


def test_the_kit_names_the_fix_when_sglang_refuses_the_backend(sglang_site):
    _install(sglang_site, OURS_ONLY)
    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract("portable")
    message = str(caught.value)
    assert "SGLang's registry refuses serve backend 'portable'" in message
    assert "expected sglang.cli.serve_backends.ServeBackend" in message
    assert "portable_backend" in message
    from portable_runtime import factory

    with pytest.raises(ContractViolation, match="SGLang refuses factory"):
        assert_sglang_accepts(factory)
    # Ours alone is satisfied: the breach is portability only.
    assert not assert_backend_contract("portable", sglang=False).sglang_checked


def test_the_kit_refuses_detections_sglang_would_ignore(sglang_site):
    _install(sglang_site, MIXED)
    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract("portable")
    assert "expected sglang.cli.serve_backends.ServeBackendDetection" in str(caught.value)


def test_without_sglang_the_check_is_skipped_unless_required(site):
    _install(site, PORTABLE)
    assert not assert_backend_contract("portable").sglang_checked
    with pytest.raises(ContractViolation, match=r"needs SGLang's sglang\.cli\.serve_backends"):
        assert_backend_contract("portable", sglang=True)


def test_the_echo_example_is_portable(sglang_site, preinstalled):
    if "echo" not in preinstalled:
        pytest.skip("the echo example is not installed in this environment")
    assert assert_backend_contract("echo").sglang_checked


INTERRUPTING = """
def factory():
    raise KeyboardInterrupt
"""


def test_a_keyboard_interrupt_under_sglangs_registry_is_a_breach_not_the_end_of_the_run(
    sglang_site,
):
    """SGLang's registry lets it through (it catches Exception); the kit takes it as the
    plugin's, as it does under this package's registry."""
    _install(sglang_site, INTERRUPTING)
    try:
        with pytest.raises(ContractViolation) as caught:
            assert_sglang_accepts("portable")
    except KeyboardInterrupt:
        pytest.fail("the plugin's KeyboardInterrupt escaped the kit: it would end the session")
    assert str(caught.value) == (
        "SGLang's registry refuses serve backend 'portable' from portable-runtime: "
        "KeyboardInterrupt"
    )
