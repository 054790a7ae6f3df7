"""The echo server: a small OpenAI-style HTTP API backed by worker processes.

``GET /health``, ``GET /v1/models`` and ``POST /v1/completions`` (the
completion echoes the prompt). Requests are handled in threads and the echo
itself is computed by ``--workers`` child processes
(:mod:`sglang_echo_backend.worker`), so the server has real children to
clean up, as an inference runtime does.

Like a real runtime it is not ready at once: the HTTP server answers as soon
as it is bound, ``/health`` with ``503`` (``"loading"``) until every worker
has said it is ready, then ``200``. SIGINT (Ctrl+C) and SIGTERM stop it
quietly at any moment, the workers included.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from sglang_backends import host_prog

__all__ = ["EchoServer", "StopSignals", "Worker", "build_parser", "main"]


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def build_parser() -> argparse.ArgumentParser:
    """The echo backend's own command line."""
    # Each help says its default itself (ArgumentDefaultsHelpFormatter would add
    # a second "(default: ...)" to those, and "(default: None)" to the others).
    parser = argparse.ArgumentParser(
        # The host serving it: sglang-backends serve or sglang serve.
        prog=host_prog("echo"),
        description="Serve an echo model over an OpenAI-style HTTP API.",
    )
    parser.add_argument("--model-path", "--model", required=True, help="the model directory")
    parser.add_argument(
        "--served-model-name", help="model id in the API (default: the model directory's name)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument(
        "--port", type=int, default=30000, help="port to bind (default: %(default)s)"
    )
    parser.add_argument(
        "--workers", type=_positive, default=1, help="worker processes (default: %(default)s)"
    )
    return parser


class Worker:
    """One worker child process, whether it said it is ready, and the lock serializing its pipe."""

    def __init__(self) -> None:
        # A session of its own: Ctrl+C in a terminal signals the whole
        # foreground process group, and a worker interrupted while Python
        # starts prints a traceback. The server stops its workers itself.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sglang_echo_backend.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.ready = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._await_ready, name="echo-ready", daemon=True).start()

    def _await_ready(self) -> None:
        """Read the worker's first line, ``{"ready": PID}``; end of file means it died."""
        with self._lock:
            assert self.process.stdout is not None
            line = self.process.stdout.readline()
        try:
            if "ready" in json.loads(line):
                self.ready.set()
        except ValueError:
            pass  # exited (or garbled) before it was ready: alive() tells

    def ask(self, job: dict[str, Any]) -> dict[str, Any]:
        """Send *job* and wait for the reply."""
        with self._lock:
            assert self.process.stdin is not None and self.process.stdout is not None
            self.process.stdin.write(json.dumps(job) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"echo worker {self.process.pid} exited")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def alive(self) -> bool:
        """Whether the worker is still running."""
        return self.process.poll() is None

    def stop(self, timeout: float = 2.0) -> None:
        """Close its stdin (a ready worker exits), ending one still loading; kill if need be."""
        if not self.ready.is_set():
            self.process.terminate()
        with self._lock:  # after any request in flight
            if self.process.stdin is not None:
                try:
                    self.process.stdin.close()
                except OSError:
                    pass
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with self._lock:
            if self.process.stdout is not None:
                self.process.stdout.close()


class EchoServer(ThreadingHTTPServer):
    """The HTTP server, holding the model's name and the workers."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], model: str, workers: Sequence[Worker]) -> None:
        super().__init__(address, _Handler)
        self.model = model
        self.created = int(time.time())
        self.workers = tuple(workers)
        self._next = itertools.cycle(range(len(self.workers)))
        self._next_lock = threading.Lock()

    def state(self) -> str:
        """``"ok"`` once every worker is ready, ``"loading"`` before, ``"worker down"``."""
        if not all(w.alive() for w in self.workers):
            return "worker down"
        if not all(w.ready.is_set() for w in self.workers):
            return "loading"
        return "ok"

    def worker(self) -> Worker:
        """The next worker, round robin."""
        with self._next_lock:
            return self.workers[next(self._next)]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is one line; anything else is socketserver's report."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            peer = ":".join(map(str, client_address[:2]))
            _say(f"client {peer} closed the connection ({type(error).__name__})")
            return
        super().handle_error(request, client_address)


class StopSignals:
    """SIGINT and SIGTERM ask the server to stop instead of interrupting it.

    Whatever runs when the signal arrives (a worker starting, a request)
    finishes; :func:`main` then stops the server and its workers. On exit the
    handlers found on entry are put back and a signal received meanwhile is
    raised again, so the caller of ``run()`` sees it as if it had been
    delivered to it: ``sglang-backends serve`` exits with 130 or 143, and
    ``run()``'s ``stop_quietly()`` makes the same of it under ``sglang
    serve``. Outside the main thread (where handlers cannot be set) this
    does nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum

    def __exit__(self, *exc_info: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        if self.signum is not None and exc_info[0] is None:
            signal.raise_signal(self.signum)


def _error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


class _Handler(BaseHTTPRequestHandler):
    server: EchoServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Keep request logs off the terminal."""

    def _reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            state = self.server.state()
            status = HTTPStatus.OK if state == "ok" else HTTPStatus.SERVICE_UNAVAILABLE
            self._reply(status, {"status": state})
        elif self.path == "/v1/models":
            model = {
                "id": self.server.model,
                "object": "model",
                "created": self.server.created,
                "owned_by": "sglang-echo-backend",
            }
            self._reply(HTTPStatus.OK, {"object": "list", "data": [model]})
        else:
            self._reply(HTTPStatus.NOT_FOUND, _error(f"no route {self.path}", "not_found"))

    def do_POST(self) -> None:
        if self.path != "/v1/completions":
            self._reply(HTTPStatus.NOT_FOUND, _error(f"no route {self.path}", "not_found"))
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as exc:
            self._reply(HTTPStatus.BAD_REQUEST, _error(f"invalid JSON body: {exc}"))
            return
        model = body.get("model", self.server.model)
        if model != self.server.model:
            self._reply(HTTPStatus.NOT_FOUND, _error(f"model {model!r} is not served here"))
            return
        prompts = body.get("prompt", "")
        prompts = [prompts] if isinstance(prompts, str) else prompts
        max_tokens = body.get("max_tokens")
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            self._reply(HTTPStatus.BAD_REQUEST, _error("prompt must be a string or strings"))
            return
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 0):
            self._reply(HTTPStatus.BAD_REQUEST, _error("max_tokens must be an integer >= 0"))
            return
        state = self.server.state()
        if state != "ok":
            self._reply(HTTPStatus.SERVICE_UNAVAILABLE, _error(f"echo: {state}", "server_error"))
            return
        worker = self.server.worker()
        try:
            replies = [worker.ask({"prompt": p, "max_tokens": max_tokens}) for p in prompts]
        except (OSError, ValueError, RuntimeError) as exc:  # a worker died or was stopped
            self._reply(HTTPStatus.SERVICE_UNAVAILABLE, _error(str(exc), "server_error"))
            return
        prompt_tokens = sum(r["prompt_tokens"] for r in replies)
        completion_tokens = sum(r["completion_tokens"] for r in replies)
        self._reply(
            HTTPStatus.OK,
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.server.model,
                "system_fingerprint": f"echo-worker-{replies[0]['worker'] if replies else 0}",
                "choices": [
                    {
                        "index": i,
                        "text": r["text"],
                        "logprobs": None,
                        "finish_reason": r["finish_reason"],
                    }
                    for i, r in enumerate(replies)
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )


def main(argv: Sequence[str]) -> None:
    """Serve until SIGINT or SIGTERM; ``--help`` prints the options and exits.

    The HTTP server answers at once; ``/health`` says ``200`` only when every
    worker is ready. A stop signal ends the server and the workers quietly,
    then is handed back to the caller (see :class:`StopSignals`).
    """
    args = build_parser().parse_args(list(argv))
    model = args.served_model_name or os.path.basename(os.path.normpath(args.model_path))
    workers: list[Worker] = []
    with StopSignals() as stop:
        try:
            workers.extend(Worker() for _ in range(args.workers))
            with _bind(args.host, args.port, model, workers) as server:
                threading.Thread(target=server.serve_forever, name="echo-http", daemon=True).start()
                url = f"http://{args.host}:{server.server_address[1]}"
                _say(f"serving {model!r} on {url} with {len(workers)} worker(s)")
                shown = "loading"
                while stop.signum is None:
                    time.sleep(0.1)  # a signal interrupts the sleep; the handler sets signum
                    state = server.state()
                    if state != shown:
                        _say("ready" if state == "ok" else state)
                        shown = state
                _say(f"{signal.Signals(stop.signum).name} received, stopping")
                server.shutdown()
        finally:
            for worker in workers:
                worker.stop()


def _bind(host: str, port: int, model: str, workers: list[Worker]) -> EchoServer:
    """The server listening on *host*:*port*; a failure names the address it could not bind."""
    try:
        return EchoServer((host, port), model, workers)
    except OSError as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def _say(message: str) -> None:
    print(f"echo: {message}", file=sys.stderr, flush=True)
