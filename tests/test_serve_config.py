"""``serve`` driven by configuration: files, directories and ``OS_SERVE_BACKENDS__*``."""

from __future__ import annotations

import subprocess
import sys

import pytest
from clitools import CLI, clean_environ, run_cli
from servetools import RECORDER, read_json, run_serve


@pytest.fixture
def recorder(site, tmp_path):
    """Two recording plugins installed; returns (environ, record file)."""
    site.install(
        "recorder-dist",
        entry_points={"recorder": "recorder_plugin:recorder", "other": "recorder_plugin:recorder"},
        modules={"recorder_plugin.py": RECORDER},
    )
    record = tmp_path / "record.json"
    env = site.environ()
    env["SERVE_RECORD"] = str(record)
    return env, record


def conf(tmp_path, body: str, name: str = "serve.conf"):
    path = tmp_path / name
    path.write_text("[serve_backends]\n" + body)
    return path


def serve_with_environment(args, env):
    """Run serve keeping the ``OS_SERVE_BACKENDS__*`` variables (run_serve drops them)."""
    return subprocess.run(
        [sys.executable, "-m", "sglang_backends", "serve", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_model_type_from_a_configuration_file(recorder, tmp_path):
    env, record = recorder
    path = conf(tmp_path, "model_type = recorder\n")
    result = run_serve(["--config-file", str(path), "org/model", "--tp", "2"], env)
    assert result.returncode == 0, result.stderr
    assert (
        "Using serve backend 'recorder' (from recorder-dist), set by [serve_backends] "
        f"model_type in {path}"
    ) in result.stderr  # which file chose it, as the operator must know to change it
    assert read_json(record)["argv"] == ["--model-path", "org/model", "--tp", "2"]


def test_model_type_in_a_file_takes_any_name_an_entry_point_may_have(site, tmp_path):
    """As --model-type: a name with a space (or a comma) is the registry's to know."""
    site.install(
        "spaced-dist",
        entry_points={"my model": "recorder_plugin:recorder"},
        modules={"recorder_plugin.py": RECORDER},
    )
    env = {**site.environ(), "SERVE_RECORD": str(tmp_path / "record.json")}
    path = conf(tmp_path, "model_type = my model\n")
    result = run_serve(["--config-file", str(path), "org/model"], env)
    assert result.returncode == 0, result.stderr
    assert "Using serve backend 'my model'" in result.stderr


def test_command_line_model_type_beats_configuration(recorder, tmp_path):
    env, _ = recorder
    path = conf(tmp_path, "model_type = recorder\n")
    result = run_serve([f"--config-file={path}", "m", "--model-type", "other"], env)
    assert result.returncode == 0, result.stderr
    assert "Using serve backend 'other'" in result.stderr


def test_model_type_from_the_environment_and_from_a_directory(recorder, tmp_path):
    env, _ = recorder
    confdir = tmp_path / "serve.d"
    confdir.mkdir()
    conf(confdir, "model_type = other\n", name="10-model.conf")
    from_dir = run_serve(["--config-dir", str(confdir), "m"], env)
    assert "Using serve backend 'other'" in from_dir.stderr, from_dir.stderr
    from_env = serve_with_environment(["m"], {**env, "OS_SERVE_BACKENDS__MODEL_TYPE": "recorder"})
    assert from_env.returncode == 0, from_env.stderr
    assert "Using serve backend 'recorder'" in from_env.stderr


def test_an_option_set_twice_in_a_file_is_one_warning_naming_the_value_read(
    recorder, site, tmp_path
):
    env, _ = recorder
    path = conf(tmp_path, "model_type = recorder\nmodel_type = other\n")
    warning = (
        f"Option 'model_type' is set 2 times in [serve_backends] of {path}; "
        "the last, 'other', overrides the others"
    )
    served = run_serve(["--config-file", str(path), "m"], env)
    assert served.returncode == 0, served.stderr
    assert [line for line in served.stderr.splitlines() if " times in " in line] == [warning]
    assert "Using serve backend 'other'" in served.stderr  # the one oslo.config reads
    listed = run_cli(site, "list", "--config-file", str(path))
    assert listed.returncode == 0, listed.stderr
    assert [line for line in listed.stderr.splitlines() if " times in " in line] == [warning]
    # Once in each of two files is a later file winning, as documented: no warning.
    first = conf(tmp_path, "model_type = recorder\n", name="first.conf")
    later = conf(tmp_path, "model_type = other\n", name="later.conf")
    both = run_serve(["--config-file", str(first), "--config-file", str(later), "m"], env)
    assert both.returncode == 0, both.stderr
    assert " times in " not in both.stderr


def test_disabled_backend_is_refused_and_never_run(recorder, tmp_path):
    env, record = recorder
    path = conf(tmp_path, "disabled_backends = recorder\n")
    result = run_serve(["--config-file", str(path), "m", "--model-type", "recorder"], env)
    assert result.returncode == 1
    [line] = result.error_lines
    assert "'recorder' from recorder-dist is disabled" in line
    assert not record.exists()


def test_enabled_list_narrows_the_choices_in_auto_help(recorder, tmp_path):
    env, _ = recorder
    path = conf(tmp_path, "enabled_backends = other\n")
    result = run_serve(["--config-file", str(path), "--help"], env)
    assert result.returncode == 0, result.stderr
    usage = result.stdout.splitlines()[0]
    assert ",other}" in usage and "recorder" not in usage
    [listed] = [line for line in result.stdout.splitlines() if line.strip().startswith("recorder")]
    assert listed.endswith("(disabled)")


def test_typo_in_a_list_warns_naming_option_and_file(recorder, tmp_path):
    env, _ = recorder
    path = conf(tmp_path, "disabled_backends = recoder\n")
    result = run_serve(["--config-file", str(path), "m", "--model-type", "recorder"], env)
    assert result.returncode == 0, result.stderr
    [warning] = [line for line in result.stderr.splitlines() if "'recoder'" in line]
    assert "not installed" in warning
    assert "disabled_backends" in warning and str(path) in warning


def test_files_and_directories_are_read_in_command_line_order(recorder, tmp_path):
    env, _ = recorder
    confdir = tmp_path / "serve.d"
    confdir.mkdir()
    conf(confdir, "model_type = other\n", name="10-model.conf")
    path = conf(tmp_path, "model_type = recorder\n")
    file_last = run_serve(["--config-dir", str(confdir), "--config-file", str(path), "m"], env)
    assert "Using serve backend 'recorder'" in file_last.stderr, file_last.stderr
    dir_last = run_serve(["--config-file", str(path), "--config-dir", str(confdir), "m"], env)
    assert "Using serve backend 'other'" in dir_last.stderr, dir_last.stderr


def run_cli_env(env, *args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], env=clean_environ(env), cwd=cwd, capture_output=True, text=True, timeout=60
    )


def _one_error(result, *phrases: str) -> None:
    """Exit status 2 and one error line holding every phrase, no traceback."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    for phrase in phrases:
        assert phrase in line, line


@pytest.mark.parametrize("command", [["serve", "m"], ["list"], ["show", "recorder"]])
def test_an_unresolvable_substitution_is_one_line_naming_option_and_file(
    recorder, tmp_path, command
):
    env, record = recorder
    path = conf(tmp_path, "model_type = ${nope}\n")
    result = run_cli_env(env, command[0], "--config-file", str(path), *command[1:])
    _one_error(result, "[serve_backends] model_type", str(path), "nope")
    assert not record.exists()


@pytest.mark.parametrize("command", [["serve", "m"], ["list"], ["check"]])
def test_a_relative_file_in_a_deleted_working_directory_is_one_line(recorder, tmp_path, command):
    env, record = recorder
    gone = tmp_path / "gone"
    gone.mkdir()
    conf(gone, "model_type = recorder\n")
    script = 'cd "$1" && rm -r "$1" && shift && exec "$@"'
    args = [CLI, command[0], "--config-file", "serve.conf", *command[1:]]
    result = subprocess.run(
        ["sh", "-c", script, "sh", str(gone), *args],
        env=clean_environ(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    _one_error(result, "Configuration file not found: serve.conf")
    assert not record.exists()


@pytest.mark.parametrize("command", [["serve", "m"], ["list"]])
def test_configuration_needs_no_temporary_directory(recorder, tmp_path, command):
    """A read-only root file system: no temporary directory can be made."""
    env, _ = recorder
    path = conf(tmp_path, "model_type = recorder\n")
    env = {**env, "TMPDIR": str(tmp_path / "no-such-dir")}
    code = (
        "import sys, tempfile; tempfile.tempdir = sys.argv[1]\n"
        "from sglang_backends._cli import main; raise SystemExit(main(sys.argv[2:]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "no-such-dir"), command[0],
         "--config-file", str(path), *command[1:]],
        env=clean_environ(env), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_a_large_mostly_comment_file_is_read(recorder, tmp_path):
    env, _ = recorder
    path = tmp_path / "big.conf"
    path.write_text(
        ("# " + "x" * 98 + "\n") * 100_000 + "[serve_backends]\nmodel_type = recorder\n"
    )
    assert path.stat().st_size > 10_000_000
    result = run_serve(["--config-file", str(path), "m"], env)
    assert result.returncode == 0, result.stderr
    assert "Using serve backend 'recorder'" in result.stderr


def test_the_old_stop_timeout_variable_works_with_a_deprecation_warning(recorder, tmp_path):
    env, _ = recorder
    path = conf(tmp_path, "stop_timeout = 7\n")
    old = {**env, "SGLANG_BACKENDS_STOP_TIMEOUT": "1e10"}
    refused = run_serve(["--config-file", str(path), "m", "--model-type", "recorder"], old)
    assert refused.returncode == 2, refused.stderr
    [warning] = [line for line in refused.stderr.splitlines() if "deprecated" in line]
    assert "SGLANG_BACKENDS_STOP_TIMEOUT is deprecated" in warning
    assert "OS_SERVE_BACKENDS__STOP_TIMEOUT" in warning
    [line] = refused.error_lines
    assert "'1e10' for option [serve_backends] stop_timeout in environment variable" in line
    assert "SGLANG_BACKENDS_STOP_TIMEOUT: must be a number of seconds from 0 to 1e+09" in line
    # The one name wins over the old one.
    both = {**old, "OS_SERVE_BACKENDS__STOP_TIMEOUT": "2"}
    served = serve_with_environment(
        ["--config-file", str(path), "m", "--model-type", "recorder"], both
    )
    assert served.returncode == 0, served.stderr
    assert "SGLANG_BACKENDS_STOP_TIMEOUT is ignored: OS_SERVE_BACKENDS__STOP_TIMEOUT is set" in (
        served.stderr
    )


@pytest.mark.parametrize("command", [["serve", "m"], ["list"], ["check"], ["detect", "m"]])
def test_every_configuration_problem_is_reported_in_one_pass(recorder, tmp_path, command):
    env, record = recorder
    bad = conf(tmp_path, "stop_timeout = -1\ndetect_timeout = soon\nmodel_type = recordr\n")
    missing = tmp_path / "missing.conf"
    args = ["--config-file", str(bad), "--config-file", str(missing)]
    result = subprocess.run(
        [CLI, command[0], *args, *command[1:]],
        env={**clean_environ(env), "OS_SERVE_BACKENDS__LOAD_TIMEOUT": "0"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 5, lines
    for problem in ("stop_timeout", "detect_timeout", "load_timeout"):
        [line] = [line for line in lines if f"[serve_backends] {problem}" in line]
        where = "OS_SERVE_BACKENDS__LOAD_TIMEOUT" if problem == "load_timeout" else str(bad)
        assert where in line, line
    assert any(f"not found: {missing}" in line for line in lines), lines
    [typo] = [line for line in lines if "'recordr'" in line]
    assert "did you mean 'recorder'?" in typo and str(bad) in typo
    assert not record.exists()
    assert result.stdout == ""
