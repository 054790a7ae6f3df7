"""Signals as a user, a shell, a debugger or Kubernetes send them: each reaches the backend once.

Real processes, a real pseudo-terminal driving an interactive bash, real
signals, real HTTP. Each guarantee is also checked with ``serve`` as PID 1 of
a PID namespace and as an unprivileged user.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from clitools import CLI, clean_environ
from servetools import alive, descendants, kill_all, read_json, wait_for

from sglang_backends.testing import PluginSite

#: A backend serving HTTP (``GET /`` answers ``serving``) with a worker
#: process, recording each signal its own handlers get (those named in
#: $SIGNALS_HANDLED) as a line of $SIGNALS_LOG. A stop signal (INT, TERM,
#: QUIT, HUP) makes it drain for $SIGNALS_DRAIN s and return, as uvicorn's
#: graceful shutdown does, unless $SIGNALS_STOP is "never". $SIGNALS_WORKER
#: "deaf" makes the worker ignore SIGTERM; $SIGNALS_DAEMON "1" starts a daemon
#: (double fork, setsid) too. Its pids and port go to $SIGNALS_STATE. run()
#: returns by itself after $SIGNALS_FOR s.
SIGNALLER = """
import http.server
import json
import os
import signal
import subprocess
import time

from sglang_backends import ServeBackend

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP)


def note(text):
    fd = os.open(os.environ["SIGNALS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, (text + "\\n").encode())
    os.close(fd)


class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"serving")

    def log_message(self, *args):
        pass


def daemon():
    reader, writer = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for signum in STOPS:  # not the backend's handlers: the daemon is no backend
                signal.signal(signum, signal.SIG_DFL)
            os.write(writer, str(os.getpid()).encode())
            time.sleep(600)
        os._exit(0)
    os.close(writer)
    pid = int(os.read(reader, 64))
    os.wait()
    return pid


def run(request):
    stopping = []

    def handler(signum, frame):
        note(str(signum))
        if signum in STOPS and os.environ.get("SIGNALS_STOP") != "never":
            stopping.append(time.monotonic())

    for name in os.environ.get("SIGNALS_HANDLED", "").split():
        signal.signal(int(name) if name.isdigit() else getattr(signal, name), handler)
    # Not this interpreter: an unprivileged user may not run it by its path.
    command = ["sleep", "600"]
    if os.environ.get("SIGNALS_WORKER") == "deaf":
        command = ["sh", "-c", "trap '' TERM; exec sleep 600"]
    worker = subprocess.Popen(command)
    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    server.timeout = 0.05
    state = {"backend": os.getpid(), "worker": worker.pid, "port": server.server_address[1]}
    if os.environ.get("SIGNALS_DAEMON") == "1":
        state["daemon"] = daemon()
    path = os.environ["SIGNALS_STATE"]
    with open(path + ".tmp", "w") as stream:
        json.dump(state, stream)
    os.replace(path + ".tmp", path)
    drain = float(os.environ.get("SIGNALS_DRAIN", "1"))
    end = time.monotonic() + float(os.environ.get("SIGNALS_FOR", "600"))
    while time.monotonic() < (stopping[0] + drain if stopping else end):
        server.handle_request()


def factory():
    return ServeBackend(api_version=1, run=run, requires_model_path=False)
"""

SERVE = [CLI, "serve", "--model-type", "signaller"]
STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


@dataclass
class World:
    """A plugin site and files any user may use: the test's processes may run as ``nobody``."""

    path: Path
    site: PluginSite
    started: list[int] = field(default_factory=list)

    def environ(self, **extra: str) -> dict[str, str]:
        env = clean_environ(self.site.environ())
        env.update(
            SIGNALS_LOG=str(self.path / "signals.log"),
            SIGNALS_STATE=str(self.path / "state.json"),
            SIGNALS_HANDLED="SIGINT SIGTERM SIGQUIT SIGHUP",
            OS_SERVE_BACKENDS__STOP_TIMEOUT="1",
        )
        env.update(extra)
        return env

    def received(self, log: Path | None = None) -> list[str]:
        """The signals the backend's own handlers got, by name, in order."""
        try:
            lines = (log or self.path / "signals.log").read_text().split()
        except FileNotFoundError:
            return []
        return [signal.Signals(int(n)).name if _named(int(n)) else n for n in lines]

    def state(self, path: Path | None = None) -> dict[str, int]:
        state = read_json(path or self.path / "state.json")
        assert isinstance(state, dict)
        return state


def _named(signum: int) -> bool:
    try:
        signal.Signals(signum)
    except ValueError:
        return False
    return True


@pytest.fixture
def world() -> Iterator[World]:
    shared = Path(tempfile.mkdtemp(prefix="sglang-backends-signals-"))
    os.chmod(shared, 0o777)
    site = PluginSite(shared / "site")
    site.install(
        "signaller-dist",
        entry_points={"signaller": "signaller_plugin:factory"},
        modules={"signaller_plugin.py": SIGNALLER},
    )
    os.chmod(site.path, 0o755)
    made = World(shared, site)
    try:
        yield made
    finally:
        kill_all(made.started)
        shutil.rmtree(shared, ignore_errors=True)


#: Straight to the backend, whatever proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(port: int) -> str:
    with _DIRECT.open(f"http://127.0.0.1:{port}/", timeout=10) as answer:
        return str(answer.read().decode())


def _serving(
    world: World, proc: subprocess.Popen[bytes] | None, state: Path | None = None, pid: int = 0
) -> dict[str, int]:
    """Wait until the backend serves; remember every process of the tree for the teardown."""
    path = state or world.path / "state.json"
    wait_for(lambda: read_json(path), process=proc, what="the backend to serve")
    found = world.state(path)
    pid = proc.pid if proc is not None else pid
    world.started.extend([pid, *descendants(pid)])
    assert _get(found["port"]) == "serving"
    return found


# -- job control at a terminal ---------------------------------------------------


class Terminal:
    """An interactive bash on a new pseudo-terminal, its output collected as it comes."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        self.output = bytearray()
        env = {**env, "PS1": "$ ", "TERM": "dumb", "HOME": str(cwd)}

        def controlling_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.bash = subprocess.Popen(
            ["bash", "--norc", "--noprofile", "-i"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=controlling_terminal,
        )
        os.close(slave)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                return
            if not chunk:
                return
            self.output += chunk

    def type(self, text: bytes) -> None:
        os.write(self.master, text)

    def count(self, text: str) -> int:
        return bytes(self.output).count(text.encode())

    def close(self) -> None:
        self.bash.kill()
        self.bash.wait(timeout=30)
        os.close(self.master)


def _states(pids: list[int]) -> list[str]:
    found = []
    for pid in pids:
        try:
            found.append(psutil.Process(pid).status())
        except psutil.NoSuchProcess:
            found.append("gone")
    return found


@pytest.mark.parametrize(
    ("stops", "key", "name"),
    [(14, b"\x03", "SIGINT"), (5, b"\x1c", "SIGQUIT")],
    ids=["ctrl-c", "ctrl-backslash"],
)
def test_ctrl_z_and_fg_in_an_interactive_bash_then_the_terminals_stop(
    world, tmp_path, stops, key, name
):
    """Ctrl+Z stops the whole tree and gives the shell its prompt; fg resumes it serving.

    Each stop lasts longer than serve's own wait for a signal, which made
    CPython's sigtimedwait return a siginfo it never filled in. Then Ctrl+C
    (or Ctrl+\\) reaches the backend's own handler once.
    """
    terminal = Terminal(world.environ(), tmp_path)
    try:
        wait_for(lambda: terminal.count("$ "), what="the prompt")
        terminal.type(f"{' '.join(SERVE)} >{tmp_path / 'serve.log'} 2>&1\n".encode())
        found = wait_for(lambda: psutil.Process(terminal.bash.pid).children(), what="serve")
        [front] = found  # type: ignore[misc]
        state = _serving(world, None, pid=front.pid)
        tree = [front.pid, *descendants(front.pid)]
        assert state["backend"] in tree and state["worker"] in tree
        for stop in range(1, stops + 1):
            terminal.type(b"\x1a")  # Ctrl+Z
            wait_for(lambda: set(_states(tree)) <= set(STOPPED), what=f"stop {stop}")
            wait_for(
                lambda stop=stop: terminal.count("Stopped") == stop, what=f"the shell's stop {stop}"
            )
            time.sleep(1.2)  # longer than serve's wait
            terminal.type(b"fg\n")
            wait_for(lambda: not set(_states(tree)) & {*STOPPED, "gone"}, what=f"continue {stop}")
            assert _get(state["port"]) == "serving", f"after fg {stop}"
        terminal.type(key)
        wait_for(lambda: not alive(tree), what="serve to stop")
        terminal.type(b"echo status=$?\n")
        status = 128 + getattr(signal, name)
        wait_for(lambda: terminal.count(f"status={status}"), what=f"status {status}")
    finally:
        terminal.close()
    log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in log and "error" not in log, log
    assert world.received() == [name]


@pytest.mark.parametrize("how", ["plain", "pid-1"])
def test_ctrl_z_without_a_shell_to_continue_serve_is_ignored(world, tmp_path, how):
    """``docker run -it``: serve (or PID 1) leads the terminal's session, with no job
    control above it. Ctrl+Z would stop the tree for good; it keeps serving instead, as
    the kernel ignores Ctrl+Z for such a job. Ctrl+C then stops it.
    """
    master, slave = os.openpty()

    def controlling_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    log = tmp_path / "serve.log"
    try:
        with open(log, "wb") as stream:
            proc = subprocess.Popen(
                [*_prefix(how), *SERVE],
                env=world.environ(),
                stdin=slave,
                stdout=stream,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=controlling_terminal,
            )
        state = _serving(world, proc)
        tree = descendants(proc.pid)
        os.write(master, b"\x1a")  # Ctrl+Z
        time.sleep(1.5)
        assert not set(_states(tree)) & {*STOPPED, "gone"}, _states(tree)
        assert _get(state["port"]) == "serving"
        os.write(master, b"\x03")  # Ctrl+C
        assert proc.wait(timeout=30) == 128 + signal.SIGINT
    finally:
        os.close(slave)
        os.close(master)
    assert world.received() == ["SIGINT"]
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize("target", ["group", "serve"])
def test_sigstop_and_sigcont_for_longer_than_a_second_leave_serve_serving(world, tmp_path, target):
    """As a debugger attaching to serve does, or ``kill -STOP`` to its process group."""
    log = tmp_path / "serve.log"
    proc = _start(SERVE, world.environ(), log, start_new_session=True)
    state = _serving(world, proc)
    kill = _sender(proc.pid, group=target == "group")
    kill(signal.SIGSTOP)
    time.sleep(1.5)
    kill(signal.SIGCONT)
    time.sleep(0.5)
    assert proc.poll() is None, log.read_text()
    assert _get(state["port"]) == "serving"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert "Traceback" not in log.read_text(), log.read_text()
    assert world.received() == ["SIGTERM"]


def _sender(pid: int, *, group: bool) -> Callable[[int], None]:
    """Send a signal to process *pid*, or to its process group."""
    return (lambda n: os.killpg(pid, n)) if group else (lambda n: os.kill(pid, n))


def _start(command, env, log, **popen) -> subprocess.Popen[bytes]:
    with open(log, "wb") as stream:
        return subprocess.Popen(command, env=env, stdout=stream, stderr=subprocess.STDOUT, **popen)


# -- every signal, once ------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "target"),
    [
        (signal.SIGUSR1, "serve"),
        (signal.SIGUSR2, "serve"),
        (signal.SIGWINCH, "serve"),
        (signal.SIGRTMIN + 1, "serve"),
        (signal.SIGUSR1, "group"),
        (signal.SIGUSR2, "group"),
    ],
    ids=["SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGRTMIN+1", "SIGUSR1-group", "SIGUSR2-group"],
)
def test_every_other_signal_reaches_the_backend_once_and_serve_runs_on(
    world, tmp_path, signum, target
):
    log = tmp_path / "serve.log"
    env = world.environ(SIGNALS_HANDLED=f"SIGTERM {int(signum)}")
    proc = _start(SERVE, env, log, start_new_session=True)
    state = _serving(world, proc)
    _sender(proc.pid, group=target == "group")(signum)
    wait_for(world.received, process=proc, what="the backend's handler")
    time.sleep(0.5)  # a second delivery would be here by now
    expected = signal.Signals(signum).name if _named(signum) else str(int(signum))
    assert world.received() == [expected]
    assert proc.poll() is None, log.read_text()
    assert _get(state["port"]) == "serving"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert world.received() == [expected, "SIGTERM"]


def test_a_signal_serve_would_die_of_ends_the_backend_and_then_serve(world, tmp_path):
    """SIGUSR1 kills a backend without a handler, as it kills ``sglang serve``: once."""
    log = tmp_path / "serve.log"
    proc = _start(SERVE, world.environ(), log, start_new_session=True)
    _serving(world, proc)
    tree = [proc.pid, *descendants(proc.pid)]
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=30) == 128 + signal.SIGUSR1
    assert "serve backend 'signaller' (from signaller-dist) was killed by SIGUSR1" in (
        log.read_text()
    )
    wait_for(lambda: not alive(tree), what="the tree to end")


@pytest.mark.parametrize("target", ["group", "serve"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_reaches_the_backends_own_handler_once(world, tmp_path, signum, target):
    """Ctrl+C from a script (``kill -INT -PGID``), ``timeout``, ``kill 0``: one SIGINT, as
    upstream's process gets; uvicorn would force-exit on a second one.
    """
    log = tmp_path / "serve.log"
    proc = _start(SERVE, world.environ(), log, start_new_session=True)
    _serving(world, proc)
    _sender(proc.pid, group=target == "group")(signum)
    assert proc.wait(timeout=30) == 128 + signum
    assert world.received() == [signal.Signals(signum).name]
    assert "again" not in log.read_text()


# -- a refused fork ------------------------------------------------------------------


def _unused_uid() -> int:
    """A user id no account and no process has: its process count is serve's alone."""
    used = {p.info["uids"].real for p in psutil.process_iter(["uids"]) if p.info["uids"]}
    for uid in range(61000 + os.getpid() % 1000, 65000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if uid not in used:
                return uid
    pytest.skip("no unused user id")


@pytest.mark.parametrize(("limit", "who"), [(1, "serve"), (2, "the supervisor")])
def test_a_fork_refused_by_the_process_limit_is_one_line_and_leaves_nothing(tmp_path, limit, who):
    """``ulimit -u``: serve (one process) or the supervisor (the second) cannot fork."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as an unused user id")
    uid = _unused_uid()
    user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    probe = [*user, sys.executable, "-c", "import psutil, sglang_backends"]
    if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        pytest.skip("another user cannot run this interpreter and its packages")
    command = [*user, *SERVE, "m"]

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))

    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        proc = subprocess.run(
            command,
            env=clean_environ(os.environ),
            stdout=out,
            stderr=err,
            preexec_fn=limited,
            cwd="/",
            timeout=60,
            check=False,
        )
    stderr = (tmp_path / "err").read_text()
    assert proc.returncode == 1, stderr
    assert stderr.splitlines() == [
        f"sglang-backends serve: error: fork failed: {os.strerror(errno.EAGAIN)} (RLIMIT_NPROC?)"
    ], who
    left = [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"].real == uid]
    assert left == []


# -- the guarantees, as PID 1 and as an unprivileged user too -------------------------

LAUNCHERS = ["plain", "pid-1", "nobody"]


@dataclass
class Launched:
    """A serve started by a launcher: the process started, and serve's own pid."""

    proc: subprocess.Popen[bytes]
    serve: int


def _prefix(how: str) -> list[str]:
    if how == "pid-1":
        if shutil.which("unshare") is None:
            pytest.skip("needs unshare")
        probe = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
        if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
            pytest.skip("PID namespaces are not permitted here")
        return ["unshare", "--pid", "--fork", "--mount-proc"]
    if how == "nobody":
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            pytest.skip("needs root and setpriv to run as an unprivileged user")
        command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        probe = [*command, sys.executable, "-c", "import psutil, sglang_backends"]
        if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
            pytest.skip("the unprivileged user cannot run this interpreter and its packages")
        return command
    return []


def _launch(how: str, env: dict[str, str], log: Path, **popen) -> Launched:
    """Start serve as *how* says; serve's pid is PID 1 of the namespace under ``pid-1``."""
    proc = _start([*_prefix(how), *SERVE], env, log, start_new_session=True, **popen)
    serve = proc.pid
    if how == "pid-1":
        found = wait_for(lambda: psutil.Process(proc.pid).children(), process=proc, what="PID 1")
        [pid_1] = found
        serve = pid_1.pid
    return Launched(proc, serve)


@pytest.mark.parametrize("how", LAUNCHERS)
@pytest.mark.parametrize("ending", ["return", "group-sigterm"])
def test_no_process_outlives_serve(world, tmp_path, how, ending):
    """A worker and a daemon: none outlives serve, whether run() returns or a script's
    ``kill 0`` stops it (then the backend's handler runs once).
    """
    env = world.environ(SIGNALS_DAEMON="1", SIGNALS_WORKER="deaf")
    if ending == "return":
        env.update(SIGNALS_FOR="4")
    launched = _launch(how, env, tmp_path / "serve.log")
    _serving(world, launched.proc)
    tree = descendants(launched.proc.pid)
    assert len(tree) >= 4  # the supervisor, the backend process, its worker, the daemon
    if ending == "return":
        assert launched.proc.wait(timeout=30) == 0
        assert world.received() == []
    else:
        os.killpg(launched.proc.pid, signal.SIGTERM)
        assert launched.proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert world.received() == ["SIGTERM"]
    wait_for(lambda: not alive(tree), timeout=15, what=f"{alive(tree)} to end")


@pytest.mark.parametrize("how", LAUNCHERS)
def test_a_second_stop_signal_kills_everything_at_once(world, tmp_path, how):
    env = world.environ(SIGNALS_STOP="never", SIGNALS_WORKER="deaf")
    env["OS_SERVE_BACKENDS__STOP_TIMEOUT"] = "60"
    log = tmp_path / "serve.log"
    launched = _launch(how, env, log)
    _serving(world, launched.proc)
    tree = descendants(launched.proc.pid)
    os.killpg(launched.proc.pid, signal.SIGINT)
    wait_for(lambda: "Received SIGINT" in log.read_text(), process=launched.proc)
    time.sleep(0.3)
    assert world.received() == ["SIGINT"]  # the group's signal, once
    started = time.monotonic()
    os.killpg(launched.proc.pid, signal.SIGINT)
    assert launched.proc.wait(timeout=30) == 128 + signal.SIGINT
    assert time.monotonic() - started < 20  # not the 60 s stop timeout
    wait_for(lambda: not alive(tree), timeout=15, what=f"{alive(tree)} to end")


@pytest.mark.parametrize("how", LAUNCHERS)
def test_the_stop_bound_holds_for_a_backend_that_ignores_the_stop(world, tmp_path, how):
    """SIGTERM to serve's process group (as ``timeout`` sends it): a backend that keeps
    serving and a deaf worker are killed after the stop timeout each (0.5 s).
    """
    env = world.environ(SIGNALS_STOP="never", SIGNALS_WORKER="deaf")
    env["OS_SERVE_BACKENDS__STOP_TIMEOUT"] = "0.5"
    log = tmp_path / "serve.log"
    launched = _launch(how, env, log)
    _serving(world, launched.proc)
    tree = descendants(launched.proc.pid)
    started = time.monotonic()
    os.killpg(launched.proc.pid, signal.SIGTERM)
    assert launched.proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 10  # 2 x 0.5 s, with a wide margin
    assert not alive(tree)
    assert "did not stop within 0.5s" in log.read_text()
    assert world.received() == ["SIGTERM"]


@pytest.mark.parametrize("how", LAUNCHERS)
def test_kubernetes_grace_period(world, tmp_path, how):
    """The kubelet's SIGTERM to the container's PID 1, SIGKILL at the grace period's end.

    With a stop timeout of 1 s, the backend drains (its handler runs once),
    its deaf worker is killed, and serve is gone well within a grace period
    of 10 s: nothing is left for the SIGKILL.
    """
    env = world.environ(SIGNALS_WORKER="deaf", SIGNALS_DRAIN="0.5")
    launched = _launch(how, env, tmp_path / "serve.log")
    _serving(world, launched.proc)
    tree = descendants(launched.proc.pid)
    os.kill(launched.serve, signal.SIGTERM)
    try:
        status = launched.proc.wait(timeout=10)
    finally:
        kill_all([launched.proc.pid, *tree])  # the grace period is over
    assert status == 128 + signal.SIGTERM
    assert not alive(tree)
    assert world.received() == ["SIGTERM"]


@pytest.mark.parametrize("how", LAUNCHERS)
def test_eight_serves_stopped_at_once(world, tmp_path, how):
    """Eight serves in one process group, stopped by one signal to it (a script's ``kill 0``)."""
    env = world.environ(SIGNALS_WORKER="deaf", SIGNALS_DRAIN="0.2")
    first: subprocess.Popen[bytes] | None = None
    serves = []
    for number in range(8):
        own = {
            "SIGNALS_LOG": str(world.path / f"signals-{number}.log"),
            "SIGNALS_STATE": str(world.path / f"state-{number}.json"),
        }
        leader = 0 if first is None else first.pid
        command = [*_prefix(how), *SERVE]
        proc = _start(
            command,
            {**env, **own},
            tmp_path / f"serve-{number}.log",
            preexec_fn=lambda leader=leader: os.setpgid(0, leader),
        )
        first = first or proc
        serves.append(proc)
        world.started.append(proc.pid)
    for number, proc in enumerate(serves):
        _serving(world, proc, world.path / f"state-{number}.json")
    tree = [p for proc in serves for p in descendants(proc.pid)]
    assert first is not None
    os.killpg(first.pid, signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in serves] == [128 + signal.SIGTERM] * 8
    wait_for(lambda: not alive(tree), timeout=15, what=f"{alive(tree)} to end")
    for number in range(8):
        assert world.received(world.path / f"signals-{number}.log") == ["SIGTERM"], number
