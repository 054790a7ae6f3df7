"""The echo example, installed as a real distribution, served end to end."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path

import psutil
import pytest
from clitools import CLI, clean_environ, imported_by, serve_in_process
from servetools import alive, descendants, kill_all, run_serve, start_serve, wait_for

from sglang_backends import SERVE_BACKENDS_GROUP, ServeBackendDetection, ServeRequest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "echo-backend"
MODEL = EXAMPLE / "models" / "echo-tiny"

try:
    import sglang_echo_backend as echo
except ImportError:  # pragma: no cover - an environment without the example
    if os.environ.get("SGLANG_BACKENDS_REQUIRE_EXAMPLE"):
        raise  # tox installs it: its absence there is a failure, not a skip
    pytest.skip(
        "the echo example is not installed (tox's py3 env installs it): "
        "pip install ./examples/echo-backend",
        allow_module_level=True,
    )


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return None, None


def _post(url, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _start_in_group(args, env, log):
    """Start ``serve ARGS`` as a terminal starts a foreground job: in a process group of its own.

    Its pid is the group's id, so ``os.killpg(proc.pid, SIGINT)`` is Ctrl+C.
    """
    with open(log, "wb") as stream:
        return subprocess.Popen(
            [CLI, "serve", *args],
            env=clean_environ(env),
            stdout=stream,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _in_group(pgid):
    """Pids of live processes in process group *pgid*."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return found


def _echo_workers(pid):
    """Pids of the echo worker processes below *pid*."""
    found = []
    for child in descendants(pid):
        try:
            if "sglang_echo_backend.worker" in psutil.Process(child).cmdline():
                found.append(child)
        except psutil.Error:
            pass
    return found


def _worker(completion):
    """The pid of the worker that computed *completion* (``echo-worker-PID``)."""
    return int(completion["system_fingerprint"].removeprefix("echo-worker-"))


def test_entry_point_is_installed():
    found = [ep for ep in metadata.entry_points(group=SERVE_BACKENDS_GROUP) if ep.name == "echo"]
    assert [(ep.value, ep.dist.name) for ep in found] == [
        ("sglang_echo_backend:make_backend", "sglang-echo-backend")
    ]
    backend = found[0].load()()
    assert backend.api_version == 1 and backend.requires_model_path is True


def test_show_summarises_the_backend():
    # The factory docstring's first line is what `show` and the docs print.
    result = subprocess.run(
        [CLI, "show", "echo", "-f", "value", "-c", "Summary"],
        env=clean_environ(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "Echo backend: an OpenAI-style server that returns the prompt, for trying sglang-backends."
    )


def test_detector(tmp_path):
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / "echo").write_text("")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    cases = {
        str(MODEL): ServeBackendDetection.MATCH,
        str(marked): ServeBackendDetection.MATCH,
        str(plain): ServeBackendDetection.NO_MATCH,
        str(plain / "config.json"): ServeBackendDetection.UNKNOWN,
        "org/echo-model": ServeBackendDetection.UNKNOWN,
        "bad\0path": ServeBackendDetection.UNKNOWN,
        None: ServeBackendDetection.UNKNOWN,
    }
    for path, verdict in cases.items():
        assert echo.detect(ServeRequest(argv=(), model_path=path)) is verdict, path


def test_plugin_import_is_lean():
    watched = ("stevedore", "importlib.metadata", "http.server", "sglang_echo_backend.server")
    loaded, out = imported_by("import sglang_echo_backend", watched)
    assert out.returncode == 0, out.stderr
    assert loaded == []


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--model-type", "echo", "--help"], "usage: sglang-backends serve --model-type echo"),
        (["--help"], "sglang-backends serve --model-type NAME --help"),
    ],
)
def test_help_imports_no_configuration_machinery(args, phrase):
    heavy, out = imported_by(
        serve_in_process(args), ("oslo_config", "cliff"), clean_environ(os.environ)
    )
    assert out.returncode == 0, out.stderr
    assert phrase in out.stdout
    assert heavy == []


def test_help_says_each_default_once():
    result = run_serve(["--model-type", "echo", "--help"], os.environ)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "(default: None)" not in text
    assert ") (default:" not in text
    assert "(default: the model directory's name)" in text
    assert "port to bind (default: 30000)" in text


def test_a_port_in_use_is_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_serve([str(MODEL), "--port", str(port)], os.environ)
    assert result.returncode == 1
    [line] = result.error_lines
    assert line.endswith(f"failed: cannot listen on 127.0.0.1:{port}: Address already in use")


def test_backend_argument_errors_keep_argparse_status():
    result = run_serve([str(MODEL), "--workers", "0"], os.environ)
    assert result.returncode == 2
    assert "--workers: must be at least 1" in result.stderr


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_serve_echo_end_to_end(tmp_path, signum, status):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_serve(
        [str(MODEL), "--port", str(port), "--workers", "2"], dict(os.environ), tmp_path / "log"
    )
    running = []
    try:
        wait_for(lambda: _get(f"{base}/health")[0] == 200, process=proc, what="/health")
        log = (tmp_path / "log").read_text()
        assert "Selected serve backend 'echo' (from sglang-echo-backend) by automatic" in log

        assert _get(f"{base}/v1/models")[1]["data"][0]["id"] == "echo-tiny"
        code, body = _post(
            f"{base}/v1/completions", {"model": "echo-tiny", "prompt": "hello echo world"}
        )
        assert code == 200
        assert body["object"] == "text_completion" and body["model"] == "echo-tiny"
        assert body["choices"][0]["text"] == "hello echo world"
        assert body["choices"][0]["finish_reason"] == "stop"
        assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}

        code, body = _post(f"{base}/v1/completions", {"prompt": ["a b c", "d"], "max_tokens": 2})
        assert [(c["text"], c["finish_reason"]) for c in body["choices"]] == [
            ("a b", "length"),
            ("d", "stop"),
        ]
        assert _post(f"{base}/v1/completions", b"{not json")[0] == 400
        assert _post(f"{base}/v1/completions", {"model": "other", "prompt": "x"})[0] == 404

        running = descendants(proc.pid)
        workers = {_worker(body), _worker(_post(f"{base}/v1/completions", {"prompt": "x"})[1])}
        # Round robin over two worker processes, both children of serve.
        assert len(workers) == 2 and workers <= set(running)

        proc.send_signal(signum)
        assert proc.wait(timeout=30) == status
        assert alive(running) == []
        assert _get(f"{base}/health") == (None, None)
        assert "Traceback" not in (tmp_path / "log").read_text()
    finally:
        kill_all([proc.pid, *running])


def test_health_is_503_until_every_worker_is_ready(tmp_path):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, SGLANG_ECHO_WORKER_START_DELAY="3")
    log = tmp_path / "log"
    proc = _start_in_group([str(MODEL), "--port", str(port), "--workers", "2"], env, log)
    running = []
    try:
        # The first answer comes while the workers "load": the server is
        # bound at once, the workers say they are ready 3 s after starting.
        first = wait_for(
            lambda: (reply := _get(f"{base}/health"))[0] is not None and reply,
            process=proc,
            what="/health to answer",
        )
        assert first == (503, {"status": "loading"})
        code, body = _post(f"{base}/v1/completions", {"prompt": "too early"})
        assert (code, body["error"]["message"]) == (503, "echo: loading")

        wait_for(lambda: _get(f"{base}/health")[0] == 200, process=proc, what="/health 200")
        running = descendants(proc.pid)
        # Ready means ready: both workers answer at once.
        replies = [_post(f"{base}/v1/completions", {"prompt": "now"}) for _ in range(2)]
        assert [code for code, _ in replies] == [200, 200]
        assert {_worker(body) for _, body in replies} == set(_echo_workers(proc.pid))
        wait_for(lambda: "echo: ready" in log.read_text(), what="echo: ready")
        output = log.read_text()
        assert output.index("echo: serving 'echo-tiny'") < output.index("echo: ready")

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
    finally:
        kill_all([proc.pid, *running])
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize(
    ("signum", "status", "whole_group", "delay"),
    [
        # Ctrl+C while the workers are still starting Python and importing.
        (signal.SIGINT, 130, True, "0"),
        # Ctrl+C and SIGTERM while they load a model far slower than the stop.
        (signal.SIGINT, 130, True, "60"),
        (signal.SIGTERM, 143, False, "60"),
    ],
    ids=["ctrl-c-importing", "ctrl-c-loading", "sigterm-loading"],
)
def test_stop_right_after_start_is_quiet(tmp_path, signum, status, whole_group, delay):
    log = tmp_path / "log"
    env = dict(os.environ, SGLANG_ECHO_WORKER_START_DELAY=delay)
    proc = _start_in_group([str(MODEL), "--port", str(_free_port()), "--workers", "2"], env, log)
    seen = set()
    try:
        # As soon as both workers exist, before any of them can be ready.
        workers = wait_for(
            lambda: len(found := _echo_workers(proc.pid)) == 2 and found,
            process=proc,
            what="two workers",
            timeout=60,
        )
        seen.update(workers, descendants(proc.pid))
        started = time.monotonic()
        if whole_group:
            os.killpg(proc.pid, signum)  # what a terminal does on Ctrl+C
        else:
            proc.send_signal(signum)
        assert proc.wait(timeout=30) == status
        # The loading workers were ended, not waited for.
        assert time.monotonic() - started < 20
        wait_for(
            lambda: not alive(seen) and not _in_group(proc.pid), what="nothing left", timeout=10
        )
    finally:
        kill_all([proc.pid, *seen])
    output = log.read_text()
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output


def test_dead_worker_is_reported(tmp_path):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_serve([str(MODEL), "--port", str(port)], os.environ, tmp_path / "log")
    running = []
    try:
        wait_for(lambda: _get(f"{base}/health")[0] == 200, process=proc, what="/health")
        running = descendants(proc.pid)
        worker = _worker(_post(f"{base}/v1/completions", {"prompt": "x"})[1])
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: _get(f"{base}/health")[0] == 503, process=proc, what="/health 503")
        code, body = _post(f"{base}/v1/completions", {"prompt": "x"})
        assert code == 503 and body["error"]["type"] == "server_error"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        assert alive(running) == []
    finally:
        kill_all([proc.pid, *running])


def test_example_passes_the_plugin_author_contract_check():
    from sglang_backends.testing import assert_backend_contract

    installed = assert_backend_contract("echo")
    assert installed.backend.api_version == 1
    assert installed.detections["local directory"] == "no_match"
    assert installed.detections["hub id"] == "unknown"
    assert installed.detections["no model path"] == "unknown"
    marked = ServeRequest(("--model-path", str(MODEL)), str(MODEL), True)
    direct = assert_backend_contract(echo.make_backend, requests=[("echo model", marked)])
    assert direct.detections == {"echo model": "match"}
