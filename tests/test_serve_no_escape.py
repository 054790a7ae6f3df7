"""Nothing escapes ``serve``: hostile backends, hostile signals, killed supervisors.

Real processes and real signals; what is left is read from the process
table (psutil) over every process the plugin recorded and every
descendant of ``serve``. Stop timeouts are short so the suite stays quick.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import psutil
import pytest
from clitools import CLI, clean_environ
from servetools import alive, descendants, kill_all, read_json, run_serve, wait_for

#: A plugin whose run() misbehaves as $HOSTILE says, after starting two daemons
#: (double fork, setsid; one runs a new program, the other is a forked copy,
#: deaf to SIGTERM when the backend is) and recording every pid in $HOSTILE_PIDS.
#: "deaf": ignore SIGTERM and sleep; "own-group": move to a process group of
#: its own, then wait for a stop and record it in $HOSTILE_STOPPED; "graceful":
#: the same without moving; "forker": start a process that forks a new pid
#: every millisecond (each generation exits after forking), then sleep.
HOSTILE = '''
import json
import os
import signal
import sys
import time

from sglang_backends import ServeBackend


def daemon(execute):
    reader, writer = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(writer, str(os.getpid()).encode())
            os.close(writer)
            if execute:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"])
            if os.environ["HOSTILE"] == "deaf":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(600)
        os._exit(0)
    os.close(writer)
    pid = int(os.read(reader, 64))
    os.close(reader)
    return pid


def forker():
    """A chain of processes, each forking its successor then exiting at once, ignoring SIGTERM."""
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        end = time.monotonic() + 60  # harmless, should it ever escape
        while time.monotonic() < end:
            if os.fork() != 0:
                os._exit(0)
        os._exit(0)


def record(**pids):
    path = os.environ["HOSTILE_PIDS"]
    with open(path + ".tmp", "w") as stream:
        json.dump(pids, stream)
    os.replace(path + ".tmp", path)


def stopped(how):
    with open(os.environ["HOSTILE_STOPPED"], "w") as stream:
        stream.write(how)


def run(request):
    mode = os.environ["HOSTILE"]
    pids = {"backend": os.getpid(), "daemon": daemon(True), "forked": daemon(False)}
    if mode == "forker":
        forker()
    if mode == "own-group":
        os.setpgid(0, 0)
    if mode == "deaf":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record(**pids)
    try:
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        stopped("SIGINT")
        raise
    except SystemExit:
        stopped("SystemExit")
        raise


def factory():
    return ServeBackend(api_version=1, run=run, requires_model_path=False)
'''


@pytest.fixture
def hostile(site, tmp_path):
    """The hostile plugin installed; returns a function making its environment."""
    site.install(
        "hostile-dist",
        entry_points={"hostile": "hostile_plugin:factory"},
        modules={"hostile_plugin.py": HOSTILE},
    )
    pids_file = tmp_path / "pids.json"
    started: list[int] = []

    def environ(mode, stop_timeout="0.5"):
        env = site.environ()
        env.update(
            HOSTILE=mode,
            HOSTILE_PIDS=str(pids_file),
            HOSTILE_STOPPED=str(tmp_path / "stopped"),
            SGLANG_BACKENDS_STOP_TIMEOUT=stop_timeout,
        )
        return env

    yield environ, pids_file, started
    kill_all(started)


def _start(command, env, log, **popen):
    with open(log, "wb") as stream:
        return subprocess.Popen(
            command, env=clean_environ(env), stdout=stream, stderr=subprocess.STDOUT, **popen
        )


def _watch(proc, pids_file, started):
    """Wait for the plugin's processes; return every pid of serve's tree."""
    started.append(proc.pid)
    wait_for(lambda: read_json(pids_file), process=proc, what="the plugin's processes")
    running = sorted({*descendants(proc.pid), *read_json(pids_file).values()})
    started.extend(running)
    return running


def _everything_gone(pids, timeout=15):
    wait_for(lambda: not alive(pids), timeout=timeout, what=f"{alive(pids)} to end")


SERVE = [CLI, "serve", "--model-type", "hostile"]

#: Run argv[1:] with SIGHUP ignored (as nohup does), or with SIGTERM blocked.
_EXEC = "os.execv(sys.argv[1], sys.argv[1:])"
NOHUP = f"import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); {_EXEC}"
BLOCKED = (
    f"import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM}}); {_EXEC}"
)


def test_killed_supervisor_leaves_nothing_even_if_the_backend_ignores_sigterm(hostile, tmp_path):
    environ, pids_file, started = hostile
    proc = _start(SERVE, environ("deaf"), tmp_path / "serve.log")
    running = _watch(proc, pids_file, started)
    [supervisor] = psutil.Process(proc.pid).children()
    supervisor.kill()
    assert proc.wait(timeout=30) == 128 + signal.SIGKILL
    _everything_gone(running)  # the daemons included, though init had adopted them
    log = (tmp_path / "serve.log").read_text()
    assert f"the serve supervisor (pid {supervisor.pid}) was killed by SIGKILL" in log


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGQUIT])
def test_sighup_and_sigquit_to_the_process_group_stop_serve(hostile, tmp_path, signum):
    """An ssh session closing (SIGHUP), Ctrl+\\ (SIGQUIT): a stop like SIGTERM's."""
    environ, pids_file, started = hostile
    proc = _start(SERVE, environ("graceful"), tmp_path / "serve.log", start_new_session=True)
    running = _watch(proc, pids_file, started)
    os.killpg(proc.pid, signum)
    assert proc.wait(timeout=30) == 128 + signum
    _everything_gone(running)
    assert (tmp_path / "stopped").read_text() == "SystemExit"  # run() unwound
    assert f"Received {signal.Signals(signum).name}" in (tmp_path / "serve.log").read_text()


def test_sighup_stays_ignored_under_nohup(hostile, tmp_path):
    environ, pids_file, started = hostile
    nohup = [sys.executable, "-c", NOHUP, *SERVE]
    proc = _start(nohup, environ("graceful"), tmp_path / "serve.log", start_new_session=True)
    running = _watch(proc, pids_file, started)
    recorded = sorted(read_json(pids_file).values())
    os.killpg(proc.pid, signal.SIGHUP)
    time.sleep(0.5)
    assert proc.poll() is None and alive(recorded) == recorded
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    _everything_gone(running)


def test_sigterm_blocked_in_the_inherited_mask_still_stops_gracefully(hostile, tmp_path):
    environ, pids_file, started = hostile
    blocked = [sys.executable, "-c", BLOCKED, *SERVE]
    proc = _start(blocked, environ("graceful", stop_timeout="60"), tmp_path / "serve.log")
    running = _watch(proc, pids_file, started)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM  # not after the 60 s deadline
    _everything_gone(running)
    assert (tmp_path / "stopped").read_text() == "SystemExit"


def test_ctrl_c_reaches_a_backend_in_its_own_process_group(hostile, tmp_path):
    """The terminal's SIGINT goes to the foreground group only; serve passes it on."""
    environ, pids_file, started = hostile
    master, slave = os.openpty()
    try:

        def controlling_terminal():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        proc = subprocess.Popen(
            SERVE,
            env=clean_environ(environ("own-group", stop_timeout="60")),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=controlling_terminal,
        )
        running = _watch(proc, pids_file, started)
        os.write(master, b"\x03")  # Ctrl+C, as typed
        assert proc.wait(timeout=30) == 128 + signal.SIGINT  # not after the 60 s deadline
    finally:
        os.close(slave)
        os.close(master)
    _everything_gone(running)
    assert (tmp_path / "stopped").read_text() == "SIGINT"


def test_a_process_forking_every_millisecond_does_not_outrun_the_stop(hostile, tmp_path):
    environ, pids_file, started = hostile
    env = environ("forker")
    proc = _start(SERVE, env, tmp_path / "serve.log")
    running = _watch(proc, pids_file, started)
    time.sleep(0.3)  # the chain is running
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    _everything_gone(running)
    time.sleep(0.2)
    marked = [p.pid for p in psutil.process_iter() if _holds(p, env["HOSTILE_PIDS"])]
    started.extend(marked)
    assert marked == []


#: Run serve (argv[1:]) as the child of a subreaper that, after serve has
#: exited, reaps and prints whatever serve's tree left it: orphans that had
#: exited but were not reaped (zombies) and, for a moment, any survivor.
ADOPTER = """
import json, os, signal, subprocess, sys, time
from sglang_backends._core.tree import become_subreaper

assert become_subreaper()
serve = subprocess.Popen(sys.argv[1:])
while not os.path.exists(os.environ["HOSTILE_PIDS"]):
    time.sleep(0.05)
time.sleep(0.3)  # the chain is running
serve.send_signal(signal.SIGTERM)
status = serve.wait(timeout=30)
time.sleep(0.5)
left = []
while True:
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == 0:
        break
    left.append(pid)
print(json.dumps({"status": status, "left": left}))
"""


def test_serve_reaps_every_process_it_stopped_none_is_left_to_init(hostile, tmp_path):
    """Nothing of a stopped tree reaches init: no zombie (a container's PID 1 may never
    reap it) and no survivor (a chain forking faster than a scan of /proc once did).
    """
    environ, _, started = hostile
    log = tmp_path / "adopter.log"  # a file: a survivor would hold a pipe open
    proc = _start([sys.executable, "-c", ADOPTER, *SERVE], environ("forker"), log)
    started.append(proc.pid)
    assert proc.wait(timeout=60) == 0, log.read_text()
    outcome = json.loads(log.read_text().splitlines()[-1])
    assert outcome == {"status": 128 + signal.SIGTERM, "left": []}


def _holds(process, value):
    try:
        return value in process.environ().values()
    except (psutil.Error, OSError):
        return False


KILLER = """
import os, signal
from sglang_backends import ServeBackend

def run(request):
    os.kill(os.getpid(), signal.SIGKILL)

def factory():
    return ServeBackend(api_version=1, run=run, requires_model_path=False)
"""


def test_backend_killed_by_a_signal_gives_128_plus_n_with_stderr_gone(site):
    site.install(
        "killer-dist",
        entry_points={"killer": "killer_plugin:factory"},
        modules={"killer_plugin.py": KILLER},
    )
    reader, writer = os.pipe()
    os.close(reader)  # stderr is a broken pipe
    try:
        proc = subprocess.run(
            [CLI, "serve", "--model-type", "killer"],
            env=clean_environ(site.environ()),
            stdout=subprocess.DEVNULL,
            stderr=writer,
            timeout=60,
            check=False,
        )
    finally:
        os.close(writer)
    assert proc.returncode == 128 + signal.SIGKILL


HANG_AT_IMPORT = """
import os, time
open(os.environ["IMPORTING"], "w").close()
time.sleep(600)

def factory():
    pass
"""


def test_sigterm_during_a_hung_import_is_serves_stop_not_the_plugins_exit(site, tmp_path):
    site.install(
        "hang-dist",
        entry_points={"hang": "hang_plugin:factory"},
        modules={"hang_plugin.py": HANG_AT_IMPORT},
    )
    env = {**site.environ(), "IMPORTING": str(tmp_path / "importing")}
    proc = _start([CLI, "serve", "m", "--model-type", "hang"], env, tmp_path / "serve.log")
    try:
        wait_for((tmp_path / "importing").exists, process=proc, what="the import")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        kill_all([proc.pid])
    log = (tmp_path / "serve.log").read_text()
    assert "sys.exit" not in log and "error" not in log
    assert "Received SIGTERM" in log


#: A plugin that never releases the GIL, at import or in its detector: a C
#: call made through PyDLL keeps the GIL throughout (as a catastrophic regular
#: expression would, without burning a CPU while the test waits).
GIL_HOG = """
import ctypes
from sglang_backends import ServeBackend, ServeBackendDetection

def hog():
    ctypes.PyDLL(None).sleep(3600)

if "{where}" == "import":
    hog()

def detect(request):
    hog()
    return ServeBackendDetection.MATCH

def factory():
    return ServeBackend(api_version=1, run=lambda request: None, detect=detect)
"""


@pytest.mark.parametrize(("where", "phase"), [("import", "loading"), ("detect", "detecting")])
def test_auto_detection_is_bounded_by_the_supervisor_whatever_a_plugin_does(
    site, install_backend, tmp_path, where, phase
):
    site.install(
        "hog-dist",
        entry_points={"hog": "hog_plugin:factory"},
        modules={"hog_plugin.py": GIL_HOG.replace("{where}", where)},
    )
    install_backend("fine-dist", "fine", detect="UNKNOWN")
    conf = tmp_path / "serve.conf"
    conf.write_text(
        "[serve_backends]\nload_timeout = 0.2\ndetect_timeout = 0.2\nstop_timeout = 0.5\n"
    )
    started = time.monotonic()
    result = run_serve(["--config-file", str(conf), "m"], site.environ(), timeout=60)
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    [line] = result.error_lines
    assert "automatic detection did not finish within 2.4 s" in line
    # Named with whatever else was under way when it took the GIL.
    assert f"still {phase}: " in line and "'hog' (hog-dist)" in line
    assert took < 30, took  # the bound is 2.4 s; a wide margin for a loaded machine


HANGER = """
import threading
from sglang_backends import ServeBackend, ServeBackendDetection

def detect(request):
    threading.Event().wait()

def factory():
    return ServeBackend(api_version=1, run=lambda request: None, detect=detect)
"""


def test_the_supervisors_bound_allows_the_rounds_of_more_plugins_than_workers(
    site, install_backend, tmp_path
):
    """Past MAX_WORKERS hanging detectors, detection asks in rounds: serve's bound counts
    them, so serve chooses what detect would, not an overrun."""
    site.install(
        "hangers",
        entry_points={f"h{index:03}": "hanger_plugin:factory" for index in range(100)},
        modules={"hanger_plugin.py": HANGER},
    )
    install_backend("fine-dist", "fine", detect="return ServeBackendDetection.MATCH")
    conf = tmp_path / "serve.conf"
    conf.write_text("[serve_backends]\nload_timeout = 0.5\ndetect_timeout = 3\n")
    result = run_serve(["--config-file", str(conf), "m"], site.environ(), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Selected serve backend 'fine' (from fine-dist) by automatic detection" in result.stderr
    assert "did not finish" not in result.stderr


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")
def test_serve_as_pid_1_of_a_pid_namespace_stops_on_sighup(hostile, tmp_path):
    environ, pids_file, started = hostile
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip("PID namespaces are not permitted here")
    command = ["unshare", "--pid", "--fork", "--mount-proc", *SERVE]
    proc = _start(command, environ("deaf"), tmp_path / "serve.log")
    started.append(proc.pid)
    wait_for(lambda: read_json(pids_file), process=proc, what="the plugin's processes")
    [pid_1] = psutil.Process(proc.pid).children()
    running = descendants(proc.pid)
    started.extend(running)
    os.kill(pid_1.pid, signal.SIGHUP)
    assert proc.wait(timeout=30) == 128 + signal.SIGHUP
    _everything_gone(running)


def _as_nobody() -> list[str]:
    """``setpriv`` to an unprivileged user, or skip when that user cannot run serve here."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    probe = subprocess.run(
        [*command, sys.executable, "-c", "import psutil, sglang_backends"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("the unprivileged user cannot run this interpreter and its packages")
    return command


def test_killed_supervisor_leaves_nothing_as_an_unprivileged_user():
    """The marks are read from /proc as the same user, without privileges."""
    from sglang_backends.testing import PluginSite

    command = _as_nobody()
    shared = tempfile.mkdtemp(prefix="sglang-backends-nobody-")
    started: list[int] = []
    try:
        os.chmod(shared, 0o777)
        site = PluginSite(os.path.join(shared, "site"))
        site.install(
            "hostile-dist",
            entry_points={"hostile": "hostile_plugin:factory"},
            modules={"hostile_plugin.py": HOSTILE},
        )
        os.chmod(site.path, 0o755)
        pids_file = Path(shared) / "pids.json"
        env = site.environ()
        env.update(
            HOSTILE="deaf",
            HOSTILE_PIDS=str(pids_file),
            HOSTILE_STOPPED=os.path.join(shared, "stopped"),
            SGLANG_BACKENDS_STOP_TIMEOUT="0.5",
        )
        proc = _start([*command, *SERVE], env, Path(shared) / "serve.log")
        running = _watch(proc, pids_file, started)
        [supervisor] = [p for p in psutil.Process(proc.pid).children() if p.pid in running]
        supervisor.kill()
        assert proc.wait(timeout=30) == 128 + signal.SIGKILL
        _everything_gone(running)
    finally:
        kill_all(started)
        shutil.rmtree(shared, ignore_errors=True)
