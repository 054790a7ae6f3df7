"""An sglang-backends plugin: ``--model-type echo``.

The factory (this distribution's ``sglang.serve_backends`` entry point) and
the detector live here and import only the contract, so listing and
automatic detection stay cheap; the server is imported by ``run()``. The
first line of the factory's docstring is the backend's summary in
``sglang-backends show`` and in generated documentation.
"""

from __future__ import annotations

import os

from sglang_backends import (
    ServeBackend,
    ServeBackendDetection,
    ServeRequest,
    portable_backend,
    stop_quietly,
)

__all__ = ["MARKER", "detect", "make_backend", "run"]

#: A model directory holding a file of this name is an echo model.
MARKER = "echo"


def detect(request: ServeRequest) -> ServeBackendDetection:
    """Claim a local directory holding the ``echo`` marker file.

    Another local directory is ``NO_MATCH``; no model path or a hub id is
    ``UNKNOWN``. Offline and never raising.
    """
    path = request.model_path
    try:
        if not path or not os.path.isdir(path):
            return ServeBackendDetection.UNKNOWN
        if os.path.isfile(os.path.join(path, MARKER)):
            return ServeBackendDetection.MATCH
    except (OSError, ValueError):
        return ServeBackendDetection.UNKNOWN
    return ServeBackendDetection.NO_MATCH


def run(request: ServeRequest) -> None:
    """Parse the echo server's arguments and serve until stopped (or print help)."""
    from sglang_echo_backend.server import main

    with stop_quietly():  # a stop signal ends it cleanly under either host
        main(request.argv)


def make_backend() -> ServeBackend:
    """Echo backend: an OpenAI-style server that returns the prompt, for trying sglang-backends.

    It claims a model directory holding a file named ``echo``, answers
    ``/health`` with ``200`` once its worker processes are ready, and stops
    quietly on Ctrl+C or SIGTERM.
    """
    # portable_backend, not ServeBackend: SGLang's own `sglang serve` accepts it too.
    return portable_backend(api_version=1, run=run, detect=detect)
