"""One owner per rule: serve's options are declared once, a timeout is checked once.

Each declaration is read everywhere it matters, checked by behaviour: what
``serve --help`` and the commands' help show, what serve's parsing takes,
what detect calls misplaced.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest
from clitools import run_cli

import sglang_backends
from sglang_backends import ServeBackendRegistry
from sglang_backends._core.names import wants_help
from sglang_backends._operators.commands.detect import DetectBackend
from sglang_backends._serve.argv import (
    CONFIG_DIR,
    CONFIG_FILE,
    HELP,
    MODEL_TYPE,
    SERVE_OPTIONS,
    parse_host_options,
)
from sglang_backends.errors import ConfigurationError


def _words(text: str) -> str:
    return " ".join(text.split())


def test_serve_help_shows_each_declared_option_as_declared(site):
    result = run_cli(site, "serve", "--help")
    assert result.returncode == 0, result.stderr
    shown = _words(result.stdout)
    for option in SERVE_OPTIONS:
        # the flags with their value (--model-type shows the backend names instead)
        metavar = "{auto," if option is MODEL_TYPE else option.metavar
        assert _words(", ".join(f"{f} {metavar}" if metavar else f for f in option.flags)) in shown
        assert _words(option.help) in shown


def test_the_commands_take_the_configuration_options_serve_declares(site):
    result = run_cli(site, "list", "--help")
    assert result.returncode == 0, result.stderr
    shown = _words(result.stdout)
    for option in (CONFIG_FILE, CONFIG_DIR):
        assert f"{option.flags[0]} {option.metavar} {_words(option.help)}" in shown


def test_serve_takes_each_declared_option_as_declared():
    for option in SERVE_OPTIONS:
        for flag in option.flags:
            given = [flag, "v"] if option.metavar else [flag]
            if option is HELP:
                assert wants_help(["m", *given]), flag
                continue
            leading = parse_host_options([*given, "m", "--tp", "2"])
            assert leading.argv == ("m", "--tp", "2"), flag
            later = parse_host_options(["m", *given])  # the backend's, unless taken anywhere
            assert later.argv == (("m",) if option.anywhere else ("m", *given)), flag
            if option in (CONFIG_FILE, CONFIG_DIR):  # each use adds a value
                twice = parse_host_options([*given, *given, "m"])
                assert twice.config_args == (flag, "v", flag, "v"), flag


def test_detect_calls_its_configuration_options_after_the_model_misplaced():
    parser = DetectBackend(None, None).get_parser("detect")
    args = ["/m", "--tp", "2"]
    for option in (CONFIG_FILE, CONFIG_DIR):
        args += [option.flags[0], "X", f"{option.flags[0]}=Y"]
    args += [flag for flag in HELP.flags]
    parsed = parser.parse_args(args)
    expected = [[o.flags[0], "X"] for o in (CONFIG_FILE, CONFIG_DIR)]
    expected.insert(1, [f"{CONFIG_FILE.flags[0]}=Y"])
    expected.append([f"{CONFIG_DIR.flags[0]}=Y"])
    assert parsed.misplaced == expected
    # detect's help is the request's after the model; its own options before it are its own
    assert parsed.request[-2:] == list(HELP.flags)
    leading = parser.parse_args([CONFIG_FILE.flags[0], "X", "-f", "json", "/m", "--tp", "2"])
    assert leading.config_args == [CONFIG_FILE.flags[0], "X"] and leading.formatter == "json"
    assert leading.request == ["--", "/m", "--tp", "2"] and leading.misplaced == []


def _argparse_privates() -> set[str]:
    """Every private name of argparse's parser, group, action and namespace objects."""
    parser = argparse.ArgumentParser()
    group = parser.add_argument_group("g")
    action = parser.add_argument("--x")
    names: set[str] = set()
    for thing in (parser, group, action, argparse.Namespace(), argparse.HelpFormatter("p")):
        names.update(dir(thing))
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_no_private_name_of_argparse_is_read_anywhere():
    """Overriding a documented method by name (usage's ``_split_lines``) reads nothing."""
    privates = _argparse_privates()
    assert "_option_string_actions" in privates and "_actions" in privates
    package = Path(sglang_backends.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in privates:
                found.append(f"{path.relative_to(package)}:{node.lineno}: {node.attr}")
    assert found == []


#: What the inner layer may import of the package: itself, the contract and the errors.
INNER = ("sglang_backends._core", "sglang_backends.contract", "sglang_backends.errors")


@pytest.mark.parametrize(
    ("layer", "inner"), [("_core", INNER), ("_sglang", (*INNER, "sglang_backends._sglang"))]
)
def test_a_layer_imports_no_outer_layer(layer, inner):
    """``_core``, then SGLang as host, import inward only, in functions too: configuration,
    serve, the commands, the registry and the kit import them, never the other way round."""
    package = Path(sglang_backends.__file__).parent
    found = []
    for path in sorted((package / layer).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = (
                    [node.module]
                    if node.module != "sglang_backends"
                    else [f"sglang_backends.{alias.name}" for alias in node.names]
                )
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [
                f"{path.name}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] == "sglang_backends" and not name.startswith(inner)
            ]
    assert found == []


RULE = "must be a number of seconds from 0.001 to 1e+09"


@pytest.mark.parametrize("value", ["0", "1e10", "nan"])
def test_a_timeout_out_of_range_is_refused_in_the_same_words_everywhere(site, tmp_path, value):
    with pytest.raises(ConfigurationError) as info:
        ServeBackendRegistry(detect_timeout=float(value))
    assert str(info.value) == f"Invalid value {float(value)!r} for detect_timeout: {RULE}"

    for command, flag in (("detect", "--detect-timeout"), ("check", "--timeout")):
        flagged = run_cli(site, command, flag, value, "m")
        assert flagged.returncode == 2, flagged.stderr
        assert f"argument {flag}: invalid value '{value}': {RULE}" in flagged.stderr

    conf = tmp_path / "timeout.conf"
    conf.write_text(f"[serve_backends]\ndetect_timeout = {value}\n")
    configured = run_cli(site, "list", "--config-file", str(conf))
    assert configured.returncode == 2, configured.stderr
    where = f"[serve_backends] detect_timeout in {conf}"
    assert f"Invalid value '{value}' for option {where}: {RULE}" in configured.stderr
    assert "Traceback" not in flagged.stderr + configured.stderr
