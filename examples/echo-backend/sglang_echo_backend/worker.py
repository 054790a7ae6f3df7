"""An echo worker process: JSON requests on stdin, JSON replies on stdout.

The first line it writes says it is ready (``{"ready": PID}``), once it has
"loaded its model": here, slept ``$SGLANG_ECHO_WORKER_START_DELAY`` seconds
(default 0), standing in for the seconds a real runtime spends importing and
loading weights. After that, one line in, one line out. The worker exits
when its stdin closes, so it never outlives the server that started it,
even one killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

__all__ = ["START_DELAY_VARIABLE", "complete", "main"]

#: Seconds a worker waits before it says it is ready (a stand-in for loading a model).
START_DELAY_VARIABLE = "SGLANG_ECHO_WORKER_START_DELAY"


def complete(prompt: str, max_tokens: int | None) -> dict[str, Any]:
    """Echo *prompt*, cut to *max_tokens* whitespace-separated tokens."""
    words = prompt.split()
    finish_reason = "stop"
    text = prompt
    if max_tokens is not None and len(words) > max_tokens:
        text = " ".join(words[:max_tokens])
        finish_reason = "length"
    return {
        "text": text,
        "finish_reason": finish_reason,
        "prompt_tokens": len(words),
        "completion_tokens": len(text.split()),
        "worker": os.getpid(),
    }


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> int:
    """Load, say so, then serve requests from stdin until it closes."""
    time.sleep(float(os.environ.get(START_DELAY_VARIABLE) or 0))
    _reply({"ready": os.getpid()})
    for line in sys.stdin:
        job = json.loads(line)
        _reply(complete(job["prompt"], job.get("max_tokens")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
