"""The registry as a host program uses it, the way stevedore's managers are used.

No private module is imported here: what a library user needs is on the package.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest

from sglang_backends import (
    ConfigurationError,
    ServeBackend,
    ServeBackendRegistry,
    ServeRequest,
    UnknownBackendError,
)


def test_a_registry_without_arguments_has_sglangs_builtins_then_the_plugins(
    install_backend, preinstalled
):
    module = install_backend("acme-rt", "acme")
    registry = ServeBackendRegistry()
    assert registry.names() == ["llm", "diffusion", *sorted({"acme", *preinstalled})]
    assert "acme" in registry and "nope" not in registry
    assert list(registry) == registry.names()  # as a mapping iterates its keys
    assert repr(registry) == f"<ServeBackendRegistry: {', '.join(registry.names())}>"
    assert module not in sys.modules  # listing imports no plugin


def test_the_builtins_argument_keeps_upstreams_positional_signature(install_backend):
    install_backend("acme-rt", "acme")
    own = ServeBackend(api_version=1, run=print)
    registry = ServeBackendRegistry({"mine": own})
    assert registry.names()[0] == "mine"
    assert "llm" not in registry
    assert registry["mine"].backend is own


def test_indexing_loads_the_named_backend_once(install_backend):
    module = install_backend("acme-rt", "acme")
    registry = ServeBackendRegistry()
    loaded = registry["acme"]
    assert (loaded.name, loaded.distribution) == ("acme", "acme-rt")
    assert module in sys.modules
    assert registry["acme"] is loaded
    with pytest.raises(UnknownBackendError):
        registry["acme-typo"]


def test_records_are_flat(install_backend):
    install_backend("acme-rt", "acme", version="2.5")
    [record] = [r for r in ServeBackendRegistry().plugins if r.name == "acme"]
    assert (record.name, record.distribution, record.version, record.status.value) == (
        "acme",
        "acme-rt",
        "2.5",
        "enabled",
    )
    assert record.target.endswith(":factory")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["org/model", "--model-type", "acme", "--tp", "2"],
            ServeRequest(("--model-path", "org/model", "--tp", "2"), "org/model", True),
        ),
        (
            ["--model-type=acme", "--model", "m", "--port", "1"],
            ServeRequest(("--model", "m", "--port", "1"), "m"),
        ),
        (["--help"], ServeRequest(("--help",), None)),
        ([], ServeRequest((), None)),
    ],
)
def test_a_request_is_built_from_a_command_line_as_serve_builds_it(argv, expected):
    assert ServeRequest.from_argv(argv) == expected


def test_a_dangling_model_type_is_a_value_error():
    with pytest.raises(ValueError, match="--model-type"):
        ServeRequest.from_argv(["org/model", "--model-type"])


def test_a_command_line_given_as_one_string_is_refused_not_split_into_letters():
    """As the registry refuses a string for a list of names: ``"org/model --tp 2"`` is not a
    model ``o`` followed by the arguments ``r``, ``g``, ..."""
    with pytest.raises(ConfigurationError) as raised:
        ServeRequest.from_argv("org/model --tp 2")
    assert str(raised.value) == "argv must be a sequence of arguments, not a string"
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("argv", "got"), [([b"m"], "bytes"), (["m", 1], "int"), ([None], "NoneType")]
)
def test_a_request_from_what_is_no_argument_is_refused_naming_it(argv, got):
    with pytest.raises(ConfigurationError) as raised:
        ServeRequest.from_argv(argv)
    assert str(raised.value) == f"argv must hold strings, got {got}"


def test_a_request_from_an_iterator_of_arguments():
    request = ServeRequest.from_argv(iter(["org/model", "--model-type", "x", "--tp", "2"]))
    assert request.argv == ("--model-path", "org/model", "--tp", "2")


@pytest.mark.parametrize("request_", [None, "org/model", ("--model-path", "m")])
def test_detection_refuses_what_is_no_request_rather_than_blame_the_detectors(
    install_backend, caplog, request_
):
    """A host's slip is the host's: no detector is run, warned about or blamed."""
    module = install_backend("acme-rt", "acme", detect="return ServeBackendDetection.MATCH")
    registry = ServeBackendRegistry()
    for call in (registry.explain, registry.auto_detect):
        with pytest.raises(ConfigurationError) as raised:
            call(request_)
        assert str(raised.value) == f"request must be a ServeRequest, got {type(request_).__name__}"
        assert isinstance(raised.value, TypeError)
    assert "Skipping" not in caplog.text
    assert module not in sys.modules


def test_detection_takes_a_subclass_of_the_request(install_backend):
    """A host's own request class, derived from ServeRequest, is a request."""
    install_backend("acme-rt", "acme", detect="return ServeBackendDetection.MATCH")

    @dataclasses.dataclass(frozen=True)
    class TracedRequest(ServeRequest):
        trace_id: str = ""

    traced = TracedRequest(argv=("--model-path", "m"), model_path="m", trace_id="t1")
    assert ServeBackendRegistry().auto_detect(traced).name == "acme"


def test_the_registry_keeps_a_copy_of_the_builtins_it_was_given(install_backend):
    """As upstream's ``dict(builtins)``: the caller's later edits reach no part of it."""
    install_backend("acme-rt", "acme")
    own = ServeBackend(api_version=1, run=print)
    given = {"mine": own, "lazy": lambda: own}
    registry = ServeBackendRegistry(given)
    given["acme"] = own
    del given["lazy"]
    assert registry["lazy"].backend is own
    assert registry["acme"].backend is not own  # the installed plugin, still
    paired = ServeBackendRegistry([("mine", own)])  # type: ignore[arg-type]
    assert paired.names()[0] == "mine" and "mine" in paired


def test_every_list_argument_may_be_an_iterator_read_once():
    """A generator is a collection of names as a tuple is: read once, nothing lost."""
    own = ServeBackend(api_version=1, run=print)
    registry = ServeBackendRegistry(
        {"mine": own, "other": own},
        enabled=iter(["x"]),
        disabled=iter(["y"]),
        preferred=iter(["other", "mine"]),
    )
    assert registry.preferred == ("other", "mine")
    assert set(registry.inventory.enabled or ()) == {"x"}
    assert set(registry.inventory.disabled) == {"y"}


def test_a_failing_progress_callback_is_logged_never_a_plugins_failure(install_backend, caplog):
    """The host's callback raising must not fail, or blame, the plugin it was told about."""
    install_backend("acme-rt", "acme", detect="return ServeBackendDetection.MATCH")

    def progress(event, label):
        raise ValueError("the host's own bug")

    registry = ServeBackendRegistry()
    report = registry.explain(ServeRequest.from_argv(["m"]), progress=progress)
    assert [o.verdict.value for o in report.outcomes if o.name == "acme"] == ["match"]
    assert report.selected == "acme"
    fresh = ServeBackendRegistry()
    assert fresh.get("acme", progress=progress).distribution == "acme-rt"
    assert fresh.get("acme").distribution == "acme-rt"
    assert "the host's own bug" in caplog.text


def test_settings_are_public_where_configuration_returns_them(install_backend):
    """A host builds the Settings from_settings takes without reaching into internals."""
    from sglang_backends.config import Settings, load_settings

    install_backend("acme-rt", "acme")
    assert isinstance(load_settings(), Settings)
    registry = ServeBackendRegistry.from_settings(Settings(disabled=("acme",)))
    assert "acme" not in registry
