"""The [serve_backends] configuration layer on real files, directories and environments."""

from __future__ import annotations

import logging
import pickle
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from oslo_config import cfg

from sglang_backends import config
from sglang_backends._core.settings import Settings
from sglang_backends._sglang.builtins import default_builtins
from sglang_backends.contract import ServeRequest
from sglang_backends.errors import (
    ConfigurationError,
    DisabledBackendError,
    UnknownBackendError,
)

PLUGIN = """
from sglang_backends import ServeBackend, ServeBackendDetection

def factory():
    \"\"\"The omni runtime.\"\"\"
    return ServeBackend(
        api_version=1,
        run=lambda request: None,
        detect=lambda request: ServeBackendDetection.MATCH
        if (request.model_path or "").endswith("omni")
        else ServeBackendDetection.NO_MATCH,
    )
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def no_configuration_in_the_environment(monkeypatch):
    """The real environment is read: start each test without OS_SERVE_BACKEND* variables."""
    import os

    for key in list(os.environ):
        if key.startswith("OS_SERVE_BACKEND"):
            monkeypatch.delenv(key)


@pytest.fixture
def omni(site):
    site.install(
        "omni-runtime",
        entry_points={"omni": "omni_plugin:factory"},
        modules={"omni_plugin.py": PLUGIN},
    )
    return site


def test_without_any_source_configuration_gives_what_serve_uses_without_it():
    """The fast path (no oslo.config) and configuration agree on every default."""
    read = config.load_settings()
    assert read._replace(located=None) == Settings()
    assert read.located == ()  # configuration was read and set nothing
    assert config.load_settings().set_in("model_type") is None


def test_values_and_where_each_was_set(tmp_path, monkeypatch):
    conf = write(
        tmp_path / "sglang-backends.conf",
        """
        [serve_backends]
        model_type = omni
        enabled_backends = omni, vlm
        disabled_backends = broken
        detect_timeout = 2.5
        """,
    )
    settings = config.load_settings(config_files=[str(conf)])
    assert (settings.model_type, settings.enabled, settings.disabled) == (
        "omni",
        ("omni", "vlm"),
        ("broken",),
    )
    assert (settings.detect_timeout, settings.source) == (2.5, str(conf))
    # The environment beats the files.
    monkeypatch.setenv("OS_SERVE_BACKENDS__MODEL_TYPE", "vlm")
    monkeypatch.setenv("OS_SERVE_BACKENDS__ENABLED_BACKENDS", "vlm,omni")
    settings = config.load_settings(config_files=[str(conf)])
    assert (settings.model_type, settings.enabled, settings.detect_timeout) == (
        "vlm",
        ("vlm", "omni"),
        2.5,
    )
    assert settings.source == (
        f"{conf}, environment variable OS_SERVE_BACKENDS__MODEL_TYPE, "
        "environment variable OS_SERVE_BACKENDS__ENABLED_BACKENDS"
    )
    assert {name: settings.set_in(name) for name in ("model_type", "detect_timeout")} == {
        "model_type": "environment variable OS_SERVE_BACKENDS__MODEL_TYPE",
        "detect_timeout": str(conf),
    }
    assert settings.describe("detect_timeout") == f"[serve_backends] detect_timeout, set in {conf}"
    assert settings.describe("load_timeout") == "[serve_backends] load_timeout (the default)"


def test_files_and_directories_are_read_in_command_line_order(tmp_path):
    first = write(tmp_path / "a.conf", "[serve_backends]\nmodel_type = first\ndetect_timeout = 1\n")
    second = write(tmp_path / "b.conf", "[serve_backends]\nmodel_type = second\n")
    write(tmp_path / "d" / "20-last.conf", "[serve_backends]\ndetect_timeout = 7\n")
    write(tmp_path / "d" / "10-mid.conf", "[serve_backends]\nmodel_type = mid\n")
    write(tmp_path / "d" / "ignored.txt", "[serve_backends]\ndetect_timeout = 99\n")
    args = ["--config-file", str(first), "--config-dir", str(tmp_path / "d")]
    settings = config.load_settings(args=[*args, "--config-file", str(second)])
    assert (settings.model_type, settings.detect_timeout) == ("second", 7)
    assert settings.source.split(", ") == [
        str(first),
        str(tmp_path / "d" / "10-mid.conf"),
        str(tmp_path / "d" / "20-last.conf"),
        str(second),
    ]
    # A file given before a directory loses to it, one after it wins.
    assert config.load_settings(args=args).model_type == "mid"
    assert config.load_settings(args=args[2:] + args[:2]).model_type == "first"


def test_a_large_file_needs_no_temporary_directory(tmp_path, monkeypatch):
    """A read-only root file system (no temporary directory) and a 10 MB file."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    path = tmp_path / "big.conf"
    path.write_text(("#" * 99 + "\n") * 100_000 + "[serve_backends]\nmodel_type = omni\n")
    assert config.load_settings(config_files=[str(path)]).model_type == "omni"


def test_process_environment_is_read_by_default(tmp_path):
    """oslo.config's own environment source, in a fresh interpreter with a real environment."""
    code = (
        "from sglang_backends.config import load_settings; s = load_settings(); "
        "print(s.model_type, s.disabled, s.detect_timeout)"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "OS_SERVE_BACKENDS__MODEL_TYPE": "omni",
        "OS_SERVE_BACKENDS__DISABLED_BACKENDS": "a,b",
        "OS_SERVE_BACKENDS__DETECT_TIMEOUT": "4",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["omni", "('a',", "'b')", "4.0"]


@pytest.mark.parametrize(
    ("text", "option", "cause"),
    [
        ("detect_timeout = -1", "detect_timeout", "must be a number of seconds from 0.001 "),
        ("detect_timeout = 0", "detect_timeout", "must be a number of seconds from 0.001 "),
        ("stop_timeout = -1", "stop_timeout", "must be a number of seconds from 0 "),
        ("load_timeout =", "load_timeout", "must be a number of seconds from 0.001 "),
        ("load_timeout = nan", "load_timeout", "must be a number of seconds from 0.001 "),
        ("stop_timeout = nan", "stop_timeout", "must be a number of seconds from 0 "),
        ("detect_timeout = abc", "detect_timeout", "must be a number of seconds from 0.001 "),
        ("model_type =", "model_type", ": an empty backend name"),
        ("model_type = ${nope}", "model_type", "no such option nope"),
        ("enabled_backends = a,,b", "enabled_backends", ": an empty backend name"),
        ("preferred_backends = ,a", "preferred_backends", ": an empty backend name"),
        (
            "disabled_backends = old  # broken",
            "disabled_backends",
            "'old  # broken' is not one backend name: names are separated by commas, and a "
            "configuration file has no comments at the end of a line",
        ),
    ],
)
def test_invalid_file_value_names_file_and_option(tmp_path, text, option, cause):
    conf = write(tmp_path / "bad.conf", f"[serve_backends]\n{text}\n")
    with pytest.raises(ConfigurationError) as info:
        config.load_settings(config_files=[str(conf)])
    message = str(info.value)
    assert "\n" not in message
    assert f"[serve_backends] {option}" in message
    assert str(conf) in message
    assert cause in message


def test_invalid_environment_value_names_the_variable(tmp_path, monkeypatch):
    conf = write(tmp_path / "ok.conf", "[serve_backends]\ndetect_timeout = 3\n")
    monkeypatch.setenv("OS_SERVE_BACKENDS__DETECT_TIMEOUT", "soon")
    with pytest.raises(ConfigurationError, match="OS_SERVE_BACKENDS__DETECT_TIMEOUT") as info:
        config.load_settings(config_files=[str(conf)])
    assert "[serve_backends] detect_timeout" in str(info.value)
    assert "'soon'" in str(info.value)


@pytest.mark.parametrize(
    ("make", "kind", "expected"),
    [
        (lambda p: {"config_files": [str(p / "missing.conf")]}, "file", "not found"),
        (lambda p: {"config_dirs": [str(p / "nowhere")]}, "dir", "directory not found"),
        (lambda p: {"config_files": [str(p)]}, "file", "is a directory"),
        (
            lambda p: {"config_files": [str(write(p / "b.conf", "[serve_backends\n"))]},
            "file",
            "Cannot parse",
        ),
        (lambda p: {"config_files": [str(p / "bin.conf")]}, "file", "not utf-8 text"),
        (lambda p: {"config_files": ["/dev/zero"]}, "file", "/dev/zero is not a regular file"),
        (lambda p: {"config_dirs": [str(p / "links")]}, "dir", "file not found: "),
    ],
)
def test_missing_or_unreadable_sources_are_configuration_errors(tmp_path, make, kind, expected):
    (tmp_path / "bin.conf").write_bytes(b"[serve_backends]\nmodel_type = \xff\xfe\n")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "gone.conf").symlink_to(tmp_path / "nowhere.conf")
    with pytest.raises(ConfigurationError) as info:
        config.load_settings(**make(tmp_path))
    assert expected in str(info.value)
    assert str(tmp_path) in str(info.value) or "/dev/zero" in str(info.value)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"config_files": "a.conf"}, "config_files must be a sequence of paths, not a string"),
        ({"config_dirs": "conf.d"}, "config_dirs must be a sequence of paths, not a string"),
        (
            {"args": "--config-file a.conf"},
            "args must be --config-file PATH and --config-dir DIR pairs, "
            "got '--config-file a.conf'",
        ),
        (
            {"args": ["--config-file"]},
            "args must be --config-file PATH and --config-dir DIR pairs, got ['--config-file']",
        ),
        (
            {"args": ["--config-file=a.conf"]},
            "args must be --config-file PATH and --config-dir DIR pairs, "
            "got ['--config-file=a.conf']",
        ),
        (
            {"args": ["--bogus", "a.conf"]},
            "args must be --config-file PATH and --config-dir DIR pairs, got ['--bogus', 'a.conf']",
        ),
    ],
)
def test_sources_given_in_the_wrong_shape_are_one_configuration_error(given, expected):
    """Not a problem per letter of a string, nor a bare ValueError from zip()."""
    with pytest.raises(ConfigurationError) as info:
        config.load_settings(**given)
    assert str(info.value) == expected


def test_loading_is_reentrant_and_leaves_the_global_conf_alone(tmp_path):
    one = write(tmp_path / "1.conf", "[serve_backends]\nmodel_type = one\n")
    two = write(tmp_path / "2.conf", "[serve_backends]\nmodel_type = two\n")
    assert config.load_settings(config_files=[str(one)]).model_type == "one"
    assert config.load_settings(config_files=[str(two)]).model_type == "two"
    assert config.load_settings(config_files=[str(one)]).model_type == "one"
    assert "serve_backends" not in cfg.CONF


def test_stop_timeout_accepts_zero_and_its_deprecated_variable(tmp_path, monkeypatch, caplog):
    zero = write(tmp_path / "zero.conf", "[serve_backends]\nstop_timeout = 0\n")
    assert config.load_settings(config_files=[str(zero)]).stop_timeout == 0.0
    monkeypatch.setenv("SGLANG_BACKENDS_STOP_TIMEOUT", "3")
    settings = config.load_settings(config_files=[str(zero)])
    assert settings.stop_timeout == 3.0
    assert settings.set_in("stop_timeout") == "environment variable SGLANG_BACKENDS_STOP_TIMEOUT"
    assert [r.getMessage() for r in caplog.records] == [
        "SGLANG_BACKENDS_STOP_TIMEOUT is deprecated; set OS_SERVE_BACKENDS__STOP_TIMEOUT instead"
    ]
    monkeypatch.setenv("OS_SERVE_BACKENDS__STOP_TIMEOUT", "12.5")
    monkeypatch.setenv("SGLANG_BACKENDS_STOP_TIMEOUT", "not even a number")
    caplog.clear()
    settings = config.load_settings()  # the old variable is not read: not even checked
    assert settings.stop_timeout == 12.5
    assert "SGLANG_BACKENDS_STOP_TIMEOUT" not in settings.source
    assert [r.getMessage() for r in caplog.records] == [
        "SGLANG_BACKENDS_STOP_TIMEOUT is ignored: OS_SERVE_BACKENDS__STOP_TIMEOUT is set"
    ]


def test_oslo_config_generator_prints_a_sample(tmp_path):
    generator = Path(sys.executable).with_name("oslo-config-generator")
    out = tmp_path / "sample.conf"
    subprocess.run(
        [str(generator), "--namespace", "sglang_backends", "--output-file", str(out)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    sample = out.read_text()
    assert "[serve_backends]" in sample
    [(_, opts)] = config.list_opts()
    for opt in opts:  # each option, with its help and its default
        assert f"#{opt.dest} = {opt.sample_default or opt.default or ''}".strip() in sample
        assert opt.help.split()[0] in sample
    # The generated sample is itself a valid configuration.
    assert config.load_settings(config_files=[str(out)]).model_type == "auto"


def service_conf(tmp_path, text: str) -> cfg.ConfigOpts:
    """A ConfigOpts as an embedding service would build it."""
    conf = cfg.ConfigOpts()
    config.register_opts(conf)
    path = write(tmp_path / "service.conf", text)
    conf(args=["--config-file", str(path)], default_config_files=[])
    return conf


def test_select_backend_honours_model_type(omni, tmp_path):
    conf = service_conf(tmp_path, "[serve_backends]\nmodel_type = omni\n")
    selected = config.select_backend(conf, ServeRequest(argv=(), model_path="/m"))
    assert (selected.name, selected.distribution) == ("omni", "omni-runtime")


@pytest.mark.parametrize(
    ("conf_text", "refusal"),
    [
        ("model_type = omnni\n", UnknownBackendError),
        ("model_type = omni\ndisabled_backends = omni\n", DisabledBackendError),
    ],
)
def test_select_backend_says_which_file_set_a_model_type_it_refuses(
    omni, tmp_path, conf_text, refusal
):
    """As serve says it: the operator of a service must know which file to correct."""
    conf = service_conf(tmp_path, "[serve_backends]\n" + conf_text)
    with pytest.raises(refusal) as info:
        config.select_backend(conf, ServeRequest(argv=(), model_path="/m"))
    path = tmp_path / "service.conf"
    assert str(info.value).endswith(
        f"It was set by [serve_backends] model_type in {path}; correct it there."
    ), info.value  # a service has no --model-type to give instead


@pytest.mark.parametrize("call", ["set_override", "set_default"])
def test_select_backend_says_a_service_set_a_model_type_it_refuses(omni, call):
    """oslo.config locates a service's own override nowhere: the line names the call."""
    conf = cfg.ConfigOpts()
    config.register_opts(conf)
    conf([])
    getattr(conf, call)("model_type", "omnni", "serve_backends")
    with pytest.raises(UnknownBackendError) as info:
        config.select_backend(conf, ServeRequest(argv=(), model_path="/m"))
    assert str(info.value).endswith(
        f"It was set by [serve_backends] model_type in the service's {call}(); correct it there."
    ), info.value
    assert config.settings_from_conf(conf).located == (("model_type", f"the service's {call}()"),)


def test_select_backend_auto_runs_detection(omni, tmp_path):
    conf = service_conf(tmp_path, "[serve_backends]\nmodel_type = auto\n")
    request = ServeRequest(argv=("--model-path", "/models/omni"), model_path="/models/omni")
    assert config.select_backend(conf, request).name == "omni"
    other = ServeRequest(argv=("--model-path", "/models/llama"), model_path="/models/llama")
    assert config.select_backend(conf, other).name == "llm"


def test_registry_from_conf_honours_lists_and_timeout(omni, tmp_path, preinstalled):
    conf = service_conf(
        tmp_path,
        "[serve_backends]\ndisabled_backends = omni\ndetect_timeout = 0.5\nload_timeout = 7\n",
    )
    registry = config.registry_from_conf(conf, default_builtins())
    assert registry.available_names == ("llm", "diffusion", *preinstalled)
    assert (registry.detect_timeout, registry.load_timeout) == (0.5, 7.0)
    with pytest.raises(DisabledBackendError, match="disabled"):
        config.select_backend(
            service_conf(
                tmp_path, "[serve_backends]\nmodel_type = omni\ndisabled_backends = omni\n"
            ),
            ServeRequest(argv=(), model_path="/m"),
        )


def test_service_conf_invalid_value_names_file_and_option(tmp_path):
    conf = service_conf(tmp_path, "[serve_backends]\ndetect_timeout = -3\n")
    with pytest.raises(ConfigurationError, match=r"\[serve_backends\] detect_timeout") as info:
        config.registry_from_conf(conf)
    assert str(tmp_path / "service.conf") in str(info.value)


def test_not_installed_list_names_warn_with_the_option(omni, tmp_path, registry_warnings):
    conf = service_conf(tmp_path, "[serve_backends]\nenabled_backends = omni, ghost\n")
    registry = config.registry_from_conf(conf)
    assert registry.available_names == ("llm", "diffusion", "omni")
    [record] = [r for r in registry_warnings.records if "ghost" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "[serve_backends] enabled_backends" in record.getMessage()
    assert str(tmp_path / "service.conf") in record.getMessage()


@pytest.mark.parametrize(
    ("text", "phrases"),
    [
        (
            "[serve_backends]\nmodel_typ = echo\n",
            ["unknown option 'model_typ' in [serve_backends]", "did you mean 'model_type'?"],
        ),
        (
            "[serve_backend]\nmodel_type = echo\n",
            ["unknown group [serve_backend]", "did you mean 'serve_backends'?"],
        ),
        (
            "[DEFAULT]\nmodel_type = echo\n",
            ["option 'model_type' in [DEFAULT]", "it belongs in [serve_backends]"],
        ),
    ],
)
def test_misspelt_names_in_a_file_are_warnings_naming_file_and_fix(tmp_path, caplog, text, phrases):
    caplog.set_level(logging.WARNING, logger="sglang_backends.config")
    path = write(tmp_path / "typo.conf", text)
    settings = config.load_settings(config_files=[str(path)])
    assert settings.model_type == "auto"  # ignored, as oslo.config does, but not silently
    [record] = caplog.records
    message = record.getMessage()
    assert "\n" not in message
    assert str(path) in message
    for phrase in phrases:
        assert phrase in message


def test_misspelt_variable_is_a_warning_naming_the_variable(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="sglang_backends.config")
    monkeypatch.setenv("OS_SERVE_BACKENDS__MODEL_TYP", "echo")
    monkeypatch.setenv("OS_SERVE_BACKEND__DETECT_TIMEOUT", "3")
    assert config.load_settings().model_type == "auto"
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    [typo] = [m for m in messages if "variable OS_SERVE_BACKENDS__MODEL_TYP;" in m]
    assert "did you mean 'OS_SERVE_BACKENDS__MODEL_TYPE'?" in typo
    [prefix] = [m for m in messages if "OS_SERVE_BACKEND__DETECT_TIMEOUT" in m]
    assert "did you mean 'OS_SERVE_BACKENDS__DETECT_TIMEOUT'?" in prefix


def test_known_names_and_folded_group_case_are_not_warned_about(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="sglang_backends.config")
    monkeypatch.setenv("OS_SERVE_BACKENDS__DETECT_TIMEOUT", "3")
    path = write(tmp_path / "ok.conf", "[DEFAULT]\n[Serve_Backends]\nmodel_type = omni\n")
    assert config.load_settings(config_files=[str(path)]).model_type == "omni"
    assert caplog.records == []


def test_oslo_config_validator_checks_a_file_against_the_namespace(tmp_path):
    """What the operator guide tells operators to run before deploying a file."""
    validator = Path(sys.executable).with_name("oslo-config-validator")
    good = write(tmp_path / "good.conf", "[serve_backends]\nmodel_type = omni\n")
    bad = write(tmp_path / "bad.conf", "[serve_backends]\nmodel_typ = omni\n")
    command = [str(validator), "--namespace", "sglang_backends", "--input-file"]
    ok = subprocess.run([*command, str(good)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    failed = subprocess.run([*command, str(bad)], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1
    assert "serve_backends/model_typ is not part of the sample config" in failed.stderr


def test_config_uses_no_private_oslo_config_name():
    source = Path(config.__file__).read_text(encoding="utf-8")
    for private in ("_environment", "_NoValue", "_env_driver", "oslo_config.sources"):
        assert private not in source
    assert not re.search(r"\b(cfg|types)\._", source)


def test_settings_say_where_each_option_was_set_as_plain_values(tmp_path, monkeypatch):
    conf = write(tmp_path / "a.conf", "[serve_backends]\nmodel_type = echo\n")
    monkeypatch.setenv("OS_SERVE_BACKENDS__LOAD_TIMEOUT", "7")
    settings = config.load_settings(config_files=[str(conf)])
    assert settings.located == (
        ("model_type", str(conf)),
        ("load_timeout", "environment variable OS_SERVE_BACKENDS__LOAD_TIMEOUT"),
    )
    assert settings == Settings(**settings._asdict())  # values only: it compares and pickles
    assert pickle.loads(pickle.dumps(settings)) == settings
    assert f"located=(('model_type', '{conf}')" in repr(settings)


def test_service_conf_invalid_value_in_a_directory_names_its_file(tmp_path):
    write(tmp_path / "d" / "10-a.conf", "[serve_backends]\ndetect_timeout = 2\n")
    bad = write(tmp_path / "d" / "20-b.conf", "[serve_backends]\ndetect_timeout = -3\n")
    conf = cfg.ConfigOpts()
    config.register_opts(conf)
    conf(args=["--config-dir", str(tmp_path / "d")], default_config_files=[])
    with pytest.raises(ConfigurationError) as info:
        config.settings_from_conf(conf)
    assert f"Invalid value '-3' for option [serve_backends] detect_timeout in {bad}: " in str(
        info.value
    )


def test_a_service_override_naming_nothing_is_refused_with_the_option(tmp_path):
    conf = service_conf(tmp_path, "")
    conf.set_override("model_type", "$nope", "serve_backends")
    with pytest.raises(ConfigurationError) as info:
        config.settings_from_conf(conf)
    message = str(info.value)
    assert message.startswith(
        "Invalid value for option [serve_backends] model_type in configuration: "
    )
    assert "nope" in message


@pytest.mark.parametrize(
    ("given", "what"), [("config_dirs", "directory"), ("config_files", "file")]
)
def test_an_empty_path_is_not_found_as_oslo_config_finds_none(tmp_path, monkeypatch, given, what):
    """Never the working directory, whose own ``*.conf`` files would then be read."""
    write(tmp_path / "stray.conf", "[serve_backends]\nmodel_type = stray\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as info:
        config.load_settings(**{given: [""]})
    assert str(info.value) == f"Configuration {what} not found: ''"


def test_each_option_is_said_to_be_set_in_the_file_that_sets_it(tmp_path):
    """Not in the last file holding the group (oslo.config's location), nor at its default
    when the group is spelt in capitals (which oslo.config reads)."""
    conf_d = tmp_path / "conf.d"
    model = write(conf_d / "10-model.conf", "[serve_backends]\nmodel_type = omni\n")
    timeouts = write(conf_d / "20-timeouts.conf", "[serve_backends]\ndetect_timeout = 5\n")
    shouted = write(tmp_path / "shouted.conf", "[SERVE_BACKENDS]\nload_timeout = 7\n")
    settings = config.load_settings(config_dirs=[str(conf_d)], config_files=[str(shouted)])
    assert (settings.model_type, settings.detect_timeout, settings.load_timeout) == ("omni", 5, 7)
    assert {name: settings.set_in(name) for name in ("model_type", "detect_timeout")} == {
        "model_type": str(model),
        "detect_timeout": str(timeouts),
    }
    assert settings.describe("load_timeout") == f"[serve_backends] load_timeout, set in {shouted}"


def test_a_conf_not_ready_is_told_which_step_it_lacks():
    """oslo.config's own error names an option (``config_file``), not the step left out."""
    conf = cfg.ConfigOpts()
    with pytest.raises(ConfigurationError, match=r"register_opts\(conf\) first"):
        config.registry_from_conf(conf)
    config.register_opts(conf)
    with pytest.raises(ConfigurationError, match=r"call it, conf\(args\), first"):
        config.select_backend(conf, ServeRequest(argv=(), model_path="/m"))
    conf(args=[])
    assert "llm" in config.registry_from_conf(conf)
