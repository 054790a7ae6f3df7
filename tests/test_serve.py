"""``sglang-backends serve`` end to end: real console script, real installed plugins."""

from __future__ import annotations

import pytest
from servetools import RECORDER, read_json, run_serve, single_error


@pytest.fixture
def recorder(site, tmp_path):
    """The recording plugin installed; returns (environ, record file)."""
    site.install(
        "recorder-dist",
        entry_points={
            "recorder": "recorder_plugin:recorder",
            "configonly": "recorder_plugin:config_only",
        },
        modules={"recorder_plugin.py": RECORDER},
    )
    record = tmp_path / "record.json"
    env = site.environ()
    env["SERVE_RECORD"] = str(record)
    return env, record


@pytest.mark.parametrize(
    ("args", "argv", "model_path", "positional"),
    [
        (
            ["org/model", "--model-type", "recorder", "--pipeline-parallel", "2"],
            ["--model-path", "org/model", "--pipeline-parallel", "2"],
            "org/model",
            True,
        ),
        (
            ["--model-type=recorder", "--model-path=org/model", "--port", "1"],
            ["--model-path=org/model", "--port", "1"],
            "org/model",
            False,
        ),
        (
            ["--debug", "--model", "org/model", "--model-type", "recorder"],
            ["--model", "org/model"],
            "org/model",
            False,
        ),
        (
            ["--model-type", "configonly", "--config", "runtime.yaml"],
            ["--config", "runtime.yaml"],
            None,
            False,
        ),
    ],
)
def test_run_receives_upstream_request(recorder, args, argv, model_path, positional):
    env, record = recorder
    result = run_serve(args, env, console_script=True)
    assert result.returncode == 0, result.stderr
    assert read_json(record) == {
        "argv": argv,
        "model_path": model_path,
        "model_path_is_positional": positional,
    }


def test_python_dash_m_works_too(recorder):
    env, record = recorder
    result = run_serve(["m", "--model-type", "recorder"], env)
    assert result.returncode == 0, result.stderr
    assert read_json(record)["argv"] == ["--model-path", "m"]


def test_targeted_help_goes_to_the_backend_without_a_model(recorder):
    env, record = recorder
    result = run_serve(["--model-type", "recorder", "--help"], env)
    assert result.returncode == 0, result.stderr
    assert read_json(record) == {
        "argv": ["--help"],
        "model_path": None,
        "model_path_is_positional": False,
    }


def test_auto_detection_selects_and_logs(recorder, tmp_path):
    env, record = recorder
    result = run_serve([str(tmp_path / "recordable"), "--port", "7"], env)
    assert result.returncode == 0, result.stderr
    assert read_json(record)["argv"] == [
        "--model-path",
        str(tmp_path / "recordable"),
        "--port",
        "7",
    ]
    assert result.stderr == (
        "Selected serve backend 'recorder' (from recorder-dist) by automatic detection\n"
    )


TAMPER = """
from sglang_backends import ServeBackend, ServeBackendDetection

def tamper(request):
    object.__setattr__(request, "model_path", "tampered")
    object.__setattr__(request, "argv", ("--tampered",))
    object.__setattr__(request, "model_path_is_positional", False)
    return ServeBackendDetection.NO_MATCH

def factory():
    return ServeBackend(api_version=1, run=print, detect=tamper)
"""


def test_a_detector_that_rewrites_its_request_does_not_change_the_backends(
    recorder, site, tmp_path
):
    env, record = recorder
    site.install(
        "tamper-dist", entry_points={"tamper": "tamper:factory"}, modules={"tamper.py": TAMPER}
    )
    model = str(tmp_path / "recordable")
    result = run_serve([model, "--port", "7"], env)
    assert result.returncode == 0, result.stderr
    assert read_json(record) == {
        "argv": ["--model-path", model, "--port", "7"],
        "model_path": model,
        "model_path_is_positional": True,
    }


def test_debug_raises_the_log_level(recorder):
    env, _ = recorder
    quiet = run_serve(["m", "--model-type", "recorder"], env)
    loud = run_serve(["--debug", "m", "--model-type", "recorder"], env)
    assert "Backend request: ServeRequest(" not in quiet.stderr
    assert "Backend request: ServeRequest(" in loud.stderr


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["m", "--model-type"], "--model-type expects a value"),
        (["m", "--model-type="], "empty value"),
        (["m", "--model-type", "org/x"], "Unknown serve backend 'org/x'. Available values: "),
        (["m", "--model-type", "a b"], "Unknown serve backend 'a b'. Available values: "),
        (["m", "--model-type", "--port", "1"], "Unknown serve backend '--port'. Available "),
    ],
)
def test_bad_model_type_is_a_usage_error(recorder, args, phrase):
    env, record = recorder
    line = single_error(run_serve(args, env), 2)
    assert line.startswith("sglang-backends serve: error:") and phrase in line
    assert not record.exists()


def test_unknown_backend(recorder):
    env, _ = recorder
    line = single_error(run_serve(["m", "--model-type", "nope"], env), 2)
    assert "Unknown serve backend 'nope'" in line
    assert "Available values: auto, llm, diffusion, " in line
    assert "configonly" in line and "recorder" in line


def test_missing_model_path_never_runs(recorder):
    env, record = recorder
    line = single_error(run_serve(["--model-type", "recorder", "--port", "1"], env), 2)
    assert "'recorder' (from recorder-dist) needs a model" in line
    assert "Usage: sglang-backends serve <model-name-or-path>" in line
    assert "--model-path <model-name-or-path>" in line
    assert not record.exists()


def test_missing_model_path_with_auto_falls_back_to_llm(recorder):
    env, _ = recorder
    line = single_error(run_serve(["--port", "1"], env), 2)
    assert "'llm' (built-in) needs a model" in line


BROKEN = "raise ImportError('no module named fast_kernels')\n"


def test_plugin_that_fails_to_load(site):
    site.install(
        "broken-dist",
        entry_points={"broken": "broken_plugin:factory"},
        modules={"broken_plugin.py": BROKEN},
    )
    env = site.environ()
    line = single_error(run_serve(["m", "--model-type", "broken"], env), 1)
    assert "'broken' from broken-dist" in line and "fast_kernels" in line
    debug = run_serve(["--debug", "m", "--model-type", "broken"], env)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr and "fast_kernels" in debug.stderr


def test_duplicate_providers_and_dist_qualified_choice(site, tmp_path):
    for dist in ("one-dist", "two-dist"):
        site.install(
            dist,
            entry_points={"twin": f"{dist.replace('-', '_')}:recorder"},
            modules={f"{dist.replace('-', '_')}.py": RECORDER},
        )
    env = site.environ()
    env["SERVE_RECORD"] = str(tmp_path / "record.json")
    line = single_error(run_serve(["m", "--model-type", "twin"], env), 1)
    assert "one-dist" in line and "two-dist" in line
    chosen = run_serve(["m", "--model-type", "two-dist:twin"], env)
    assert chosen.returncode == 0, chosen.stderr
    assert read_json(tmp_path / "record.json")["argv"] == ["--model-path", "m"]


def test_ambiguous_auto_detection(site, tmp_path):
    for name in ("alpha", "beta"):
        site.install(
            f"{name}-dist",
            entry_points={name: f"{name}_plugin:recorder"},
            modules={f"{name}_plugin.py": RECORDER},
        )
    env = site.environ()
    env["SERVE_RECORD"] = str(tmp_path / "record.json")
    line = single_error(run_serve([str(tmp_path / "recordable")], env), 1)
    assert "Multiple serve backends matched this request: alpha, beta" in line
    assert not (tmp_path / "record.json").exists()


FAILING = """
import sys
from sglang_backends import ServeBackend

def run(request):
    if "--exit" in request.argv:
        sys.exit(int(request.argv[-1]))
    raise RuntimeError("the accelerator is on fire")

def factory():
    return ServeBackend(api_version=1, run=run)
"""


def test_exception_from_run(site):
    site.install(
        "failing-dist",
        entry_points={"failing": "failing_plugin:factory"},
        modules={"failing_plugin.py": FAILING},
    )
    line = single_error(run_serve(["m", "--model-type", "failing"], site.environ()), 1)
    assert "'failing' (from failing-dist) failed: the accelerator is on fire" in line


def test_system_exit_from_run_keeps_its_status(site):
    site.install(
        "failing-dist",
        entry_points={"failing": "failing_plugin:factory"},
        modules={"failing_plugin.py": FAILING},
    )
    result = run_serve(["m", "--model-type", "failing", "--exit", "3"], site.environ())
    assert result.returncode == 3
    assert result.error_lines == []


def test_general_help_lists_backends_without_importing_plugins(recorder, site):
    site.install(
        "broken-dist",
        entry_points={"broken": "broken_plugin:factory"},
        modules={"broken_plugin.py": BROKEN},
    )
    env, record = recorder
    result = run_serve(["--help"], env)
    assert result.returncode == 0, result.stderr
    choices = result.stdout.split("--model-type {", 1)[1].split("}", 1)[0].split(",")
    assert choices[:3] == ["auto", "llm", "diffusion"]
    assert {"broken", "configonly", "recorder"} <= set(choices)
    assert "default: auto" in result.stdout and "else llm" in result.stdout
    assert "from broken-dist 1.0" in result.stdout
    assert "sglang-backends serve --model-type NAME --help" in result.stdout
    assert "Failed to load" not in result.stderr
    assert not record.exists()


def test_backend_options_named_like_serves_reach_the_backend_verbatim(recorder):
    env, record = recorder
    args = ["m", "--model-type", "recorder", "--debug", "--config-file", "runtime.yaml"]
    result = run_serve([*args, "--config-dir=conf.d"], env, console_script=True)
    assert result.returncode == 0, result.stderr
    assert read_json(record)["argv"] == [
        "--model-path",
        "m",
        "--debug",
        "--config-file",
        "runtime.yaml",
        "--config-dir=conf.d",
    ]
    # They were the backend's: serve read no file (runtime.yaml does not exist), logged no DEBUG.
    assert "Backend request: ServeRequest(" not in result.stderr


def test_serve_options_lead_and_the_backend_keeps_its_own(recorder):
    env, record = recorder
    result = run_serve(
        [
            "--debug",
            "--model-type",
            "configonly",
            "--config",
            "rt.yaml",
            "--debug",
            "--config-file",
            "x.yaml",
        ],
        env,
        console_script=True,
    )
    assert result.returncode == 0, result.stderr
    assert "Backend request: ServeRequest(" in result.stderr
    assert read_json(record)["argv"] == [
        "--config",
        "rt.yaml",
        "--debug",
        "--config-file",
        "x.yaml",
    ]


QUIET = """
from sglang_backends import ServeBackend

class EngineGone(Exception):
    pass

def run(request):
    if "--lines" in request.argv:
        raise RuntimeError("first line\\n  second line")
    raise EngineGone()

def factory():
    return ServeBackend(api_version=1, run=run)
"""


def test_failure_without_a_message_names_its_type(site):
    site.install(
        "quiet-dist",
        entry_points={"quiet": "quiet_plugin:factory"},
        modules={"quiet_plugin.py": QUIET},
    )
    line = single_error(run_serve(["m", "--model-type", "quiet"], site.environ()), 1)
    assert line.endswith("serve backend 'quiet' (from quiet-dist) failed: EngineGone")
    line = single_error(run_serve(["m", "--model-type", "quiet", "--lines"], site.environ()), 1)
    assert line.endswith("failed: first line second line")


def test_plugin_whose_distribution_has_no_name_is_never_called_built_in(site):
    info = site.install(
        "anonymous",
        entry_points={"anon": "quiet_plugin:factory"},
        modules={"quiet_plugin.py": QUIET},
    )
    (info / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 1.0\n")
    result = run_serve(["m", "--model-type", "anon"], site.environ())
    # Served (its run() raises), as upstream serves it, and named after its dist-info directory.
    line = single_error(result, 1)
    assert f"'anon' (from anonymous (metadata unreadable: {info})) failed: EngineGone" in line
    assert "built-in" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if "its METADATA is" in line]
    assert len(warnings) == 1, result.stderr
    assert str(info) in warnings[0]


@pytest.mark.parametrize(
    ("name", "given"),
    [
        ("my model", ["--model-type=my model"]),
        ("org/omni", ["--model-type=org/omni"]),
        ("-dashed", ["--model-type=-dashed"]),
        ("-dashed", ["--model-type", "-dashed"]),
    ],
)
def test_a_plugin_whatever_its_name_is_served_by_it_as_upstream_routes(site, name, given):
    """Upstream leaves names to the registry: an entry point named with a space, a slash or
    a leading hyphen is served when --model-type gives that name, in either form."""
    site.install(
        "odd-dist",
        entry_points={name: "quiet_plugin:factory"},
        modules={"quiet_plugin.py": QUIET},
    )
    line = single_error(run_serve(["m", *given], site.environ()), 1)
    assert line.endswith(f"serve backend {name!r} (from odd-dist) failed: EngineGone")
