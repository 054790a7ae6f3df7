"""Benchmark (h): how long stopping takes: a stop signal, a killed supervisor, a sweep.

Starts ``sglang-backends serve`` on a stand-in plugin whose ``run()``
starts a daemon (double fork, ``setsid()``) and sleeps, then measures the
time from the event to ``serve``'s exit:

* SIGTERM to ``serve`` (the backend unwinds at once; the daemon gets
  SIGTERM);
* SIGKILL to the supervisor while the backend ignores SIGTERM (``serve``
  stops the backend process and the marked daemon: SIGTERM, the stop
  timeout, then freeze and kill);

and, in this process, one scan of the whole process table for a tree's
mark (:func:`sglang_backends._serve.supervise.subreaper.marked`), what each pass of that
last-resort sweep costs. Stop timeout: 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import environ, ms, table

STAND_IN = """
import json, os, signal, time
from sglang_backends import ServeBackend

def run(request):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    if os.environ.get("BENCH_DEAF"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.environ["BENCH_READY"], "w") as stream:
        json.dump(os.getpid(), stream)
    while True:
        time.sleep(0.05)

def factory():
    return ServeBackend(api_version=1, run=run, requires_model_path=False)
"""


def _site(directory: Path) -> Path:
    from sglang_backends.testing import write_distribution

    write_distribution(
        directory,
        "bench-stop",
        entry_points={"bench_stop": "bench_stop_plugin:factory"},
        modules={"bench_stop_plugin.py": STAND_IN},
    )
    return directory


def _once(env: dict[str, str], ready: Path, *, kill_supervisor: bool) -> float:
    """Start serve, wait until the backend runs, trigger the stop; seconds until serve exits."""
    import psutil

    ready.unlink(missing_ok=True)
    command = [sys.executable, "-m", "sglang_backends", "serve", "--model-type", "bench_stop"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("serve did not start the stand-in backend")
            time.sleep(0.01)
        [supervisor] = psutil.Process(proc.pid).children()
        started = time.perf_counter()
        if kill_supervisor:
            supervisor.kill()
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        return time.perf_counter() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    from sglang_backends._serve.supervise.subreaper import marked

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        site = _site(root / "site")
        ready = root / "ready"
        env = {k: v for k, v in environ([site]).items() if not k.startswith("OS_SERVE_BACKENDS__")}
        env.update(SGLANG_BACKENDS_STOP_TIMEOUT="0.5", BENCH_READY=str(ready))
        deaf = {**env, "BENCH_DEAF": "1"}
        stop = [_once(env, ready, kill_supervisor=False) for _ in range(args.repeat)]
        killed = [_once(deaf, ready, kill_supervisor=True) for _ in range(args.repeat)]
    scans = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        marked("no-such-tree")
        scans.append(time.perf_counter() - started)
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    rows = [
        ["SIGTERM to serve: until serve exits", ms(statistics.median(stop) * 1000)],
        [
            "SIGKILL to the supervisor, backend deaf to SIGTERM: until serve exits",
            ms(statistics.median(killed) * 1000),
        ],
        [f"one scan for a mark over {processes} processes", ms(statistics.median(scans) * 1000)],
    ]
    return table(["case (stop timeout 0.5 s)", "median ms"], rows)


if __name__ == "__main__":
    print(main())
