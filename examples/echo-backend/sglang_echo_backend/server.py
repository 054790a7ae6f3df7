"""The echo server: a small OpenAI-style HTTP API backed by worker processes.

``GET /health``, ``GET /v1/models`` and ``POST /v1/completions`` (the
completion echoes the prompt). Requests are handled in threads and the echo
itself is computed by ``--workers`` child processes
(:mod:`sglang_echo_backend.worker`), so the server has real children to
clean up, as an inference runtime does.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["EchoServer", "Worker", "build_parser", "main"]

PROG = "sglang-backends serve --model-type echo"


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def build_parser() -> argparse.ArgumentParser:
    """The echo backend's own command line."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Serve an echo model over an OpenAI-style HTTP API.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
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
    """One worker child process and the lock serializing its pipe."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sglang_echo_backend.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lock = threading.Lock()

    def ask(self, job: dict[str, Any]) -> dict[str, Any]:
        """Send *job* and wait for the reply."""
        with self._lock:
            assert self.process.stdin is not None and self.process.stdout is not None
            self.process.stdin.write(json.dumps(job) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"echo worker {self.process.pid} exited")
        return json.loads(line)

    def alive(self) -> bool:
        """Whether the worker is still running."""
        return self.process.poll() is None

    def stop(self, timeout: float = 2.0) -> None:
        """Close its stdin (it exits), killing it if it does not."""
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

    def worker(self) -> Worker:
        """The next worker, round robin."""
        with self._next_lock:
            return self.workers[next(self._next)]


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
            alive = all(w.alive() for w in self.server.workers)
            status = HTTPStatus.OK if alive else HTTPStatus.SERVICE_UNAVAILABLE
            self._reply(status, {"status": "ok" if alive else "worker down"})
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
        worker = self.server.worker()
        try:
            replies = [worker.ask({"prompt": p, "max_tokens": max_tokens}) for p in prompts]
        except (OSError, RuntimeError) as exc:
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
    """Serve until interrupted; ``--help`` prints the options and exits."""
    args = build_parser().parse_args(list(argv))
    workers = [Worker() for _ in range(args.workers)]
    try:
        model = args.served_model_name or os.path.basename(os.path.normpath(args.model_path))
        server = EchoServer((args.host, args.port), model, workers)
        with server:
            host, port = server.server_address[:2]
            print(
                f"echo: serving {server.model!r} on http://{host}:{port} "
                f"with {len(workers)} worker(s)",
                file=sys.stderr,
                flush=True,
            )
            server.serve_forever()
    finally:
        for worker in workers:
            worker.stop()
