"""Supervision: nothing ``serve`` started survives it, whatever way it ends.

Real processes, real signals; what is left is read from the process table.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from clitools import CLI, clean_environ
from servetools import alive, descendants, kill_all, read_json, run_serve, start_serve, wait_for

#: A plugin whose run() starts a child that starts a grandchild, records their
#: pids in $SPAWN_PIDS, then ends as $SPAWN_END says. $SPAWN_CHILD says what
#: the child does: "wait" for its grandchild, "orphan" it (exit at once),
#: "stubborn": wait ignoring SIGTERM, "daemon": the grandchild double-forks
#: into a new session and the child exits, as a daemon does.
SPAWNER = '''
import ctypes
import json
import os
import resource
import subprocess
import sys
import time

from sglang_backends import ServeBackend

CHILD = """
import json, os, signal, subprocess, sys, time
mode = sys.argv[1]
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "daemon":
    reader, writer = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(writer, str(os.getpid()).encode())
            os.close(writer)
            time.sleep(600)
        os._exit(0)
    os.close(writer)
    print(os.read(reader, 64).decode(), flush=True)
    sys.exit(0)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(json.dumps(grandchild.pid), flush=True)
if mode != "orphan":
    time.sleep(600)
"""


def run(request):
    mode = os.environ.get("SPAWN_CHILD", "wait")
    end = os.environ.get("SPAWN_END", "return")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True
    )
    grandchild = json.loads(child.stdout.readline())
    if mode in ("orphan", "daemon"):
        child.wait()
    with open(os.environ["SPAWN_PIDS"] + ".tmp", "w") as stream:
        json.dump({"child": child.pid, "grandchild": grandchild}, stream)
    os.replace(os.environ["SPAWN_PIDS"] + ".tmp", os.environ["SPAWN_PIDS"])
    if end == "raise":
        raise RuntimeError("engine crashed after start-up")
    if end.startswith("os._exit"):
        # As sglang-omni's run() ends: the host's own clean-up never runs.
        os._exit(int(end.partition(":")[2] or 0))
    if end == "segv":
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        ctypes.string_at(0)
    if end == "block":
        while True:
            time.sleep(0.1)
    if end == "swallow":
        while True:
            try:
                time.sleep(600)
            except (KeyboardInterrupt, SystemExit):
                pass


def factory():
    return ServeBackend(api_version=1, run=run)
'''


@pytest.fixture
def spawner(site, tmp_path):
    """The spawning plugin installed; returns a function making its environment."""
    site.install(
        "spawner-dist",
        entry_points={"spawner": "spawner_plugin:factory"},
        modules={"spawner_plugin.py": SPAWNER},
    )
    pids_file = tmp_path / "pids.json"
    started: list[int] = []

    def environ(end, child="wait", **extra):
        env = site.environ()
        env.update(SPAWN_END=end, SPAWN_CHILD=child, SPAWN_PIDS=str(pids_file), **extra)
        return env, pids_file, started

    yield environ
    kill_all(started)


def _pids(pids_file, started):
    pids = read_json(pids_file)
    assert pids, "the plugin did not record its processes"
    started.extend(pids.values())
    return list(pids.values())


def _serving(env, pids_file, started, log, args=("m", "--model-type", "spawner")):
    """Start serve on the spawner plugin; wait for its processes; return (proc, descendants).

    The descendants include the grandchild even when it was orphaned.
    """
    proc = start_serve(list(args), env, log)
    started.append(proc.pid)
    wait_for(lambda: read_json(pids_file), process=proc, what="the plugin's processes")
    running = sorted({*descendants(proc.pid), *_pids(pids_file, started)})
    started.extend(running)
    return proc, running


def _gone(pids, timeout=30):
    """Wait until none of *pids* runs; return how long it took."""
    started = time.monotonic()
    wait_for(lambda: not alive(pids), timeout=timeout, what="the processes to go")
    return time.monotonic() - started


BACKEND = "serve backend 'spawner' (from spawner-dist)"


@pytest.mark.parametrize(
    ("end", "child", "status", "phrase"),
    [
        ("return", "wait", 0, None),
        ("raise", "wait", 1, f"{BACKEND} failed: engine crashed after start-up"),
        ("return", "orphan", 0, None),
        ("return", "daemon", 0, None),
        (
            "os._exit",
            "wait",
            1,
            f"{BACKEND} ended its process with os._exit(0) without returning from run()",
        ),
        ("os._exit:3", "daemon", 3, f"{BACKEND} ended its process with os._exit(3)"),
        ("segv", "wait", 128 + signal.SIGSEGV, f"{BACKEND} was killed by SIGSEGV"),
        ("segv", "orphan", 128 + signal.SIGSEGV, f"{BACKEND} was killed by SIGSEGV"),
    ],
)
def test_descendants_are_gone_after_run_ends(spawner, end, child, status, phrase):
    env, pids_file, started = spawner(end, child)
    result = run_serve(["m", "--model-type", "spawner"], env)
    pids = _pids(pids_file, started)
    assert result.returncode == status, result.stderr
    if phrase:
        [line] = result.error_lines
        assert line.startswith("sglang-backends serve: error: ") and phrase in line
        assert "Traceback" not in result.stderr
    else:
        assert result.error_lines == [], result.stderr
    assert alive(pids) == []


@pytest.mark.parametrize("child", ["wait", "daemon"])
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stop_signal_stops_backend_and_descendants(spawner, tmp_path, signum, status, child):
    env, pids_file, started = spawner("block", child)
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    # The supervisor, the backend process, the child and the grandchild (or the daemon).
    assert len(running) >= 4 if child == "wait" else 3
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == status
    assert alive(running) == []
    log = (tmp_path / "serve.log").read_text()
    assert f"Received {signal.Signals(signum).name}" in log
    assert "error" not in log


def test_signal_to_the_whole_process_group_stops_once(spawner, tmp_path):
    """As Ctrl+C does: serve, the supervisor and the backend all get SIGINT; one stop."""
    env, pids_file, started = spawner("block")
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen(
            [CLI, "serve", "m", "--model-type", "spawner"],
            env=clean_environ(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started.append(proc.pid)
    wait_for(lambda: read_json(pids_file), process=proc, what="the plugin's processes")
    running = sorted({*descendants(proc.pid), *_pids(pids_file, started)})
    started.extend(running)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    assert alive(running) == []
    assert "again" not in (tmp_path / "serve.log").read_text()  # not taken for a second signal


def test_sigint_stops_serve_started_with_sigint_ignored(spawner, tmp_path):
    """A background job of a non-interactive shell starts with SIGINT ignored."""
    env, pids_file, started = spawner("block")
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen(
            ["sh", "-c", 'trap "" INT; exec "$0" serve m --model-type spawner', CLI],
            env=clean_environ(env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    started.append(proc.pid)
    wait_for(lambda: read_json(pids_file), process=proc, what="the plugin's processes")
    running = sorted({*descendants(proc.pid), *_pids(pids_file, started)})
    started.extend(running)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    assert alive(running) == []
    assert "did not stop within" not in (tmp_path / "serve.log").read_text()


@pytest.mark.parametrize(
    ("end", "child"), [("block", "wait"), ("block", "daemon"), ("swallow", "stubborn")]
)
def test_sigkill_to_serve_stops_everything_within_the_stop_timeout(spawner, tmp_path, end, child):
    env, pids_file, started = spawner(end, child, SGLANG_BACKENDS_STOP_TIMEOUT="1")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    # 1 s for the backend, 1 s for the processes it leaves; a wide margin on a loaded machine.
    assert _gone(running) < 10
    log = (tmp_path / "serve.log").read_text()
    assert f"serve (pid {proc.pid}) has ended; stopping the serve backend" in log
    # The SIGTERM the supervisor gets as serve dies is that death, not a signal anyone sent.
    assert "Received SIGTERM" not in log


def test_stubborn_descendants_are_killed_after_the_grace_period(spawner, tmp_path):
    env, pids_file, started = spawner("block", "stubborn", SGLANG_BACKENDS_STOP_TIMEOUT="0.5")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert alive(running) == []
    assert "still running 0.5s after SIGTERM" in (tmp_path / "serve.log").read_text()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_timeout_of_0_kills_at_once_and_calls_it_no_failure(spawner, tmp_path, signum):
    """``stop_timeout = 0`` means "kill at once": a normal stop, not an overdue one."""
    env, pids_file, started = spawner("block", "wait", SGLANG_BACKENDS_STOP_TIMEOUT="0")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == 128 + signum
    assert alive(running) == []
    log = (tmp_path / "serve.log").read_text()
    assert "did not stop within" not in log
    assert "Stop timeout 0: killing the serve backend at once" in log


def test_backend_that_ignores_the_stop_is_forced(spawner, tmp_path):
    env, pids_file, started = spawner("swallow", "stubborn", SGLANG_BACKENDS_STOP_TIMEOUT="0.5")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert alive(running) == []
    log = (tmp_path / "serve.log").read_text()
    assert "Serve backend 'spawner' (from spawner-dist) did not stop within 0.5s" in log
    # Forced: the processes left get SIGKILL at once, not another grace period.
    assert "after SIGTERM" not in log


def test_second_signal_forces_exit(spawner, tmp_path):
    env, pids_file, started = spawner("swallow", "stubborn", SGLANG_BACKENDS_STOP_TIMEOUT="60")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log")
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: "Received SIGINT" in (tmp_path / "serve.log").read_text(), process=proc)
    started_at = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    assert alive(running) == []
    # Forced by the second signal at once, not after the 60 s stop timeout.
    assert time.monotonic() - started_at < 20
    assert "did not stop within" not in (tmp_path / "serve.log").read_text()


@pytest.mark.parametrize(("variable", "shown"), [(None, "0.7s"), ("0.3", "0.3s")])
def test_stop_timeout_option_and_the_variable_overriding_it(spawner, tmp_path, variable, shown):
    conf = tmp_path / "serve.conf"
    conf.write_text("[serve_backends]\nstop_timeout = 0.7\n")
    extra = {} if variable is None else {"SGLANG_BACKENDS_STOP_TIMEOUT": variable}
    env, pids_file, started = spawner("block", "stubborn", **extra)
    args = ("--config-file", str(conf), "m", "--model-type", "spawner")
    proc, running = _serving(env, pids_file, started, tmp_path / "serve.log", args)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert alive(running) == []
    assert f"still running {shown} after SIGTERM" in (tmp_path / "serve.log").read_text()


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_invalid_stop_timeout_variable_is_a_usage_error(spawner, value):
    env, pids_file, _ = spawner("return", SGLANG_BACKENDS_STOP_TIMEOUT=value)
    result = run_serve(["m", "--model-type", "spawner"], env)
    assert result.returncode == 2
    [line] = result.error_lines
    assert "SGLANG_BACKENDS_STOP_TIMEOUT" in line and repr(value) in line
    assert not pids_file.exists()


def test_invalid_stop_timeout_option_names_the_file(spawner, tmp_path):
    conf = tmp_path / "serve.conf"
    conf.write_text("[serve_backends]\nstop_timeout = -2\n")
    env, pids_file, _ = spawner("return")
    result = run_serve(["--config-file", str(conf), "m", "--model-type", "spawner"], env)
    assert result.returncode == 2
    [line] = result.error_lines
    assert "stop_timeout" in line and str(conf) in line
    assert not pids_file.exists()


EMBEDDED = """
import os, signal, subprocess, sys
from sglang_backends._serve.main import main

def mine(signum, frame):
    pass

signal.signal(signal.SIGTERM, mine)
signal.signal(signal.SIGCHLD, signal.DISPOSITION)
# A child of the embedding program that ends while serve runs.
own = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
status = main(["m", "--model-type", "spawner"])
assert status == 0, status
assert own.wait() == 7, "serve took the exit status of the program's own child"
assert signal.getsignal(signal.SIGTERM) is mine
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
assert signal.getsignal(signal.SIGQUIT) == signal.SIG_DFL
assert signal.getsignal(signal.SIGCHLD) == signal.DISPOSITION
assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()
print("EMBEDDED OK", os.getpid())
"""


@pytest.mark.parametrize("chld", ["SIG_DFL", "SIG_IGN"])
def test_main_in_process_leaves_the_programs_children_and_handlers_alone(spawner, chld):
    env, pids_file, started = spawner("return", "daemon")
    code = EMBEDDED.replace("DISPOSITION", chld)
    if chld == "SIG_IGN":  # such a program's children are reaped automatically
        code = code.replace("assert own.wait() == 7", "own.wait(); assert True")
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_environ(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("EMBEDDED OK") == 1  # the forked processes never came back
    assert alive(_pids(pids_file, started)) == []


# -- elsewhere than Linux: the backend runs in serve's own process -------------------

IN_PROCESS = """
import sys
import sglang_backends._serve.supervise.supervisor
# as on a system without the supervisor
sglang_backends._serve.supervise.supervisor.SUPPORTED = False
from sglang_backends._cli import main
raise SystemExit(main(["serve", *sys.argv[1:]]))
"""


def _serving_in_process(env, pids_file, started, log):
    with open(log, "wb") as stream:
        proc = subprocess.Popen(
            [sys.executable, "-c", IN_PROCESS, "m", "--model-type", "spawner"],
            env=clean_environ(env),
            stdout=stream,
            stderr=subprocess.STDOUT,
        )
    started.append(proc.pid)
    wait_for(lambda: read_json(pids_file), process=proc, what="the plugin's processes")
    running = sorted({*descendants(proc.pid), *_pids(pids_file, started)})
    started.extend(running)
    return proc, running


@pytest.mark.parametrize(("end", "status"), [("return", 0), ("raise", 1)])
def test_in_process_run_cleans_up_after_run(spawner, tmp_path, end, status):
    env, pids_file, started = spawner(end, "orphan")
    proc, running = _serving_in_process(env, pids_file, started, tmp_path / "serve.log")
    assert proc.wait(timeout=30) == status
    assert alive(running) == []
    assert descendants(proc.pid) == []


def test_in_process_stop_signal_and_forced_stop(spawner, tmp_path):
    env, pids_file, started = spawner("block", "stubborn", SGLANG_BACKENDS_STOP_TIMEOUT="0.5")
    proc, running = _serving_in_process(env, pids_file, started, tmp_path / "serve.log")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert alive(running) == []
    assert "still running 0.5s after SIGTERM" in (tmp_path / "serve.log").read_text()


def test_in_process_second_signal_kills_without_a_grace_period(spawner, tmp_path):
    env, pids_file, started = spawner("swallow", "stubborn", SGLANG_BACKENDS_STOP_TIMEOUT="60")
    proc, running = _serving_in_process(env, pids_file, started, tmp_path / "serve.log")
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: "Received SIGINT" in (tmp_path / "serve.log").read_text(), process=proc)
    started_at = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    assert time.monotonic() - started_at < 20  # not the 60 s grace period
    assert alive(running) == []


FORKER = """
import os
from sglang_backends import ServeBackend

def run(request):
    child = os.fork()
    if child == 0:
        return  # a forked copy that returns from run() as if it were the backend
    os.waitpid(child, 0)
    os._exit(0)

def factory():
    return ServeBackend(api_version=1, run=run)
"""


def test_a_forked_copy_returning_from_run_does_not_speak_for_the_backend(site):
    site.install(
        "forker-dist",
        entry_points={"forker": "forker_plugin:factory"},
        modules={"forker_plugin.py": FORKER},
    )
    result = run_serve(["m", "--model-type", "forker"], site.environ())
    assert result.returncode == 1, result.stderr
    [line] = result.error_lines
    assert "'forker' (from forker-dist) ended its process with os._exit(0)" in line


#: A plugin whose import never ends; it writes a mark once it is being imported.
HANGING_IMPORT = """
import os
import time

open(os.environ["IMPORTING"], "w").close()
while True:
    time.sleep(1)
"""


def test_a_stop_while_a_backend_loads_says_which(site, tmp_path):
    """Stopped before it could run, the backend named on the command line is said to have
    been loading: the operator sees what held serve up."""
    site.install("hang-rt", entry_points={"hang": "hang_plugin:factory"},
                 modules={"hang_plugin.py": HANGING_IMPORT})  # fmt: skip
    mark = tmp_path / "importing"
    log = tmp_path / "serve.log"
    proc = start_serve(
        ["m", "--model-type", "hang"], {**site.environ(), "IMPORTING": str(mark)}, log
    )
    try:
        wait_for(mark.exists, process=proc, what="the plugin's import")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        kill_all([proc.pid])
    assert "Serve backend stopped by SIGINT while loading 'hang' (hang-rt)" in log.read_text()
