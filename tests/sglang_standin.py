"""A stand-in ``sglang`` distribution that records what the host asks of it.

It provides the parts of SGLang that :mod:`sglang_backends._sglang` uses, with
SGLang's names and signatures, and appends one JSON event per call to
``$SGLANG_STANDIN_LOG``: importing the package, ``suppress_noisy_warnings()``,
``load_plugins()`` (and each
general plugin it runs), ``apply_plugin_hooks()``, the detector functions,
``prepare_server_args``, ``run_server`` and ``execute_serve_cmd``. Its
``sglang.cli.serve_backends`` behaves as upstream's registry: it accepts only
its own ``ServeBackend`` and ``ServeBackendDetection``. Only the
GPU servers are fakes; the distribution is really installed (dist-info and
modules) on a test's plugin site.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from sglang_backends._core.names import GENERAL_PLUGINS_GROUP
from sglang_backends.testing import PluginSite

#: The closing note the stand-in's ``sglang.cli.main`` provides.
NOTE = "Stand-in cookbook note: see the cookbook for your model."

_RECORD = """
import json, os

def record(event, **details):
    if "SGLANG_STANDIN_LOG" not in os.environ:
        return  # serving for a plugin's own test: nothing to record
    with open(os.environ["SGLANG_STANDIN_LOG"], "a", encoding="utf-8") as stream:
        stream.write(json.dumps({"event": event, **details}) + "\\n")
"""

MODULES = {
    "sglang/__init__.py": """
        from sglang._record import record
        record("import sglang")
        """,
    "sglang/_record.py": _RECORD,
    "sglang/srt/__init__.py": "",
    "sglang/srt/plugins/__init__.py": """
        import os
        from importlib.metadata import entry_points
        from sglang._record import record

        _plugins_loaded = False

        def load_plugins():
            global _plugins_loaded
            record("load_plugins")
            if os.environ.get("SGLANG_STANDIN_PLUGINS_FAIL"):
                raise RuntimeError("hook target sglang.srt.nowhere not found")
            if _plugins_loaded:
                return
            _plugins_loaded = True
            allowed = {n.strip() for n in os.environ.get("SGLANG_PLUGINS", "").split(",")}
            for entry_point in entry_points(group="sglang.srt.plugins"):
                if allowed - {""} and entry_point.name not in allowed:
                    continue  # SGLang's allow-list
                entry_point.load()()
        """,
    "sglang/srt/utils/__init__.py": "",
    "sglang/srt/utils/common.py": """
        from sglang._record import record

        def suppress_noisy_warnings():
            record("suppress_noisy_warnings")
        """,
    "sglang/srt/server_args.py": """
        import argparse, sys
        from sglang._record import record

        def prepare_server_args(argv):
            record("prepare_server_args", argv=list(argv))
            parser = argparse.ArgumentParser(prog="sglang serve", description="LLM server")
            parser.add_argument("--model-path")
            parser.add_argument("--tp", type=int, default=1)
            args, _ = parser.parse_known_args(argv)
            return vars(args)
        """,
    "sglang/launch_server.py": """
        from sglang._record import record

        def run_server(server_args):
            record("run_server", server_args=server_args)
        """,
    "sglang/cli/__init__.py": "",
    "sglang/cli/main.py": f"""
        COOKBOOK_EPILOG = {NOTE!r}
        """,
    "sglang/cli/serve_backends.py": """
        # SGLang 0.5.23's contract and registry, as upstream behaves: its own
        # classes only (isinstance), detections compared with `is MATCH`.
        import enum, logging
        from dataclasses import dataclass
        from importlib.metadata import entry_points

        SERVE_BACKENDS_GROUP = "sglang.serve_backends"
        SERVE_BACKEND_API_VERSION = 1
        RESERVED_SERVE_BACKEND_NAMES = frozenset({"auto"})
        LOG = logging.getLogger(__name__)

        class ServeBackendDetection(str, enum.Enum):
            MATCH = "match"
            NO_MATCH = "no_match"
            UNKNOWN = "unknown"

        @dataclass(frozen=True)
        class ServeRequest:
            argv: tuple
            model_path: object
            model_path_is_positional: bool = False

        @dataclass(frozen=True)
        class ServeBackend:
            api_version: int
            run: object
            detect: object = None
            requires_model_path: bool = True

        @dataclass(frozen=True)
        class RegisteredServeBackend:
            name: str
            backend: ServeBackend
            distribution: object = None

        class ServeBackendRegistry:
            def __init__(self, builtins):
                if set(builtins) & RESERVED_SERVE_BACKEND_NAMES:
                    raise ValueError("Reserved serve backend names cannot be used")
                self._builtins = dict(builtins)
                self._found = {}
                for point in entry_points(group=SERVE_BACKENDS_GROUP):
                    self._found.setdefault(point.name, []).append(point)
                clash = (set(self._builtins) | RESERVED_SERVE_BACKEND_NAMES) & set(self._found)
                if clash:
                    raise RuntimeError(
                        "Out-of-tree serve backends cannot replace reserved or built-in "
                        "backends: " + ", ".join(sorted(clash))
                    )
                self._cache = {
                    name: RegisteredServeBackend(name, backend)
                    for name, backend in self._builtins.items()
                }

            @property
            def available_names(self):
                return (*self._builtins, *sorted(set(self._found) - set(self._builtins)))

            @staticmethod
            def _provider(point):
                dist = getattr(point, "dist", None)
                return getattr(dist, "name", None) or point.value

            def get(self, name):
                if name in self._cache:
                    return self._cache[name]
                points = self._found.get(name, [])
                if not points:
                    raise ValueError(f"Unknown serve backend {name!r}.")
                if len(points) > 1:
                    providers = ", ".join(sorted(self._provider(p) for p in points))
                    raise RuntimeError(
                        f"Multiple distributions register serve backend {name!r}: {providers}."
                    )
                try:
                    factory = points[0].load()
                    if not callable(factory):
                        raise TypeError("the entry point must resolve to a callable factory")
                    backend = factory()
                except Exception as exc:
                    raise RuntimeError(
                        f"Failed to load serve backend {name!r} from "
                        f"{self._provider(points[0])}: {exc}"
                    ) from exc
                if not isinstance(backend, ServeBackend):
                    raise TypeError(
                        f"Serve backend {name!r} factory returned {type(backend).__name__}; "
                        "expected sglang.cli.serve_backends.ServeBackend."
                    )
                if backend.api_version != SERVE_BACKEND_API_VERSION:
                    raise RuntimeError(
                        f"Serve backend {name!r} uses API version {backend.api_version}; "
                        f"this SGLang release requires version {SERVE_BACKEND_API_VERSION}."
                    )
                dist = getattr(points[0], "dist", None)
                registered = RegisteredServeBackend(name, backend, getattr(dist, "name", None))
                self._cache[name] = registered
                return registered

            def auto_detect(self, request):
                matches = []
                for name in self.available_names:
                    if name == "llm":
                        continue
                    try:
                        registered = self.get(name)
                        if registered.backend.detect is None:
                            continue
                        answer = registered.backend.detect(request)
                        if not isinstance(answer, ServeBackendDetection):
                            raise TypeError(
                                "detector must return ServeBackendDetection, got "
                                + type(answer).__name__
                            )
                        if answer is ServeBackendDetection.MATCH:
                            matches.append(registered)
                    except Exception as exc:
                        LOG.warning("Skipping automatic detection for serve backend %r: %s",
                                    name, exc)
                if len(matches) > 1:
                    names = ", ".join(match.name for match in matches)
                    raise RuntimeError(f"Multiple serve backends matched this request: {names}.")
                return matches[0] if matches else self.get("llm")
        """,
    "sglang/cli/serve.py": """
        # SGLang 0.5.23's dispatch, as upstream behaves: run() in this one
        # process, Python's own signal handling, then every child killed.
        import psutil
        from sglang.cli.serve_backends import ServeBackend, ServeBackendRegistry, ServeRequest
        from sglang.launch_server import run_server
        from sglang.srt.server_args import prepare_server_args

        def _run_llm(request):
            run_server(prepare_server_args(list(request.argv)))

        def _model_type(argv):
            name, rest, i = "auto", [], 0
            while i < len(argv):
                if argv[i] == "--model-type":
                    name, i = argv[i + 1], i + 2
                    continue
                if argv[i].startswith("--model-type="):
                    name = argv[i].partition("=")[2]
                else:
                    rest.append(argv[i])
                i += 1
            return name, rest

        def _model_path(argv):
            for i, arg in enumerate(argv):
                if arg in ("--model-path", "--model") and i + 1 < len(argv):
                    return argv[i + 1]
            return None

        def serve(args, extra_argv):
            name, argv = _model_type(list(extra_argv))
            positional = bool(argv) and not argv[0].startswith("-")
            if positional:
                argv = ["--model-path", *argv]
            request = ServeRequest(tuple(argv), _model_path(argv), positional)
            registry = ServeBackendRegistry({"llm": ServeBackend(api_version=1, run=_run_llm)})
            if "-h" in argv or "--help" in argv:
                if name != "auto":
                    registry.get(name).backend.run(request)
                return
            try:
                if name == "auto":
                    registered = registry.auto_detect(request)
                else:
                    registered = registry.get(name)
                registered.backend.run(request)
            finally:
                for child in psutil.Process().children(recursive=True):
                    try:
                        child.kill()
                    except psutil.Error:
                        pass
        """,
    "sglang/cli/utils.py": """
        import json, os, time
        from sglang._record import record

        # SGLang's import is slow (torch); the host must pay it while loading.
        time.sleep(float(os.environ.get("SGLANG_STANDIN_IMPORT_DELAY", "0")))

        def get_is_diffusion_model(model_path):
            record("get_is_diffusion_model", model_path=model_path)
            if model_path.startswith("hub/") and "diffusion" in model_path:
                return True  # what SGLang's hub lookup would find
            index = os.path.join(model_path, "model_index.json")
            if os.path.isfile(index):
                with open(index) as stream:
                    return "_diffusers_version" in json.load(stream)
            return False

        def get_pipeline_class_name(argv):
            for i, arg in enumerate(argv):
                if arg == "--pipeline-class-name" and i + 1 < len(argv):
                    return argv[i + 1]
            return None

        def is_registered_native_pipeline(name):
            record("is_registered_native_pipeline", name=name)
            return name == "StandInNativePipeline"
        """,
    "sglang/multimodal_gen/__init__.py": "",
    "sglang/multimodal_gen/runtime/__init__.py": "",
    "sglang/multimodal_gen/runtime/platforms/__init__.py": "",
    "sglang/multimodal_gen/runtime/platforms/plugins.py": """
        from sglang._record import record

        def apply_plugin_hooks():
            record("apply_plugin_hooks")
        """,
    "sglang/multimodal_gen/runtime/entrypoints/__init__.py": "",
    "sglang/multimodal_gen/runtime/entrypoints/cli/__init__.py": "",
    "sglang/multimodal_gen/runtime/entrypoints/cli/serve.py": """
        from sglang._record import record

        def add_multimodal_gen_serve_args(parser):
            parser.add_argument("--model-path", help="the diffusion model")
            parser.add_argument("--num-gpus", type=int, default=1, help="GPUs to use")

        def execute_serve_cmd(args, unknown):
            record(
                "execute_serve_cmd",
                model_path=args.model_path,
                num_gpus=args.num_gpus,
                rest=list(unknown),
                explicit=sorted(getattr(args, "_sglang_explicit_arg_names", ())),
            )
        """,
}

#: The diffusion entry point of an SGLang installed without ``sglang[diffusion]``.
WITHOUT_DIFFUSION = {
    "sglang/multimodal_gen/runtime/entrypoints/cli/serve.py": """
        raise ImportError("No module named 'imageio'")
        """,
}

#: A light plugin recording its ``run()``.
LIGHT_PLUGIN = """
import argparse
from sglang_backends import ServeBackend

def run(request):
    if "--help" in request.argv:
        print("light backend help")
        return
    import json, os
    with open(os.environ["SGLANG_STANDIN_LOG"], "a", encoding="utf-8") as stream:
        stream.write(json.dumps({"event": "run light", "argv": list(request.argv)}) + "\\n")

def run_argparse(request):
    argparse.ArgumentParser(prog="exiting").parse_args(list(request.argv))

def light():
    return ServeBackend(api_version=1, run=run)

def exiting():
    return ServeBackend(api_version=1, run=run_argparse)
"""

#: A general (hook) plugin recording that SGLang ran it.
GENERAL_PLUGIN = """
import json, os

def register():
    with open(os.environ["SGLANG_STANDIN_LOG"], "a", encoding="utf-8") as stream:
        stream.write(json.dumps({"event": "general plugin"}) + "\\n")
"""


#: What an SGLang 0.5.18 lacks that the host uses: ``load_plugins`` is there
#: from 0.5.12 but is removed here too, to check every guard at once.
OLDER_RELEASE = {
    "sglang/srt/plugins/__init__.py": None,  # before 0.5.12
    "sglang/multimodal_gen/runtime/platforms/plugins.py": None,  # before 0.5.21
    "sglang/cli/main.py": "",  # no COOKBOOK_EPILOG before 0.5.21
    "sglang/cli/utils.py": """
        import json, os
        from sglang._record import record

        def get_is_diffusion_model(model_path):
            record("get_is_diffusion_model", model_path=model_path)
            return model_path.startswith("hub/") and "diffusion" in model_path
        """,  # no pipeline check before 0.5.23
}


def install_sglang(site: PluginSite, *, diffusion: bool = True, older: bool = False) -> None:
    """Install the stand-in ``sglang`` on *site*: 0.5.23, or an older release lacking
    :data:`OLDER_RELEASE`'s parts; without diffusion support if asked."""
    modules = dict(MODULES)
    if not diffusion:
        modules.update(WITHOUT_DIFFUSION)
    if older:
        for relative, source in OLDER_RELEASE.items():
            if source is None:
                del modules[relative]
            else:
                modules[relative] = source
    site.install("sglang", version="0.5.18" if older else "0.5.23", modules=modules)


#: A fork on the index that ships the ``sglang`` import package without the serve-backend API.
FORK = "sglang-kt"


def install_fork(site: PluginSite, name: str = FORK, version: str = "0.7.2") -> None:
    """Install a fork of SGLang on *site*: distribution *name* shipping the stand-in's
    ``sglang`` package without ``sglang/cli/serve_backends.py`` (SGLang's serve-backend API);
    importing any of it is recorded, as the stand-in's is."""
    modules = {k: v for k, v in MODULES.items() if k != "sglang/cli/serve_backends.py"}
    site.install(name, version=version, modules=modules)


def remove_diffusion_support(site: PluginSite) -> None:
    """Make the installed stand-in an SGLang without ``sglang[diffusion]``."""
    for relative, source in WITHOUT_DIFFUSION.items():
        (site.path / relative).write_text(textwrap.dedent(source), encoding="utf-8")


def install_light_plugin(site: PluginSite) -> None:
    """Install ``light`` (records its run) and ``exiting`` (argparse: exits on --help)."""
    site.install(
        "light-runtime",
        entry_points={"light": "light_runtime:light", "exiting": "light_runtime:exiting"},
        modules={"light_runtime.py": LIGHT_PLUGIN},
    )


def install_general_plugin(site: PluginSite, name: str = "hooks") -> None:
    """Install a general plugin *name* in SGLang's ``sglang.srt.plugins`` group."""
    site.install(
        f"{name}-plugin",
        entry_points={name: f"{name}_general_plugin:register"},
        group=GENERAL_PLUGINS_GROUP,
        modules={f"{name}_general_plugin.py": GENERAL_PLUGIN},
    )


def events(log: Path) -> list[dict[str, object]]:
    """The events recorded so far, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def names(log: Path) -> list[object]:
    """The names of the events recorded so far, in order."""
    return [event["event"] for event in events(log)]
