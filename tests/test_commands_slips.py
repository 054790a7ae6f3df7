"""Operator slips on the real console script: each is one line naming what, where and the fix."""

from __future__ import annotations

import json
import subprocess

import pytest
from clitools import CLI, run_cli
from servetools import run_serve

GOOD = """
from sglang_backends import ServeBackend

def factory():
    \"\"\"A well-behaved runtime.\"\"\"
    return ServeBackend(api_version=1, run=lambda request: None)
"""


@pytest.fixture
def omni(site):
    site.install(
        "omni-runtime",
        entry_points={"omni": "omni_plugin:factory"},
        modules={"omni_plugin.py": GOOD},
    )
    return site


def conf(tmp_path, body: str):
    path = tmp_path / "sglang-backends.conf"
    path.write_text(body)
    return path


def names(result) -> list[str]:
    assert result.returncode == 0, result.stderr
    return [row["Name"] for row in json.loads(result.stdout)]


# -- configuration -------------------------------------------------------------


def test_global_options_may_come_before_the_command(omni, tmp_path):
    path = conf(tmp_path, "[serve_backends]\ndisabled_backends = omni\n")
    before = run_cli(omni, "--config-file", str(path), "list", "-f", "json")
    after = run_cli(omni, "list", "-f", "json", "--config-file", str(path))
    for result in (before, after):
        assert result.returncode == 0, result.stderr
        statuses = {r["Name"]: r["Status"] for r in json.loads(result.stdout)}
        assert statuses["omni"] == "disabled"
    confdir = tmp_path / "conf.d"
    confdir.mkdir()
    (confdir / "10.conf").write_text("[serve_backends]\ndisabled_backends = omni\n")
    from_dir = run_cli(omni, "--config-dir", str(confdir), "list", "-f", "json")
    assert {r["Name"]: r["Status"] for r in json.loads(from_dir.stdout)}["omni"] == "disabled"


@pytest.mark.parametrize(
    ("body", "phrase"),
    [
        ("[serve_backends]\nmodel_typ = omni\n", "did you mean 'model_type'?"),
        ("[serve_backend]\nmodel_type = omni\n", "did you mean 'serve_backends'?"),
        # oslo.config reads option names as written: capitals are a misspelling too.
        ("[serve_backends]\nMODEL_TYPE = omni\n", "did you mean 'model_type'?"),
    ],
)
def test_misspelt_file_names_warn_in_commands_and_serve(omni, tmp_path, body, phrase):
    path = conf(tmp_path, body)
    listed = run_cli(omni, "list", "--config-file", str(path))
    assert listed.returncode == 0, listed.stderr
    [line] = [line for line in listed.stderr.splitlines() if "Ignoring" in line]
    assert phrase in line and str(path) in line
    served = run_serve(["--config-file", str(path), "--help"], omni.environ())
    assert served.returncode == 0, served.stderr
    [line] = [line for line in served.stderr.splitlines() if "Ignoring" in line]
    assert phrase in line and str(path) in line


def test_misspelt_variable_warns_in_serve(omni):
    env = {**omni.environ(), "OS_SERVE_BACKENDS__MODEL_TYP": "omni"}
    served = subprocess.run(
        [CLI, "serve", "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert served.returncode == 0, served.stderr
    [line] = [line for line in served.stderr.splitlines() if "MODEL_TYP" in line]
    assert "did you mean 'OS_SERVE_BACKENDS__MODEL_TYPE'?" in line


def test_unknown_model_type_in_a_file_names_file_and_option(omni, tmp_path):
    path = conf(tmp_path, "[serve_backends]\nmodel_type = ehco\n")
    served = run_serve(["--config-file", str(path), "m"], omni.environ())
    assert served.returncode == 2
    [line] = served.error_lines
    assert "Unknown serve backend 'ehco'" in line
    assert f"[serve_backends] model_type in {path}" in line
    assert "Traceback" not in served.stderr
    listed = run_cli(omni, "list", "--config-file", str(path))
    assert listed.returncode == 0, listed.stderr
    [line] = [line for line in listed.stderr.splitlines() if "'ehco'" in line]
    assert f"[serve_backends] model_type, set in {path}" in line
    assert "Available values: auto, llm, diffusion" in line


def test_a_misspelt_model_type_names_the_file_that_sets_it_not_a_later_one(omni, tmp_path):
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    (conf_d / "10-model.conf").write_text("[serve_backends]\nmodel_type = ehco\n")
    (conf_d / "20-timeouts.conf").write_text("[serve_backends]\ndetect_timeout = 5\n")
    served = run_serve(["--config-dir", str(conf_d), "m"], omni.environ())
    assert served.returncode == 2
    [line] = served.error_lines
    assert f"[serve_backends] model_type in {conf_d / '10-model.conf'}; correct it" in line
    listed = run_cli(omni, "list", "--config-dir", str(conf_d))
    [line] = [line for line in listed.stderr.splitlines() if "'ehco'" in line]
    assert f"[serve_backends] model_type, set in {conf_d / '10-model.conf'})" in line


def test_command_line_model_type_errors_stay_as_sglang_words_them(omni, tmp_path):
    path = conf(tmp_path, "[serve_backends]\nmodel_type = ehco\n")
    for args in (["m"], ["--config-file", str(path), "m"]):
        served = run_serve([*args, "--model-type", "ehco"], omni.environ())
        assert served.returncode == 2
        [line] = served.error_lines
        assert "Unknown serve backend 'ehco'" in line
        assert "Available values: auto, llm" in line
        assert "model_type in" not in line


@pytest.mark.parametrize("flag", ["--enable", "--disable"])
def test_empty_name_among_others_is_refused_like_the_option(omni, flag):
    result = run_cli(omni, "list", flag, "omni,,vlm")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert f"{flag} 'omni,,vlm' on the command line holds an empty backend name" in line


@pytest.mark.parametrize("flag", ["--enable", "--disable"])
@pytest.mark.parametrize("value", ["omni,", "omni, other ,", ",", " ", ",omni"])
def test_the_flags_read_a_value_as_the_option_reads_it(omni, tmp_path, flag, value):
    """A trailing comma or a blank value is what enabled_backends makes of it, not a slip."""
    option = "enabled_backends" if flag == "--enable" else "disabled_backends"
    path = conf(tmp_path, f"[serve_backends]\n{option} = {value}\n")
    configured = run_cli(omni, "list", "-f", "json", "--config-file", str(path))
    flagged = run_cli(omni, "list", "-f", "json", flag, value)
    assert flagged.returncode == configured.returncode, flagged.stderr + configured.stderr
    if configured.returncode == 0:
        assert json.loads(flagged.stdout) == json.loads(configured.stdout)
    else:
        assert "holds an empty backend name" in flagged.stderr


def test_empty_value_alone_is_an_empty_list(omni, tmp_path, preinstalled):
    path = conf(tmp_path, "[serve_backends]\nenabled_backends = nothing\n")
    result = run_cli(omni, "list", "-f", "json", "--config-file", str(path), "--enable", "")
    assert result.returncode == 0, result.stderr
    assert {r["Name"]: r["Status"] for r in json.loads(result.stdout)}["omni"] == "enabled"


def test_a_built_in_in_a_list_is_a_warning(omni):
    result = run_cli(omni, "list", "--disable", "llm")
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "'llm'" in line]
    assert "changes nothing" in line and "--disable on the command line" in line


def test_a_built_in_in_a_configured_list_is_a_warning_in_serve_too(omni, tmp_path):
    path = conf(tmp_path, "[serve_backends]\ndisabled_backends = llm\n")
    served = run_serve(["--config-file", str(path), "m", "--model-type", "omni"], omni.environ())
    assert served.returncode == 0, served.stderr
    [line] = [line for line in served.stderr.splitlines() if "'llm'" in line]
    assert "changes nothing" in line and str(path) in line


# -- commands ------------------------------------------------------------------


def test_help_serve_prints_the_serve_help(omni):
    result = run_cli(omni, "help", "serve")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: sglang-backends serve")
    assert "omni       from omni-runtime 1.0" in result.stdout


@pytest.mark.parametrize(
    "where", ["before", "after", "environment", "missing file"]
)  # fmt: skip
def test_help_serve_is_serve_help_under_the_same_configuration(omni, tmp_path, where):
    """The same lines, the same warnings, the same status: one help, not two."""
    conf = tmp_path / "d.conf"
    conf.write_text("[serve_backends]\ndisabled_backends = omni, zzz\n", encoding="utf-8")
    given = ["--config-file", str(tmp_path / "nope.conf" if where == "missing file" else conf)]
    env = {"OS_SERVE_BACKENDS__DISABLED_BACKENDS": "omni, zzz"} if where == "environment" else {}
    before, after = (given, []) if where in ("before", "missing file") else ([], given)
    if where == "environment":
        before = []
    helped = run_cli(omni, *before, "help", "serve", *after, env=env)
    served = run_cli(omni, *before, "serve", *after, "--help", env=env)
    assert (helped.returncode, helped.stdout, helped.stderr) == (
        served.returncode,
        served.stdout,
        served.stderr,
    )
    if where == "missing file":
        assert helped.returncode == 2
    else:
        assert "omni       from omni-runtime 1.0 (disabled)" in helped.stdout
        assert "'zzz' in the disabled list is not installed" in helped.stderr


def test_a_plugin_named_auto_is_said_to_claim_the_reserved_name(omni):
    """auto is no built-in but serve's request for detection: the warning says so."""
    omni.install("auto-impostor", entry_points={"auto": "omni_plugin:factory"})
    result = run_cli(omni, "list")
    [line] = [line for line in result.stderr.splitlines() if "auto-impostor" in line]
    assert "claims the reserved name 'auto'; every serve fails" in line


@pytest.mark.parametrize("dist", ["x; rm -rf $HOME", "torch sglang"])
def test_the_uninstall_advice_never_offers_a_command_that_does_something_else(omni, dist):
    """A distribution name pip would not take is not pasted into a command line: ``pip
    uninstall torch sglang`` would remove two other distributions."""
    omni.install(dist, entry_points={"llm": "omni_plugin:factory"})
    result = run_cli(omni, "list")
    [line] = [line for line in result.stderr.splitlines() if "claims the built-in" in line]
    assert "pip uninstall" not in line
    assert f"uninstall it (by hand: pip takes no distribution named {dist!r})" in line


def test_a_plugin_claiming_a_built_in_name_does_not_break_serve_help(omni):
    omni.install(
        "llm-impostor",
        version="6.6",
        entry_points={"llm": "omni_plugin:factory"},
    )
    for result in (run_serve(["--help"], omni.environ()), run_cli(omni, "help", "serve")):
        assert result.returncode == 0, result.stderr
        assert "usage: sglang-backends serve" in result.stdout
        assert "(conflicts with a built-in)" in result.stdout
        [line] = [line for line in result.stderr.splitlines() if "llm-impostor" in line]
        assert "claims the built-in name 'llm'" in line
        assert "pip uninstall llm-impostor" in line and "disabled_backends" in line
    served = run_serve(["m"], omni.environ())
    assert served.returncode == 1
    assert "cannot replace reserved or built-in backends" in served.error_lines[0]


@pytest.mark.parametrize(
    "command", [["list"], ["show", "omni"], ["check"], ["detect", "/m"], ["help", "list"]]
)
def test_a_malformed_unrelated_distribution_breaks_no_command(omni, command):
    info = omni.path / "unrelated-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: unrelated\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nthis line has no equals sign\n")
    result = run_cli(omni, *command)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # The broken distribution is named, once.
    assert len([line for line in result.stderr.splitlines() if "unrelated" in line]) == 1
    assert "omni" in result.stdout


@pytest.mark.parametrize(
    ("argv", "config", "rest"),
    [
        (["--config-file", "F", "list"], ["--config-file", "F"], ["list"]),
        (["--config-dir=D", "-v", "check", "x"], ["--config-dir", "D"], ["check", "x"]),
        (
            ["--config-dir", "D", "--config-file", "F", "list"],
            ["--config-dir", "D", "--config-file", "F"],
            ["list"],
        ),
        (
            ["--log-file", "L", "--config-file", "F", "detect", "/m", "--config-file", "G"],
            ["--config-file", "F"],
            ["detect", "/m", "--config-file", "G"],
        ),
        (["list", "--config-file", "F"], [], ["list", "--config-file", "F"]),
        (["--log-file", "L", "serve", "m"], [], ["serve", "m"]),
    ],
)
def test_configuration_options_are_global_before_the_command_name_only(argv, config, rest):
    from sglang_backends._operators.app import OperatorApp

    options, remainder = OperatorApp().parser.parse_known_args(argv)
    assert (options.config_args, remainder) == (config, rest)


@pytest.mark.parametrize(
    "argv",
    [
        ["-vv", "detect", "m", "--tp", "2", "--debug"],
        ["--log-file", "L", "list", "-q", "--enable", "x"],
        ["detect", "m", "--log-file=L", "--", "-v", "--debug"],
        ["detect", "-f", "json", "m", "-x", "--y=1", "z", "-v", "-vx", "--verbose"],
        ["check", "--log-file"],
        ["check", "--log-file", "-v"],
        ["list", "-qv", "-1", "-", "--debug=x", "--log-file=", "--version"],
    ],
)
def test_global_options_are_read_as_cliffs_own_parser_reads_them(argv):
    from cliff.app import App

    from sglang_backends._operators.app import OperatorApp
    from sglang_backends._operators.commands.base import add_config_options

    app = OperatorApp()
    plain = App.build_option_parser(app, "d", "1", {"allow_abbrev": False})
    add_config_options(plain, documented=False)  # the global options cliff's parser lacks

    def outcome(parser):
        try:
            namespace, rest = parser.parse_known_args(argv)
        except SystemExit as exc:
            return exc.code
        return vars(namespace), rest

    assert outcome(app.parser) == outcome(plain)


def test_global_configuration_reaches_detect_before_its_request(omni, tmp_path):
    path = conf(tmp_path, "[serve_backends]\ndisabled_backends = omni\n")
    result = run_cli(omni, "--config-file", str(path), "detect", "-f", "json", "/models/x")
    assert result.returncode == 0, result.stderr
    assert "omni" not in [row["Backend"] for row in json.loads(result.stdout)]


def test_control_characters_in_warnings_are_escaped(site):
    site.install("evil-runtime", entry_points={"evil\x1b[2J": "evil_plugin:factory"})
    result = run_cli(site, "list", "--enable", "ghost")
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "ghost" in line]
    assert "\x1b" not in result.stderr
    assert "evil\\x1b[2J" in line


def test_commands_use_no_argparse_cliff_or_python_internals_but_the_documented_ones():
    """Each remaining private use is one line, explained by the comment above it."""
    import re
    from pathlib import Path

    import sglang_backends._operators as package

    private = re.compile(r"\.(_[a-z][a-z_]*)\b|\b(cliff\._\w+|__class__)\b")
    paths = sorted(Path(package.__file__).parent.rglob("*.py"))
    sources = {path.name: path.read_text() for path in paths}
    # Our own private names (functions, methods, modules, the package's private layers)
    # are ours to use, and public ones with an underscore: os._exit, _replace.
    layers = {p.name for p in Path(package.__file__).parent.parent.iterdir()}
    ours = {path.stem for path in paths} | {"_exit", "_replace"} | layers
    for text in sources.values():
        ours.update(re.findall(r"def (_\w+)", text))
        ours.update(re.findall(r"self\.(_\w+)(?:: [^=]+)? = ", text))
    found = {}
    for name, text in sources.items():
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#")[0]
            if code.lstrip().startswith(("from ", "import ", '"', "`")):
                continue
            for match in private.finditer(code):
                used = match.group(1) or match.group(2)
                if used not in ours:
                    found[(name, used)] = number
    assert set(found) == {
        ("worker.py", "_xoptions"),  # -X frozen_modules, which sys.flags does not give
    }
    # The formatter hook is overridden by name (a def), not reached into.
    base = Path(package.__file__).parent / "commands" / "base.py"
    assert "def _load_formatter_plugins" in base.read_text()


def test_configuration_before_serve_reaches_serve(omni, tmp_path):
    path = conf(tmp_path, "[serve_backends]\nmodel_type = ehco\n")
    result = run_cli(omni, "--config-file", str(path), "serve", "/models/x")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert f"It was set by [serve_backends] model_type in {path}" in line


@pytest.mark.parametrize("given", [["-q"], ["-v"], ["--log-file", "serve.log"], ["--bogus"]])
def test_an_operator_option_before_serve_is_refused_not_dropped(omni, tmp_path, given):
    """serve logs as it does whatever cliff's options say: taking them in silence would
    leave a --log-file never written, and a -q that quiets nothing."""
    given = [str(tmp_path / arg) if arg.endswith(".log") else arg for arg in given]
    result = run_cli(omni, *given, "serve", "/models/x", "--model-type", "omni")
    assert result.returncode == 2
    assert result.stderr == (
        f"sglang-backends serve: error: {given[0]} is not an option of serve; before serve, "
        "only --debug, --config-file and --config-dir are taken\n"
    )
    assert not (tmp_path / "serve.log").exists()


def test_help_and_version_before_serve_answer_and_serve_nothing(omni):
    """``-h serve ARGS`` is ``serve ARGS --help``; ``--version serve`` is the version."""
    helped = run_cli(omni, "-h", "serve", "/models/x")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout == run_cli(omni, "serve", "--help").stdout
    assert "--model-type {auto,llm,diffusion," in helped.stdout
    version = run_cli(omni, "--version", "serve", "/models/x", "--model-type", "omni")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("sglang-backends ")
    assert "serve backend" not in helped.stderr + version.stderr


def test_serve_help_escapes_control_characters_in_metadata(site):
    site.install("evil\x1b]0;x\x07-runtime", version="1\x1b[2J", entry_points={"evil": "m:f"})
    result = run_serve(["--help"], site.environ())
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "from evil\\x1b]0;x\\x07-runtime 1\\x1b[2J" in result.stdout


# -- names: did you mean, and one exit status ------------------------------------


def test_a_mistyped_backend_name_gets_the_closest_name_and_status_2_everywhere(omni, tmp_path):
    """serve, show and check answer a slip alike; the other commands warn about it."""
    served = run_serve(["m", "--model-type", "omin"], omni.environ())
    shown = run_cli(omni, "show", "omin")
    checked = run_cli(omni, "check", "omin", "dfiffusion")
    for result, lines in (
        (served, served.error_lines),
        (shown, shown.stderr.strip().splitlines()),
        (checked, checked.stderr.strip().splitlines()),
    ):
        assert result.returncode == 2, result.stderr
        [line] = lines
        assert "'omin'; did you mean 'omni'?" in line
        assert "Traceback" not in result.stderr
    path = conf(tmp_path, "[serve_backends]\nmodel_type = omin\n")
    listed = run_cli(omni, "list", "--config-file", str(path), "--disable", "omin")
    assert listed.returncode == 0, listed.stderr
    warned = [line for line in listed.stderr.splitlines() if "'omin'" in line]
    assert len(warned) == 2, listed.stderr  # model_type, and the disabled list
    assert all("did you mean 'omni'?" in line for line in warned)


def test_a_name_close_to_a_disabled_plugin_names_it_and_why(omni, tmp_path):
    """--model-type omin with omni disabled: the suggestion says omni exists and where it is off."""
    path = conf(tmp_path, "[serve_backends]\ndisabled_backends = omni\n")
    served = run_serve(["--config-file", str(path), "m", "--model-type", "omin"], omni.environ())
    shown = run_cli(omni, "show", "--enable", "llm", "omin")
    for result, lines, why in (
        (
            served,
            served.error_lines,
            f"is disabled by [serve_backends] disabled_backends, set in {path}",
        ),
        (
            shown,
            shown.stderr.strip().splitlines(),
            "is not enabled by --enable on the command line",
        ),
    ):
        assert result.returncode == 2, result.stderr
        [line] = [line for line in lines if "'omin'" in line]
        assert (
            f"'omin'; did you mean 'omni'? It is installed (from omni-runtime) but {why}, "
            "so it is not available."
        ) in line


def test_a_mistyped_distribution_in_dist_name_gets_the_closest_dist_name(omni):
    served = run_serve(["m", "--model-type", "omni-runtme:omni"], omni.environ())
    assert served.returncode == 2, served.stderr
    [line] = served.error_lines
    assert "'omni-runtme:omni'; did you mean 'omni-runtime:omni'?" in line


def test_the_disabled_backend_error_names_where_the_list_was_set(omni, tmp_path):
    path = conf(tmp_path, "[serve_backends]\ndisabled_backends = omni\n")
    served = run_serve(["--config-file", str(path), "m", "--model-type", "omni"], omni.environ())
    assert served.returncode == 1, served.stderr
    assert served.error_lines == [
        "sglang-backends serve: error: Serve backend 'omni' from omni-runtime is disabled by "
        f"[serve_backends] disabled_backends, set in {path}; remove it from that list to use it."
    ]


def test_a_name_close_to_none_gets_no_suggestion():
    from sglang_backends.errors import did_you_mean

    assert did_you_mean("dfiffusion", ["auto", "llm", "diffusion"]) == "; did you mean 'diffusion'?"
    assert did_you_mean("zzzzzz", ["auto", "llm", "diffusion"]) == "."


def test_a_name_in_other_case_is_offered_the_name_but_a_name_never_itself(site, install_backend):
    from sglang_backends.errors import did_you_mean

    assert did_you_mean("ECHO", ["auto", "echo"]) == "; did you mean 'echo'?"
    assert did_you_mean("auto", ["auto", "llm"]) == "."  # refused as it is: no fix to offer
    install_backend("omni-runtime", "omni")
    served = run_serve(["m", "--model-type", "OMNI"], site.environ())
    assert "Unknown serve backend 'OMNI'; did you mean 'omni'?" in served.stderr, served.stderr


ARGV_RECORDER = """
import argparse
from sglang_backends import ServeBackend

def run(request):
    parser = argparse.ArgumentParser(prog="strict")
    parser.add_argument("--model-path")
    parser.add_argument("--port")
    parser.parse_args(list(request.argv))

def factory():
    return ServeBackend(api_version=1, run=run)
"""


def test_serves_own_options_after_the_model_get_the_corrected_command(site):
    site.install(
        "strict-runtime",
        entry_points={"strict": "strict_plugin:factory"},
        modules={"strict_plugin.py": ARGV_RECORDER},
    )
    env = site.environ()
    args = ["/m", "--model-type", "strict", "--port", "1", "--debug", "--config-dir=/etc/x"]
    result = run_serve(args, env)
    assert result.returncode == 2
    assert "unrecognized arguments: --debug --config-dir=/etc/x" in result.stderr
    [note] = [line for line in result.stderr.splitlines() if "note:" in line]
    assert note == (
        "sglang-backends serve: note: serve's own options go before the model; if they were "
        "meant for serve, run: sglang-backends serve --debug --config-dir=/etc/x /m --port 1 "
        "--model-type strict"
    )
    # Any other refusal, or serve's options where they belong: no note.
    for args in (["/m", "--model-type", "strict", "--nope"], ["--debug", "/m", "--nope"]):
        other = run_serve([*args, "--model-type", "strict"], env)
        assert other.returncode == 2
        assert "note:" not in other.stderr


def test_the_llm_fallback_without_sglang_says_first_why_nothing_claimed_the_model(omni, tmp_path):
    """A disabled plugin, or a path that is not there, comes before the install hint."""
    from sglang_backends._sglang.installed import sglang_installed

    if sglang_installed():
        pytest.skip("SGLang is installed here: llm runs")
    env = omni.environ()
    path = conf(tmp_path, "[serve_backends]\ndisabled_backends = omni\n")
    model = tmp_path / "model"
    model.mkdir()
    disabled = run_serve(["--config-file", str(path), str(model)], env)
    missing = run_serve([str(tmp_path / "no-such-model")], env)
    for result in (disabled, missing):
        assert result.returncode == 1
        [line] = result.error_lines
        assert line.startswith(
            "sglang-backends serve: error: Automatic detection fell back to 'llm': "
        )
        assert line.endswith("install it with: pip install sglang")
    assert (
        f"plugin 'omni' from omni-runtime is disabled by [serve_backends] disabled_backends, "
        f"set in {path}, so it was not asked" in disabled.error_lines[0]
    )
    assert (
        f"the model path '{tmp_path / 'no-such-model'}' is no local file or directory"
        in (missing.error_lines[0])
    )


def test_a_warning_reads_the_same_from_serve_and_the_operator_commands(omni, tmp_path):
    path = conf(tmp_path, "[serve_backends]\nmodel_typ = omni\n[serve_backend]\nx = 1\n")
    served = run_serve(["--config-file", str(path), "--help"], omni.environ())
    assert served.returncode == 0, served.stderr
    warnings = [line for line in served.stderr.splitlines() if line.startswith("Ignoring unknown")]
    assert len(warnings) == 2, served.stderr
    for command, *rest in (["list"], ["detect", "/m"]):
        result = run_cli(omni, command, "--config-file", str(path), *rest)
        assert result.returncode == 0, result.stderr
        assert [line for line in result.stderr.splitlines() if "unknown" in line] == warnings


@pytest.mark.parametrize(
    ("argv", "option", "command"),
    [(["--enable", "omni", "list"], "--enable", "list"),
     (["-f", "json", "list"], "-f", "list"),
     (["--timeout", "3", "check"], "--timeout", "check")],
)  # fmt: skip
def test_a_command_option_before_the_command_name_is_said_to_go_after_it(
    omni, argv, option, command
):
    """cliff took it for a command, and offered one close to the option's spelling."""
    result = run_cli(omni, *argv)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{option} is not an option of sglang-backends; a command's own options go after "
        f"its name: sglang-backends {command} {option} ..."
    ]


@pytest.mark.parametrize("argv", [["--enable", "omni"], ["-f", "json"]])
def test_a_command_option_before_serve_and_its_value_is_refused_as_before_serve(omni, argv):
    """Worded as ``-v serve`` is: after serve it would be the backend's, not serve's."""
    result = run_cli(omni, *argv, "serve", "/models/x")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"{argv[0]} is not an option of serve; before serve, only --debug, --config-file "
        "and --config-dir are taken"
    ]


def test_help_for_no_such_command_is_one_line_and_a_usage_slip(omni):
    """As ``sglang-backends nosuch`` is: status 2, not cliff's list repr and status 1."""
    result = run_cli(omni, "help", "nosuch")
    assert (result.returncode, result.stderr.splitlines()) == (2, ["Unknown command 'nosuch'"])
