"""SGLang's argument rules: host options out, positional model in, the rest untouched."""

from __future__ import annotations

import pytest

from sglang_backends._core.names import wants_help
from sglang_backends._serve.argv import (
    model_path_from,
    parse_host_options,
)
from sglang_backends.contract import ServeRequest
from sglang_backends.errors import ConfigurationError


def test_upstream_example():
    host = parse_host_options(
        ["org/model", "--model-type", "my_runtime", "--pipeline-parallel", "2"]
    )
    assert host.model_type == "my_runtime"
    assert ServeRequest.from_argv(host.argv) == ServeRequest(
        argv=("--model-path", "org/model", "--pipeline-parallel", "2"),
        model_path="org/model",
        model_path_is_positional=True,
    )


@pytest.mark.parametrize(
    ("argv", "model_type", "rest"),
    [
        (["--model-type=x", "--port", "1"], "x", ("--port", "1")),
        (["--port", "1", "--model-type", "x"], "x", ("--port", "1")),
        (["--model-type", "a", "--model-type=b"], "b", ()),
        (["--model-type", "dist-one:x"], "dist-one:x", ()),
        (["--port", "1"], None, ("--port", "1")),
        (["--model-typeX", "y"], None, ("--model-typeX", "y")),
    ],
)
def test_model_type_is_removed(argv, model_type, rest):
    host = parse_host_options(argv)
    assert (host.model_type, host.argv) == (model_type, rest)


def test_leading_serve_options_are_taken_in_order():
    host = parse_host_options(
        [
            "--config-file",
            "a.conf",
            "--debug",
            "--model-type",
            "x",
            "--config-dir=d",
            "--config-file=b.conf",
            "m",
            "--port",
            "1",
        ]
    )
    # Files and directories interleaved as given: oslo.config reads them in this order.
    assert host.config_args == (
        "--config-file",
        "a.conf",
        "--config-dir",
        "d",
        "--config-file",
        "b.conf",
    )
    assert host.debug is True
    assert host.model_type == "x"
    assert host.argv == ("m", "--port", "1")
    # Host options before the model do not hide it.
    assert ServeRequest.from_argv(host.argv).model_path_is_positional is True


@pytest.mark.parametrize(
    "argv",
    [
        # After the model, or after the first backend argument, they are the backend's.
        ["m", "--debug", "--config-file", "x.yaml", "--config-dir=d"],
        ["--tp", "2", "--debug", "--config-file=x.yaml"],
        ["--model-path", "m", "--config-dir", "d", "--debug"],
    ],
)
def test_serve_options_after_the_first_backend_argument_are_the_backends(argv):
    host = parse_host_options(argv)
    assert (host.config_args, host.debug) == ((), False)
    assert host.argv == tuple(argv)


def test_model_type_is_removed_from_anywhere_and_keeps_the_leading_run():
    host = parse_host_options(["--model-type=x", "--debug", "m", "--debug", "--model-type", "y"])
    assert (host.model_type, host.debug) == ("y", True)
    assert host.argv == ("m", "--debug")


@pytest.mark.parametrize(
    "argv",
    [
        ["--model-type=", "m", "--model-type=y"],
        ["--model-type", "", "--model-type", "y", "m"],
        ["--model-type=org/model", "m", "--model-type=y"],
    ],
)
def test_only_the_model_type_that_wins_must_be_given_as_upstream_reads_it(argv):
    """Upstream keeps the last value and checks it alone; an earlier slip, corrected by a
    later ``--model-type``, is not an error."""
    host = parse_host_options(argv)
    assert (host.model_type, host.argv) == ("y", ("m",))


@pytest.mark.parametrize("name", ["org/model", "a b", "-x", "my\\runtime"])
def test_any_model_type_but_empty_is_the_registrys_to_know_as_upstream_defers_it(name):
    """Plugins decide which names exist: a name with a slash or a space is looked up too."""
    assert parse_host_options(["m", f"--model-type={name}"]).model_type == name


@pytest.mark.parametrize("name", ["-x", "--port", "--help", "--model-type=y"])
def test_model_type_takes_the_next_argument_whatever_it_is_as_upstream(name):
    """Upstream's ``--model-type V`` takes V unread: an option-like name is a backend's too."""
    host = parse_host_options(["m", "--model-type", name, "--tp", "2"])
    assert (host.model_type, host.argv) == (name, ("m", "--tp", "2"))


@pytest.mark.parametrize(
    ("argv", "phrase"),
    [
        (["--model-type"], "--model-type expects a value"),
        (["--model-type="], "empty value"),
        (["--model-type", ""], "empty value"),
        (["--config-file"], "--config-file expects a value"),
        (["--config-dir="], "--config-dir expects a value"),
    ],
)
def test_bad_host_options_are_usage_errors(argv, phrase):
    with pytest.raises(ConfigurationError, match=phrase):
        parse_host_options(argv)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--model-path", "a", "--model", "b"], "a"),
        (["--model=b", "--model-path=a"], "b"),
        (["--port", "1", "--model-path=a"], "a"),
        (["--model-path"], None),
        (["--port", "1"], None),
        (["--model-pathX", "a"], None),
    ],
)
def test_model_path_first_wins(argv, expected):
    assert model_path_from(argv) == expected


def test_option_first_is_not_positional():
    request = ServeRequest.from_argv(["--model", "m", "--port", "1"])
    assert request == ServeRequest(argv=("--model", "m", "--port", "1"), model_path="m")


def test_empty_argv():
    assert ServeRequest.from_argv([]) == ServeRequest(argv=(), model_path=None)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [(["-h"], True), (["m", "--help"], True), (["--helpful"], False), ([], False)],
)
def test_help_anywhere(argv, expected):
    assert wants_help(argv) is expected
