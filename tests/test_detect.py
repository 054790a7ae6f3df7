"""``sglang-backends detect``: automatic detection explained, verdict by verdict."""

from __future__ import annotations

import json

import pytest
from clitools import run_cli

DETECTOR = """
import time
from sglang_backends import ServeBackend, ServeBackendDetection

def detect(request):
    path = request.model_path or ""
    if "slow" in path and {name!r} == "sloth":
        time.sleep(30)
    if {name!r} in path:
        return ServeBackendDetection.MATCH
    return ServeBackendDetection.NO_MATCH

def factory():
    return ServeBackend(api_version=1, run=lambda request: None, detect=detect)
"""


@pytest.fixture
def detectors(site):
    for name in ("omni", "vlm", "sloth"):
        site.install(
            f"{name}-runtime",
            entry_points={name: f"{name}_plugin:factory"},
            modules={f"{name}_plugin.py": DETECTOR.format(name=name)},
        )
    return site


def verdicts(result, ignore: tuple[str, ...] = ()) -> dict[str, str]:
    rows = json.loads(result.stdout)[:-1]
    return {row["Backend"]: row["Verdict"] for row in rows if row["Backend"] not in ignore}


def test_one_match_is_selected(detectors, preinstalled):
    result = run_cli(detectors, "detect", "-f", "json", "/models/omni-7b", "--tp", "2")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert verdicts(result, ignore=preinstalled) == {
        "diffusion": "unknown",
        "omni": "match",
        "sloth": "no_match",
        "vlm": "no_match",
    }
    assert rows[-1]["Backend"] == "omni"
    assert rows[-1]["Verdict"] == "selected"
    assert rows[-1]["Distribution"] == "omni-runtime"
    assert "Selected: omni" in result.stderr


def test_no_match_falls_back_to_llm(detectors):
    result = run_cli(detectors, "detect", "-f", "json", "--model-path", "/models/llama")
    assert result.returncode == 0, result.stderr
    last = json.loads(result.stdout)[-1]
    assert (last["Backend"], last["Verdict"]) == ("llm", "fallback")
    from sglang_backends._sglang.installed import sglang_installed

    needs = ", which needs SGLang (pip install sglang): serve fails here"
    assert last["Detail"] == (
        "no backend claimed the request; llm is the fallback"
        + ("" if sglang_installed() else needs)
    )


def test_several_matches_are_ambiguous_and_fail(detectors):
    result = run_cli(detectors, "detect", "-f", "json", "/models/omni-vlm")
    assert result.returncode == 1
    last = json.loads(result.stdout)[-1]
    assert last["Verdict"] == "ambiguous"
    assert last["Backend"] is None
    assert "omni, vlm" in last["Detail"]
    assert "--model-type" in result.stderr


def test_slow_detector_times_out_and_claims_nothing(detectors):
    result = run_cli(detectors, "detect", "-f", "json", "--detect-timeout", "0.5", "/m/slow-sloth")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    [sloth] = [r for r in rows if r["Backend"] == "sloth"]
    assert sloth["Verdict"] == "timeout"
    assert "0.5 s" in sloth["Detail"]
    assert rows[-1]["Verdict"] == "fallback"


def test_detect_timeout_from_configuration(detectors, tmp_path):
    conf = tmp_path / "x.conf"
    conf.write_text("[serve_backends]\ndetect_timeout = 0.5\n")
    result = run_cli(detectors, "detect", "-f", "json", "--config-file", str(conf), "/m/slow-sloth")
    [sloth] = [r for r in json.loads(result.stdout) if r["Backend"] == "sloth"]
    assert sloth["Verdict"] == "timeout"


def test_disabled_plugins_take_no_part(detectors):
    result = run_cli(detectors, "detect", "-f", "json", "--disable", "vlm", "/models/omni-vlm")
    assert result.returncode == 0, result.stderr
    assert "vlm" not in verdicts(result)
    assert json.loads(result.stdout)[-1]["Backend"] == "omni"


def test_table_output_ends_with_the_selection(detectors):
    result = run_cli(detectors, "detect", "-f", "value", "-c", "Backend", "-c", "Verdict", "/x/vlm")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "vlm selected"


def test_serve_options_after_detect_options_need_no_separator(detectors):
    plain = run_cli(detectors, "detect", "-f", "json", "--model-path", "/m/omni", "--tp", "2")
    separated = run_cli(detectors, "detect", "-f", "json", "--", "--model-path", "/m/omni")
    for result in (plain, separated):
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)[-1]["Backend"] == "omni"


@pytest.mark.parametrize("source", ["file", "environment", "request"])
def test_a_model_type_serve_would_use_is_the_answer_and_said_first(detectors, tmp_path, source):
    conf = tmp_path / "x.conf"
    conf.write_text("[serve_backends]\nmodel_type = vlm\n")
    args, env, where = [], {}, "--model-type in the request"
    if source == "file":
        args, where = ["--config-file", str(conf)], f"model_type, set in {conf}"
    elif source == "environment":
        env = {"OS_SERVE_BACKENDS__MODEL_TYPE": "vlm"}
        where = "model_type, set in environment variable OS_SERVE_BACKENDS__MODEL_TYPE"
    request = ["--model-type", "vlm"] if source == "request" else []
    # omni and vlm both match: automatic detection would be ambiguous.
    result = run_cli(detectors, "detect", "-f", "json", *args, "/m/omni-vlm", *request, env=env)
    assert result.returncode == 0, result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith("Configured: serve uses 'vlm' by name (") and where in first, first
    assert "No selection" not in result.stderr
    rows = json.loads(result.stdout)
    assert (rows[-1]["Backend"], rows[-1]["Verdict"]) == ("vlm", "configured")
    assert rows[-1]["Distribution"] == "vlm-runtime"
    assert verdicts(result)["omni"] == verdicts(result)["vlm"] == "match"  # for information


def test_a_configured_name_serve_refuses_gets_serves_message_and_status(detectors, tmp_path):
    conf = tmp_path / "x.conf"
    for value, status in (("vlmm", 2), ("vlm", 1)):
        conf.write_text(f"[serve_backends]\nmodel_type = {value}\ndisabled_backends = vlm\n")
        detect = run_cli(detectors, "detect", "--config-file", str(conf), "/m/omni")
        serve = run_cli(detectors, "serve", "--config-file", str(conf), "/m/omni")
        assert detect.returncode == serve.returncode == status, (detect.stderr, serve.stderr)
        error = serve.stderr.strip().splitlines()[-1].removeprefix("sglang-backends serve: error: ")
        assert f"It was set by [serve_backends] model_type in {conf}" in error
        assert detect.stderr.strip().splitlines()[-1] == error
        assert detect.stdout == ""


@pytest.mark.parametrize(
    ("value", "phrase"),
    [("a/b", "Unknown serve backend 'a/b'."), ("", "--model-type needs a backend name")],
)
def test_bad_model_type_in_the_request_is_a_usage_error_as_in_serve(detectors, value, phrase):
    detect = run_cli(detectors, "detect", "/m/omni", "--model-type", value)
    serve = run_cli(detectors, "serve", "/m/omni", "--model-type", value)
    for result in (detect, serve):
        assert result.returncode == 2, result.stderr
        assert phrase in result.stderr
        assert "Traceback" not in result.stderr


def test_default_bound_follows_the_load_and_detect_timeouts(detectors, tmp_path):
    """Without --timeout, detect waits load_timeout + detect_timeout + a margin, no less.

    A plugin that stops its whole interpreter (SIGSTOP) cannot be bounded from
    inside; the outer bound then ends the process and names the plugin.
    """
    detectors.install(
        "frozen-runtime",
        entry_points={"frozen": "frozen_plugin:factory"},
        modules={"frozen_plugin.py": "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n"},
    )
    conf = tmp_path / "x.conf"
    conf.write_text("[serve_backends]\nload_timeout = 0.5\ndetect_timeout = 0.5\n")
    result = run_cli(detectors, "detect", "--config-file", str(conf), "/m/omni")
    assert result.returncode == 1, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "did not complete" in line]
    assert "did not finish within 11 s" in line
    assert "'frozen'" in line and "'omni'" not in line


def test_a_request_longer_than_one_argument_may_be_reaches_the_worker(detectors):
    # The job goes to the detecting process on stdin: one argument holds at most 128 KiB.
    request = ["--option", "value"] * 20000
    result = run_cli(detectors, "detect", "-f", "json", "/models/x", *request, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)[-1]["Verdict"] in ("fallback", "selected")


SLOW_IMPORT = """
import time
from sglang_backends import ServeBackend

time.sleep(1.5)

def factory():
    return ServeBackend(api_version=1, run=lambda request: None)
"""


def test_a_slow_import_shows_on_its_own_row(detectors):
    detectors.install(
        "lazy-runtime",
        entry_points={"lazy": "lazy_plugin:factory"},
        modules={"lazy_plugin.py": SLOW_IMPORT},
    )
    result = run_cli(detectors, "detect", "-f", "json", "/models/llama")
    assert result.returncode == 0, result.stderr
    rows = {row["Backend"]: row for row in json.loads(result.stdout)[:-1]}
    assert rows["lazy"]["Verdict"] == "no detector"
    assert rows["lazy"]["Seconds"] >= 1.5
    assert all(rows[name]["Seconds"] < 1.5 for name in ("omni", "vlm", "sloth"))


def test_a_configured_plugin_that_fails_to_load_fails_as_serve_would(detectors, tmp_path):
    detectors.install(
        "broken-runtime",
        entry_points={"broken": "broken_plugin:factory"},
        modules={"broken_plugin.py": "raise ImportError('needs libbroken')\n"},
    )
    conf = tmp_path / "x.conf"
    conf.write_text("[serve_backends]\nmodel_type = broken-runtime:broken\n")
    detect = run_cli(detectors, "detect", "-f", "json", "--config-file", str(conf), "/m/omni")
    serve = run_cli(detectors, "serve", "--config-file", str(conf), "/m/omni")
    assert detect.returncode == serve.returncode == 1, (detect.stderr, serve.stderr)
    last = json.loads(detect.stdout)[-1]
    assert (last["Backend"], last["Distribution"]) == ("broken", "broken-runtime")
    assert last["Verdict"] == "configured"
    assert "fails to load here, so serve fails" in last["Detail"]
    assert "needs libbroken" in last["Detail"]


def test_a_configured_plugin_that_fails_to_load_says_why_on_the_first_line(detectors):
    detectors.install(
        "boom-rt",
        entry_points={"boom": "boom_plugin:factory"},
        modules={"boom_plugin.py": "raise ImportError('needs libfoo')\n"},
    )
    # The table cuts the final row's detail: the line before it must say why.
    result = run_cli(detectors, "detect", "/tmp", env={"OS_SERVE_BACKENDS__MODEL_TYPE": "boom"})
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[0] == (
        "Configured: serve uses 'boom' by name ([serve_backends] model_type, set in environment "
        "variable OS_SERVE_BACKENDS__MODEL_TYPE), not detection; it fails to load here, so serve "
        "fails: Failed to load serve backend 'boom' from boom-rt: needs libfoo"
    )
    assert "Traceback" not in result.stderr
