"""SGLang's built-in backends, ``llm`` and ``diffusion``.

Each runs SGLang's own server, imported only when run
(:func:`sglang_backends._sglang.installed.load_sglang`); without SGLang a
run fails with what to install, and ``diffusion`` detects by SGLang's rule.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Callable
from typing import Any

from sglang_backends._core.names import PROG, wants_help
from sglang_backends._sglang import fork
from sglang_backends._sglang.installed import (
    DIFFUSION_INSTALL_HINT,
    INSTALL_COMMANDS,
    import_sglang,
    load_sglang,
    sglang_installed,
)
from sglang_backends.contract import ServeBackend, ServeBackendDetection, ServeRequest
from sglang_backends.errors import BackendLoadError, describe

_DIFFUSERS_INDEX_FILES = ("model_index.json", "modular_model_index.json")
_DIFFUSION_SERVE_MODULE = "sglang.multimodal_gen.runtime.entrypoints.cli.serve"


def _required(backend: str, module: str, name: str) -> Any:
    """*name* from SGLang's *module*, or a load error saying what *backend* needs installed."""
    try:
        return getattr(load_sglang(module), name)
    except (ImportError, AttributeError) as exc:
        unusable = fork.sglang_unusable(backend)
        if unusable is None:
            why = f"which is not importable ({exc}); install it with: {INSTALL_COMMANDS[backend]}"
        else:
            # A fork, or an SGLang before the API: nothing of it was imported.
            why = f"but {unusable}"
        raise BackendLoadError(f"The {backend!r} backend needs SGLang, {why}") from exc


def run_llm(request: ServeRequest) -> None:
    """Run SGLang's LLM server with the request's arguments, or print its help.

    :raises BackendLoadError: SGLang is not importable; the message says what to install.
    """
    if wants_help(request.argv):
        prepare = _required("llm", "sglang.srt.server_args", "prepare_server_args")
        # argparse's --help exits; the help is wanted.
        with contextlib.suppress(SystemExit):
            prepare(["--help"])
        return
    launch = _required("llm", "sglang.launch_server", "run_server")
    prepare = _required("llm", "sglang.srt.server_args", "prepare_server_args")
    launch(prepare(list(request.argv)))


def _diffusion_parser(
    add_args: Callable[[argparse.ArgumentParser], object],
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="SGLang Diffusion Model Serving")
    add_args(parser)
    return parser


def run_diffusion(request: ServeRequest) -> None:
    """Run SGLang's diffusion server with the request's arguments, or print its help.

    :raises BackendLoadError: diffusion support is not importable; it says what to install.
    """
    if wants_help(request.argv):
        module = import_sglang(
            _DIFFUSION_SERVE_MODULE,
            "SGLang's diffusion support is not importable: %s",
            errors=(ImportError,),
            expected=True,
        )
        add_args = getattr(module, "add_multimodal_gen_serve_args", None)
        if add_args is None:
            print(DIFFUSION_INSTALL_HINT)
        else:
            _diffusion_parser(add_args).print_help()
        return
    hooks = import_sglang(
        "sglang.multimodal_gen.runtime.platforms.plugins",
        "No diffusion plugin hooks in this SGLang: %s",
        errors=(ImportError,),
        expected=True,
    )
    apply_plugin_hooks = getattr(hooks, "apply_plugin_hooks", None)
    # SGLang 0.5.21 and later have it.
    if callable(apply_plugin_hooks):
        apply_plugin_hooks()
    add_args = _required("diffusion", _DIFFUSION_SERVE_MODULE, "add_multimodal_gen_serve_args")
    execute = _required("diffusion", _DIFFUSION_SERVE_MODULE, "execute_serve_cmd")
    parsed, remaining = _diffusion_parser(add_args).parse_known_args(list(request.argv))
    if request.model_path_is_positional:
        # SGLang tells arguments the user gave from parser defaults by this set.
        parsed._sglang_explicit_arg_names = {"model_path"}
    execute(parsed, remaining)


def detect_diffusion_offline(request: ServeRequest) -> ServeBackendDetection:
    """The ``diffusion`` detector without SGLang: SGLang's rule for a local directory.

    The first Diffusers index present decides (``_diffusers_version`` in it matches);
    anything but a readable local directory is ``UNKNOWN``. Never raises.
    """
    path = request.model_path
    # os.path.isdir and isfile never raise.
    if not path or not os.path.isdir(path):
        return ServeBackendDetection.UNKNOWN
    for name in _DIFFUSERS_INDEX_FILES:
        index = os.path.join(path, name)
        if os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as stream:
                    data = json.load(stream)
            except (OSError, ValueError):
                return ServeBackendDetection.UNKNOWN
            if isinstance(data, dict) and "_diffusers_version" in data:
                return ServeBackendDetection.MATCH
            break
    return ServeBackendDetection.NO_MATCH


def diffusion_backend() -> ServeBackend:
    """Build the lazy ``diffusion`` built-in: SGLang's detector if any, else the offline one."""
    utils = None
    if sglang_installed():
        utils = import_sglang(
            "sglang.cli.utils",
            "SGLang is installed but sglang.cli.utils failed to import (%s); "
            "diffusion detection uses the offline rule",
            detail=describe,
        )
    is_diffusion_model = getattr(utils, "get_is_diffusion_model", None)
    if not callable(is_diffusion_model):
        return ServeBackend(api_version=1, run=run_diffusion, detect=detect_diffusion_offline)
    pipeline_name = getattr(utils, "get_pipeline_class_name", None)
    is_native = getattr(utils, "is_registered_native_pipeline", None)

    def detect_diffusion(request: ServeRequest) -> ServeBackendDetection:
        """SGLang's diffusion detection: its model check, then a named native pipeline."""
        if request.model_path is None:
            return ServeBackendDetection.UNKNOWN
        if is_diffusion_model(request.model_path):
            return ServeBackendDetection.MATCH
        # 0.5.23+: a native diffusion pipeline chosen by name (--pipeline,
        # --pipeline-class-name or a --config naming one) is a diffusion request.
        if pipeline_name and is_native and is_native(pipeline_name(list(request.argv))):
            return ServeBackendDetection.MATCH
        return ServeBackendDetection.NO_MATCH

    return ServeBackend(api_version=1, run=run_diffusion, detect=detect_diffusion)


def default_builtins() -> dict[str, ServeBackend | Callable[[], ServeBackend]]:
    """The built-in backends by name: ``llm`` (the fallback) then ``diffusion`` (lazy)."""
    return {"llm": ServeBackend(api_version=1, run=run_llm), "diffusion": diffusion_backend}
