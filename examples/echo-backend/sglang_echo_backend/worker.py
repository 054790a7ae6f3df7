"""An echo worker process: JSON requests on stdin, JSON replies on stdout.

One line in, one line out. The worker exits when its stdin closes, so it
never outlives the server that started it, even one killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

__all__ = ["complete", "main"]


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


def main() -> int:
    """Serve requests from stdin until it closes."""
    # Ctrl+C reaches the whole process group; the server stops its workers
    # by closing their stdin, so an interrupt here would only print noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for line in sys.stdin:
        job = json.loads(line)
        reply = complete(job["prompt"], job.get("max_tokens"))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
