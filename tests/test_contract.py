"""The contract's shapes match upstream's, and the errors its exception types."""

from __future__ import annotations

import dataclasses

import pytest

import sglang_backends
from sglang_backends import (
    RegisteredServeBackend,
    ServeBackend,
    ServeBackendDetection,
    ServeRequest,
    errors,
)
from sglang_backends.contract import coerce_backend, coerce_detection

MISSING = dataclasses.MISSING


def shape(cls: type) -> list[tuple[str, object]]:
    return [(f.name, f.default) for f in dataclasses.fields(cls)]


def test_a_plugin_declaring_upstreams_group_and_version_literally_is_served(site):
    """SGLang's contract, as a plugin spells it: the group, API version 1, and never ``auto``."""
    from sglang_backends import BackendConflictError, ServeBackendRegistry
    from sglang_backends._sglang.builtins import default_builtins

    info = site.install(
        "literal-runtime",
        modules={
            "literal_plugin.py": "from sglang_backends import ServeBackend\n"
            "def factory():\n    return ServeBackend(api_version=1, run=print)\n"
        },
    )
    (info / "entry_points.txt").write_text(
        "[sglang.serve_backends]\nliteral = literal_plugin:factory\nauto = literal_plugin:factory\n"
    )
    with pytest.raises(BackendConflictError, match="auto"):
        ServeBackendRegistry(default_builtins())
    registry = ServeBackendRegistry(default_builtins(), disabled=["auto"])
    assert registry.get("literal").distribution == "literal-runtime"
    assert "auto" not in registry.available_names


def test_detection_answers_are_upstreams_strings():
    """Compared and serialized as the strings SGLang's enum holds."""
    import json

    answers = [ServeBackendDetection(value) for value in ("match", "no_match", "unknown")]
    assert answers == list(ServeBackendDetection)
    assert json.dumps(answers) == '["match", "no_match", "unknown"]'
    assert ServeBackendDetection.MATCH == "match"


@pytest.mark.parametrize(
    ("cls", "fields"),
    [
        (
            ServeRequest,
            [("argv", MISSING), ("model_path", MISSING), ("model_path_is_positional", False)],
        ),
        (
            ServeBackend,
            [
                ("api_version", MISSING),
                ("run", MISSING),
                ("detect", None),
                ("requires_model_path", True),
            ],
        ),
        (RegisteredServeBackend, [("name", MISSING), ("backend", MISSING), ("distribution", None)]),
    ],
)
def test_dataclasses_are_frozen_with_upstream_fields(cls, fields):
    assert dataclasses.is_dataclass(cls)
    assert cls.__dataclass_params__.frozen
    assert shape(cls) == fields


def test_instances_cannot_be_changed_and_compare_by_value():
    request = ServeRequest(argv=("--model-path", "m"), model_path="m")
    assert request == ServeRequest(("--model-path", "m"), "m", False)
    assert hash(request) == hash(ServeRequest(("--model-path", "m"), "m"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.model_path = "other"  # type: ignore[misc]
    backend = ServeBackend(api_version=1, run=print)
    with pytest.raises(dataclasses.FrozenInstanceError):
        backend.detect = print  # type: ignore[misc]


def _load_failure(exc: BaseException) -> errors.BackendLoadError:
    return errors.BackendLoadError(f"Failed to load: {errors.describe_typed(exc)}")


def _refusals():
    """Each refusal the package raises, triggered for real, with the built-in type
    callers caught before it had a root (and SGLang raises in its place)."""
    import sys

    from sglang_backends import ServeBackendRegistry
    from sglang_backends._core.loading import call_plugin_code
    from sglang_backends._serve.argv import parse_host_options
    from sglang_backends._sglang import builtins as host
    from sglang_backends._sglang import installed
    from sglang_backends.testing import assert_backend_contract

    backend = ServeBackend(api_version=1, run=print)
    cases = [
        ("usage", lambda: parse_host_options(["--model-type", ""]), ValueError),
        ("plugin-code", lambda: call_plugin_code(lambda: sys.exit(3), _load_failure), RuntimeError),
        ("reserved", lambda: ServeBackendRegistry({"auto": backend}), ValueError),
        ("timeout", lambda: ServeBackendRegistry({}, load_timeout=0), ValueError),
        ("list-as-string", lambda: ServeBackendRegistry({}, enabled="omni"), TypeError),
        ("unknown", lambda: ServeBackendRegistry({}).get("ghost"), ValueError),
        ("contract", lambda: assert_backend_contract(lambda: None, sglang=False), AssertionError),
    ]
    if not installed.sglang_installed():
        cases.append(("host", lambda: host.run_llm(ServeRequest((), "m")), RuntimeError))
    return [pytest.param(refuse, builtin, id=case) for case, refuse, builtin in cases]


@pytest.mark.parametrize(("refuse", "builtin"), _refusals())
def test_every_refusal_is_ours_and_the_builtin_type_callers_catch(refuse, builtin):
    with pytest.raises(errors.ServeBackendError) as info:
        refuse()
    assert isinstance(info.value, builtin)
    assert "\n" not in str(info.value)


def test_disabled_is_a_sibling_of_unknown():
    assert not issubclass(errors.DisabledBackendError, errors.UnknownBackendError)
    assert issubclass(errors.DisabledBackendError, (errors.ServeBackendError, ValueError))


ERRORS = [
    errors.ServeBackendError("root", name="x", distribution="d"),
    errors.BackendConflictError("conflict", name="llm", distribution="bad-dist"),
    errors.BackendConflictError("dup", name="omni", providers=("a", "b")),
    errors.UnknownBackendError("unknown", name="ghost"),
    errors.DisabledBackendError("disabled", name="off", distribution="off-dist"),
    errors.BackendLoadError("load", name="omni", distribution="omni-runtime"),
    errors.BackendTypeError("type", name="odd", distribution="odd-dist"),
    errors.AmbiguousDetectionError("ambiguous", matches=("a", "b")),
    errors.ConfigurationError("bad option"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_every_error_pickles_with_its_attributes(error):
    import pickle

    exported = {getattr(errors, name) for name in errors.__all__}
    classes = {e for e in exported if isinstance(e, type) and issubclass(e, BaseException)}
    assert {type(e) for e in ERRORS} == classes, "every error is in ERRORS"
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_error_attributes():
    exc = errors.BackendLoadError("boom", name="omni", distribution="omni-runtime")
    assert (str(exc), exc.name, exc.distribution) == ("boom", "omni", "omni-runtime")
    dup = errors.BackendConflictError("dup", name="omni", providers=("a", "b"))
    assert (dup.name, dup.providers, dup.distribution) == ("omni", ("a", "b"), None)
    amb = errors.AmbiguousDetectionError("amb", matches=("a", "b"))
    assert amb.matches == ("a", "b")


def test_every_public_name_resolves():
    for name in sglang_backends.__all__:
        assert getattr(sglang_backends, name) is not None, name
    assert set(sglang_backends.__all__) <= set(dir(sglang_backends))
    assert sglang_backends.ServeBackendError is errors.ServeBackendError
    with pytest.raises(AttributeError, match="no_such_thing"):
        sglang_backends.no_such_thing  # noqa: B018


def test_coerce_backend_keeps_our_objects_and_refuses_others():
    backend = ServeBackend(api_version=1, run=print)
    assert coerce_backend(backend) is backend
    for other in (None, "ServeBackend", {"api_version": 1, "run": print}, object()):
        assert coerce_backend(other) is None


def test_coerce_detection_refuses_plain_strings_and_other_enums():
    import enum

    class Other(str, enum.Enum):
        MATCH = "match"

    assert coerce_detection(ServeBackendDetection.NO_MATCH) is ServeBackendDetection.NO_MATCH
    for other in ("match", None, 1, Other.MATCH):
        assert coerce_detection(other) is None
