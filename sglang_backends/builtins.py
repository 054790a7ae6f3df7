"""The built-in backends, ``llm`` and ``diffusion``, as SGLang ships them.

Both import SGLang only inside ``run()``, so listing, detecting and serving a
plugin never pay for it, and a machine without SGLang gets a message saying
what to install rather than an ImportError at start-up.
"""

from __future__ import annotations

import os

from sglang_backends.contract import (
    ServeBackend,
    ServeBackendDetection,
    ServeRequest,
)

__all__ = ["default_builtins", "detect_diffusion", "run_diffusion", "run_llm"]


def _missing(what: str, install: str, exc: ImportError) -> RuntimeError:
    return RuntimeError(
        f"The {what} backend needs SGLang, which is not importable "
        f"({exc}); install it with: {install}"
    )


def run_llm(request: ServeRequest) -> None:
    """Run SGLang's LLM server (or print its help) with the request's arguments."""
    try:
        from sglang.launch_server import run_server
        from sglang.srt.server_args import prepare_server_args
    except ImportError as exc:
        raise _missing("'llm'", "pip install sglang", exc) from exc
    server_args = prepare_server_args(list(request.argv))
    run_server(server_args)


def run_diffusion(request: ServeRequest) -> None:
    """Run SGLang's multimodal (diffusion) server with the request's arguments."""
    try:
        from sglang.multimodal_gen.runtime.entrypoints.cli.serve import (
            add_multimodal_gen_serve_args,
            execute_serve_cmd,
        )
    except ImportError as exc:
        raise _missing("'diffusion'", 'pip install "sglang[diffusion]"', exc) from exc
    import argparse

    parser = argparse.ArgumentParser(prog="sglang-backends serve --model-type diffusion")
    add_multimodal_gen_serve_args(parser)
    args, unknown = parser.parse_known_args(list(request.argv))
    execute_serve_cmd(args, unknown)


def detect_diffusion(request: ServeRequest) -> ServeBackendDetection:
    """Claim a local diffusers model directory (one holding ``model_index.json``).

    Offline only: a local directory without that file is ``NO_MATCH``; no
    model path, or one that is not a local directory (a hub id), is
    ``UNKNOWN``. Never raises.
    """
    path = request.model_path
    if not path:
        return ServeBackendDetection.UNKNOWN
    try:
        if not os.path.isdir(path):
            return ServeBackendDetection.UNKNOWN
        if os.path.isfile(os.path.join(path, "model_index.json")):
            return ServeBackendDetection.MATCH
    except (OSError, ValueError):
        return ServeBackendDetection.UNKNOWN
    return ServeBackendDetection.NO_MATCH


def default_builtins() -> dict[str, ServeBackend]:
    """The built-in backends by name: ``llm`` (the fallback) then ``diffusion``."""
    return {
        "llm": ServeBackend(api_version=1, run=run_llm),
        "diffusion": ServeBackend(api_version=1, run=run_diffusion, detect=detect_diffusion),
    }
