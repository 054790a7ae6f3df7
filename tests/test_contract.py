"""The contract's shapes match upstream's, and the errors its exception types."""

from __future__ import annotations

import dataclasses

import pytest

import sglang_backends
from sglang_backends import (
    RESERVED_SERVE_BACKEND_NAMES,
    SERVE_BACKEND_API_VERSION,
    SERVE_BACKENDS_GROUP,
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


def test_constants_match_upstream():
    assert SERVE_BACKENDS_GROUP == "sglang.serve_backends"
    assert SERVE_BACKEND_API_VERSION == 1
    assert RESERVED_SERVE_BACKEND_NAMES == frozenset({"auto"})


def test_detection_is_a_string_enum_with_upstream_values():
    assert issubclass(ServeBackendDetection, str)
    assert [(m.name, m.value) for m in ServeBackendDetection] == [
        ("MATCH", "match"),
        ("NO_MATCH", "no_match"),
        ("UNKNOWN", "unknown"),
    ]
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


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (errors.UnknownBackendError, ValueError),
        (errors.DisabledBackendError, ValueError),
        (errors.ReservedNameError, ValueError),
        (errors.ConfigurationError, ValueError),
        (errors.BackendConflictError, RuntimeError),
        (errors.DuplicateBackendError, RuntimeError),
        (errors.BackendLoadError, RuntimeError),
        (errors.BackendAPIVersionError, RuntimeError),
        (errors.AmbiguousDetectionError, RuntimeError),
        (errors.BackendTypeError, TypeError),
    ],
)
def test_errors_are_both_ours_and_upstreams_builtin_type(cls, builtin):
    assert issubclass(cls, errors.ServeBackendError)
    assert issubclass(cls, builtin)


def test_disabled_is_a_sibling_of_unknown():
    assert not issubclass(errors.DisabledBackendError, errors.UnknownBackendError)
    assert issubclass(errors.DisabledBackendError, (errors.ServeBackendError, ValueError))


ERRORS = [
    errors.ServeBackendError("root", name="x", distribution="d"),
    errors.ReservedNameError("reserved", name="auto"),
    errors.BackendConflictError("conflict", name="llm", distribution="bad-dist"),
    errors.DuplicateBackendError("dup", name="omni", providers=("a", "b")),
    errors.UnknownBackendError("unknown", name="ghost"),
    errors.DisabledBackendError("disabled", name="off", distribution="off-dist"),
    errors.BackendLoadError("load", name="omni", distribution="omni-runtime"),
    errors.BackendTypeError("type", name="odd", distribution="odd-dist"),
    errors.BackendAPIVersionError("version", name="future", distribution="future-dist"),
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
    dup = errors.DuplicateBackendError("dup", name="omni", providers=("a", "b"))
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
