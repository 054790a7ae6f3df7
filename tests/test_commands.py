"""The operator console script as a whole: help, errors, configuration and precedence."""

from __future__ import annotations

import json
import re

import pytest
from clitools import imported_by, run_cli

GOOD = """
from sglang_backends import ServeBackend

def factory():
    return ServeBackend(api_version=1, run=lambda request: None)
"""


def selected(status: str) -> str:
    """*status* as the selection sees it: a built-in waiting for SGLang is still selected.

    (test_show.py checks that status itself.)
    """
    return "enabled" if status.startswith("needs SGLang (") else status


def statuses(result) -> dict[str, str]:
    assert result.returncode == 0, result.stderr
    return {row["Name"]: selected(row["Status"]) for row in json.loads(result.stdout)}


@pytest.fixture
def plugins(site):
    for name in ("omni", "vlm", "tts"):
        site.install(
            f"{name}-runtime",
            entry_points={name: f"{name}_plugin:factory"},
            modules={f"{name}_plugin.py": GOOD},
        )
    return site


def test_without_a_command_prints_help(site):
    result = run_cli(site)
    assert result.returncode == 1
    for command in ("list", "show", "check", "detect"):
        assert command in result.stdout


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("list", ["Status", "conflicts with a built-in", "--config-file", "--enable"]),
        ("show", ["NAME", "DIST:NAME", "API version", "--config-dir"]),
        ("check", ["--timeout", "--jobs", "crashed", "Exit status"]),
        ("detect", ["[MODEL] [ARGS ...]", "--detect-timeout", "ambiguous", "fallback"]),
    ],
)
def test_each_command_explains_itself(site, command, words):
    result = run_cli(site, command, "--help")
    assert result.returncode == 0, result.stderr
    for word in words:
        assert word in result.stdout
    assert "OS_SERVE_BACKENDS__" in result.stdout


def test_unknown_command_is_rejected(site):
    result = run_cli(site, "lsit")
    assert result.returncode == 2
    assert "list" in result.stdout


@pytest.mark.parametrize("command", [["list"], ["show", "llm"], ["check"], ["detect", "/m"]])
def test_bad_configuration_is_one_line_and_exit_2(site, tmp_path, command):
    conf = tmp_path / "bad.conf"
    conf.write_text("[serve_backends]\ndetect_timeout = -1\n")
    result = run_cli(site, command[0], "--config-file", str(conf), *command[1:])
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "[serve_backends] detect_timeout" in line
    assert str(conf) in line
    assert result.stdout == ""


def test_missing_configuration_file_is_exit_2(site, tmp_path):
    result = run_cli(site, "list", "--config-file", str(tmp_path / "nope.conf"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"Configuration file not found: {tmp_path / 'nope.conf'}"


def test_invalid_environment_value_is_exit_2(site):
    result = run_cli(site, "list", env={"OS_SERVE_BACKENDS__DETECT_TIMEOUT": "abc"})
    assert result.returncode == 2
    assert "OS_SERVE_BACKENDS__DETECT_TIMEOUT" in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_adds_the_traceback(site, tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("[serve_backends]\ndetect_timeout = zero\n")
    quiet = run_cli(site, "list", "--config-file", str(conf))
    loud = run_cli(site, "--debug", "list", "--config-file", str(conf))
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in loud.stderr
    assert loud.returncode == quiet.returncode == 2


def test_configuration_file_and_directory_select_plugins(plugins, tmp_path, preinstalled):
    conf = tmp_path / "sglang-backends.conf"
    conf.write_text("[serve_backends]\nenabled_backends = omni, vlm\n")
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "50-deny.conf").write_text("[serve_backends]\ndisabled_backends = vlm\n")
    result = run_cli(
        plugins,
        "list",
        "-f",
        "json",
        "--config-file",
        str(conf),
        "--config-dir",
        str(tmp_path / "conf.d"),
    )
    assert statuses(result) == {
        "llm": "enabled",
        "diffusion": "enabled",
        "omni": "enabled",
        "vlm": "disabled",
        "tts": "disabled",
        **dict.fromkeys(preinstalled, "disabled"),
    }


def test_precedence_command_line_then_environment_then_file(plugins, tmp_path):
    conf = tmp_path / "x.conf"
    conf.write_text("[serve_backends]\nenabled_backends = omni\n")
    from_file = statuses(run_cli(plugins, "list", "-f", "json", "--config-file", str(conf)))
    assert [n for n, s in from_file.items() if s == "enabled"] == ["llm", "diffusion", "omni"]

    env = {"OS_SERVE_BACKENDS__ENABLED_BACKENDS": "vlm"}
    from_env = statuses(run_cli(plugins, "list", "-f", "json", "--config-file", str(conf), env=env))
    assert [n for n, s in from_env.items() if s == "enabled"] == ["llm", "diffusion", "vlm"]

    from_cli = statuses(
        run_cli(
            plugins, "list", "-f", "json", "--config-file", str(conf), "--enable", "tts", env=env
        )
    )
    assert [n for n, s in from_cli.items() if s == "enabled"] == ["llm", "diffusion", "tts"]


def test_not_installed_names_warn_naming_option_and_file(plugins, tmp_path):
    conf = tmp_path / "x.conf"
    conf.write_text("[serve_backends]\nenabled_backends = omni, ghost\ndisabled_backends = spook\n")
    for command in (["list"], ["show", "omni"], ["check"], ["detect", "/m"]):
        result = run_cli(plugins, command[0], "--config-file", str(conf), *command[1:])
        # check is a deployment gate: an enabled plugin that is not installed fails it.
        assert result.returncode == (1 if command == ["check"] else 0), result.stderr
        [ghost] = [line for line in result.stderr.splitlines() if "'ghost'" in line]
        assert "enabled_backends" in ghost and str(conf) in ghost and "not installed" in ghost
        [spook] = [line for line in result.stderr.splitlines() if "'spook'" in line]
        assert "disabled_backends" in spook and str(conf) in spook


def test_not_installed_name_from_the_command_line_says_so(plugins):
    result = run_cli(plugins, "list", "--disable", "ghost")
    assert result.returncode == 0
    assert "'ghost'" in result.stderr and "--disable on the command line" in result.stderr


def test_formatters_and_columns_work(plugins, preinstalled):
    result = run_cli(plugins, "list", "-f", "value", "-c", "Name", "-c", "Status")
    assert result.returncode == 0, result.stderr
    plugin_names = sorted({"omni", "tts", "vlm", *preinstalled})
    assert [
        " ".join((name, selected(status)))
        for name, status in (line.split(" ", 1) for line in result.stdout.splitlines())
    ] == [f"{name} enabled" for name in ("llm", "diffusion", *plugin_names)]
    as_yaml = run_cli(plugins, "list", "-f", "yaml", "-c", "Name")
    assert "- Name: omni" in as_yaml.stdout
    as_csv = run_cli(plugins, "list", "-f", "csv", "-c", "Name", "-c", "Distribution")
    assert '"omni","omni-runtime"' in as_csv.stdout


def test_commands_package_imports_no_cliff_until_main():
    loaded, out = imported_by("import sglang_backends._operators.commands", ("cliff",))
    assert out.returncode == 0, out.stderr
    assert loaded == []


def test_check_warns_about_a_plugin_installing_an_sglang_command(site, install_backend):
    """SGLang reserves the ``sglang`` executable: a plugin installing one replaces SGLang's CLI."""
    install_backend("greedy-runtime", "greedy")
    install_backend("polite-runtime", "polite")
    info = site.path / "greedy_runtime-1.0.dist-info"
    with open(info / "entry_points.txt", "a", encoding="utf-8") as stream:
        stream.write("[console_scripts]\nsglang = greedy_cli:main\ngreedy = greedy_cli:main\n")
    result = run_cli(site, "check", "-f", "value", "-c", "Name", "-c", "Result")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "console script" in line]
    assert len(warnings) == 1, result.stderr
    assert "Distribution greedy-runtime (serve backend 'greedy')" in warnings[0]
    assert "named 'sglang' (greedy_cli:main)" in warnings[0]
    assert "polite" not in result.stderr


def test_top_level_help_lists_every_command_once_serve_included(site):
    result = run_cli(site, "--help")
    assert result.returncode == 0, result.stderr
    listed = result.stdout.split("\nCommands:\n", 1)[1].splitlines()
    names = [line.split()[0] for line in listed if line.startswith("  ")]
    assert sorted(names) == ["check", "complete", "detect", "help", "list", "serve", "show"]
    for name in ("serve", "list", "show", "check", "detect"):
        # Named once as a command: the description does not list them again.
        assert len(re.findall(rf"^  {name} ", result.stdout, re.M)) == 1, name
    bare = run_cli(site)
    assert bare.stdout.count("Commands") == 1
    assert "serve" in bare.stdout.split("Commands", 1)[1]


def test_the_app_runs_the_commands_setup_cfg_registers(site):
    """Documented from the entry-point group, run from the app's own table: the same."""
    from importlib import metadata

    from sglang_backends._operators.app import COMMANDS

    group = metadata.entry_points(group="sglang_backends.commands")
    assert {ep.name: ep.value for ep in group} == COMMANDS
    for name in COMMANDS:
        assert run_cli(site, name, "--help").returncode == 0
