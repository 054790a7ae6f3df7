"""SGLang as the host: the built-in backends, SGLang's general plugins, its help note.

The only module that imports ``sglang``: inside functions, after SGLang's warning
filters, each use guarded so that without SGLang (or with an older release) it
falls back as doc/source/user/operators.rst describes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sglang_backends._core.names import general_plugins_allowed
from sglang_backends._serve.argv import PROG, wants_help
from sglang_backends.errors import BackendLoadError, describe

if TYPE_CHECKING:
    from sglang_backends._core.discovery import InstalledDistribution
    from sglang_backends.contract import ServeBackend, ServeBackendDetection, ServeRequest

__all__ = [
    "BUILTIN_NOTES",
    "DIFFUSION_INSTALL_HINT",
    "GENERAL_PLUGINS_GROUP",
    "INSTALL_COMMANDS",
    "default_builtins",
    "detect_diffusion_offline",
    "diffusion_backend",
    "help_note",
    "install_hint",
    "run_diffusion",
    "run_general_plugins",
    "run_llm",
    "sglang_installed",
    "sglang_unusable",
]

LOG = logging.getLogger(__name__)

#: Entry-point group of SGLang's general (hardware and hook) plugins.
GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"
#: What to install for each built-in to serve, by name.
INSTALL_COMMANDS = {"llm": "pip install sglang", "diffusion": 'pip install "sglang[diffusion]"'}
#: What ``sglang serve --model-type diffusion --help`` prints without diffusion support.
DIFFUSION_INSTALL_HINT = (
    f"Diffusion model support is not available. Install with: {INSTALL_COMMANDS['diffusion']}"
)
#: How ``list`` and the general help describe each built-in, in
#: :func:`default_builtins`'s order: all the general help needs of them.
BUILTIN_NOTES = {
    "llm": f"built-in, SGLang's LLM server ({INSTALL_COMMANDS['llm']})",
    "diffusion": f"built-in, SGLang's diffusion server ({INSTALL_COMMANDS['diffusion']})",
}

_DIFFUSERS_INDEX_FILES = ("model_index.json", "modular_model_index.json")
_DIFFUSION_SERVE_MODULE = "sglang.multimodal_gen.runtime.entrypoints.cli.serve"

_general_plugins_lock = threading.Lock()
_general_plugins_done = False
_quieted = False


def _sglang_package() -> list[str] | None:
    """The directories of the first ``sglang`` package on the path, found unimported;
    ``None`` when there is none (or only a bare namespace directory)."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return list(spec.submodule_search_locations or ())


def sglang_installed() -> bool:
    """Whether SGLang is installed as a host: an ``sglang`` package holding SGLang's
    serve-backend API (``sglang/cli/serve_backends``, SGLang 0.5.18 and later), unimported.

    A fork shipping the ``sglang`` import package without that API (sglang-kt, say)
    is not SGLang here: nothing of it is imported, and :func:`sglang_unusable` says why.
    """
    places = _sglang_package()
    return places is not None and _has_serve_backend_api(places)


def _has_serve_backend_api(places: Iterable[str]) -> bool:
    """Whether a module ``cli/serve_backends`` (source, bytecode or extension) is in *places*."""
    suffixes = importlib.machinery.all_suffixes()
    return any(
        os.path.isfile(os.path.join(place, "cli", "serve_backends" + suffix))
        for place in places
        for suffix in suffixes
    )


def sglang_unusable() -> str | None:
    """Why an installed ``sglang`` package is not SGLang as a host, naming the distribution
    that provides it; ``None`` when there is no such package, or it is SGLang's.

    The provider is looked up only here (it reads every distribution's file list): an
    error's path, not serve's.
    """
    places = _sglang_package()
    if places is None or _has_serve_backend_api(places):
        return None
    return _unusable(_provider(places))


def _unusable(provider: tuple[str, str] | None) -> str:
    from sglang_backends.contract import SGLANG_CONTRACT_MODULE

    source = " ".join(provider) if provider else "a distribution its metadata does not name"
    return (
        f"the installed 'sglang' package (from {source}) lacks SGLang's serve-backend API "
        f"({SGLANG_CONTRACT_MODULE}, SGLang 0.5.18 or later)"
    )


def _provider(places: list[str]) -> tuple[str, str] | None:
    """The name and version of the distribution whose files are the ``sglang`` package at
    *places* (the first that lists an ``sglang`` package when none is there)."""
    import importlib.metadata

    candidates = importlib.metadata.packages_distributions().get("sglang") or _shipping_sglang()
    found = {os.path.realpath(place) for place in places}
    first = None
    for name in dict.fromkeys(candidates):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        named = (dist.metadata["Name"] or name, dist.version or "")
        first = first or named
        if os.path.realpath(str(dist.locate_file("sglang"))) in found:
            return named
    return first


def _shipping_sglang() -> list[str]:
    """The distributions whose ``RECORD`` lists an ``sglang`` file: what ``packages_distributions``
    infers from 3.11, where Python 3.10 reads only ``top_level.txt`` (which not every
    build backend writes)."""
    import importlib.metadata

    names = []
    for dist in importlib.metadata.distributions():
        try:
            if any(path.parts[0] == "sglang" for path in dist.files or ()):
                names.append(dist.metadata["Name"])
        except Exception as exc:  # noqa: BLE001 - an unreadable RECORD names nothing
            LOG.debug("Cannot read the files of %r: %s", dist, exc)
    return names


def install_hint(name: str) -> str:
    """What built-in *name* needs installed, for a status: its install command; beside an
    ``sglang`` package without SGLang's serve-backend API (a fork), a pointer to serve's
    error instead, which names that package's distribution and does not install over it.
    """
    places = _sglang_package()
    if places is None or _has_serve_backend_api(places):
        return INSTALL_COMMANDS[name]
    return (
        "the installed 'sglang' package lacks SGLang's serve-backend API: "
        f"see serve --model-type {name}"
    )


def _advice(name: str, provider: tuple[str, str] | None) -> str:
    """How to get SGLang for built-in *name* without overwriting *provider*'s ``sglang``."""
    from sglang_backends._core.discovery import normalize_distribution

    command = INSTALL_COMMANDS[name]
    if provider is not None and normalize_distribution(provider[0]) == "sglang":
        # SGLang itself, before 0.5.18
        return f"upgrade it with: {command.replace('pip install', 'pip install -U', 1)}"
    whose = f"{provider[0]}'s" if provider else "that"
    return (
        f"installing SGLang here would overwrite {whose} 'sglang' package, so install it in "
        f"an environment of its own: python -m venv sglang-env && sglang-env/bin/{command}"
    )


def _quiet_sglang() -> None:
    """Apply SGLang's (cosmetic) warning filters once, as ``sglang serve`` does, before a use."""
    global _quieted
    if _quieted or not sglang_installed():
        return
    _quieted = True  # first: _import_sglang calls back here
    common = _import_sglang(
        "sglang.srt.utils.common", "SGLang's warning filters were not applied: %s", expected=True
    )
    suppress = getattr(common, "suppress_noisy_warnings", None)
    if callable(suppress):
        suppress()


def _import_sglang(
    module: str,
    failure: str,
    *,
    errors: tuple[type[Exception], ...] = (Exception,),
    expected: bool = False,
    detail: Callable[[BaseException], str] = str,
) -> ModuleType | None:
    """SGLang's *module*, or ``None`` after logging *failure* (at DEBUG if *expected* or absent).

    Without SGLang (a fork's ``sglang`` package is not SGLang), nothing is imported.
    """
    if not sglang_installed():
        LOG.debug(failure, f"SGLang is not installed, so {module} was not imported")
        return None
    _quiet_sglang()
    try:
        return importlib.import_module(module)
    except errors as exc:
        # An older SGLang lacks *module* (or a parent): not a fault.
        absent = getattr(exc, "name", None) or ""
        quiet = expected or (
            isinstance(exc, ModuleNotFoundError)
            and absent.startswith("sglang.")
            and (module == absent or module.startswith(absent + "."))
        )
        (LOG.debug if quiet else LOG.warning)(failure, detail(exc))
        return None


def _missing(name: str, exc: Exception) -> BackendLoadError:
    places = _sglang_package()
    if places is not None and not _has_serve_backend_api(places):
        # A fork, or an SGLang before the API: nothing of it was imported.
        provider = _provider(places)
        return BackendLoadError(
            f"The {name!r} backend needs SGLang, but {_unusable(provider)}; "
            f"{_advice(name, provider)}"
        )
    return BackendLoadError(
        f"The {name!r} backend needs SGLang, which is not importable "
        f"({exc}); install it with: {INSTALL_COMMANDS[name]}"
    )


def _required(backend: str, module: str, name: str) -> Any:
    """*name* from SGLang's *module*, or a load error saying what *backend* needs installed."""
    if not sglang_installed():  # nothing of a fork is imported
        raise _missing(backend, ImportError("No module named 'sglang'"))
    _quiet_sglang()
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise _missing(backend, exc) from exc


def run_llm(request: ServeRequest) -> None:
    """Run SGLang's LLM server with the request's arguments, or print its help.

    :raises BackendLoadError: SGLang is not importable; the message says what to install.
    """
    if not sglang_installed():
        raise _missing("llm", ImportError("No module named 'sglang'"))
    if wants_help(request.argv):
        prepare_server_args = _required("llm", "sglang.srt.server_args", "prepare_server_args")
        with contextlib.suppress(SystemExit):  # argparse's --help exits; the help is wanted
            prepare_server_args(["--help"])
        return
    launch = _required("llm", "sglang.launch_server", "run_server")
    prepare_server_args = _required("llm", "sglang.srt.server_args", "prepare_server_args")
    launch(prepare_server_args(list(request.argv)))


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
        module = _import_sglang(
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
    hooks = _import_sglang(
        "sglang.multimodal_gen.runtime.platforms.plugins",
        "No diffusion plugin hooks in this SGLang: %s",
        errors=(ImportError,),
        expected=True,
    )
    apply_plugin_hooks = getattr(hooks, "apply_plugin_hooks", None)
    if callable(apply_plugin_hooks):  # SGLang 0.5.21+
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
    from sglang_backends.contract import ServeBackendDetection

    path = request.model_path
    if not path:
        return ServeBackendDetection.UNKNOWN
    try:
        if not os.path.isdir(path):
            return ServeBackendDetection.UNKNOWN
        for name in _DIFFUSERS_INDEX_FILES:
            index = os.path.join(path, name)
            if os.path.isfile(index):
                import json  # not for the general help

                with open(index, encoding="utf-8") as stream:
                    data = json.load(stream)
                if isinstance(data, dict) and "_diffusers_version" in data:
                    return ServeBackendDetection.MATCH
                return ServeBackendDetection.NO_MATCH
    except (OSError, ValueError):
        return ServeBackendDetection.UNKNOWN
    return ServeBackendDetection.NO_MATCH


def diffusion_backend() -> ServeBackend:
    """Build the lazy ``diffusion`` built-in: SGLang's detector if any, else the offline one."""
    from sglang_backends.contract import ServeBackend, ServeBackendDetection

    utils = None
    if sglang_installed():
        utils = _import_sglang(
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
    from sglang_backends.contract import ServeBackend

    return {"llm": ServeBackend(api_version=1, run=run_llm), "diffusion": diffusion_backend}


def run_general_plugins(installed: Iterable[InstalledDistribution] | None = None) -> bool:
    """Run SGLang's general plugins once per process, unless none would load; then log
    one line naming them (``NAME (DIST)``), the seconds they took and how to skip them.

    :param installed: the distributions to look for them in (a survey's), by default all.
    :returns: whether SGLang's loader ran in this call.
    :raises BackendLoadError: SGLang's loader raised.
    """
    global _general_plugins_done
    with _general_plugins_lock:
        if _general_plugins_done:
            return False
        _general_plugins_done = True
        from sglang_backends._core.discovery import discover

        found = discover(GENERAL_PLUGINS_GROUP, installed)
        allowed = general_plugins_allowed(os.environ.get("SGLANG_PLUGINS", ""))
        names = set(found) if allowed is None else set(found) & allowed  # SGLang's own filter
        if not names:
            LOG.debug("No SGLang general plugin to load")
            return False
        if not sglang_installed():
            LOG.debug("General plugins are installed, but SGLang, which loads them, is not")
            return False
        started = time.perf_counter()
        # Before 0.5.12 the module does not exist; anything else is a fault.
        plugins = _import_sglang(
            "sglang.srt.plugins",
            "SGLang's general plugins were not loaded: %s",
            errors=(ImportError,),
        )
        if plugins is None:
            return False
        load = getattr(plugins, "load_plugins", None)
        if not callable(load):
            LOG.debug("This SGLang release has no sglang.srt.plugins.load_plugins")
            return False
        try:
            load()
        except Exception as exc:
            failed = f"SGLang's general plugins ({GENERAL_PLUGINS_GROUP}) failed to load"
            raise BackendLoadError(f"{failed}: {describe(exc)}") from exc
        # They can take seconds (smg-grpc-servicer's: 14 s): say whose, and how to skip them.
        shown = ", ".join(
            f"{name} ({plugin.provider})" for name in sorted(names) for plugin in found[name]
        )
        LOG.info(
            "Ran SGLang's general plugins in %.2f s: %s; SGLANG_PLUGINS=none skips them",
            time.perf_counter() - started,
            shown,
        )
        return True


# SGLang's help note: the file, from the distribution's root, and the name in it.
_NOTE_FILE, _NOTE_NAME = "sglang/cli/main.py", "COOKBOOK_EPILOG"


def help_note() -> str | None:
    """SGLang's closing note after a help (``COOKBOOK_EPILOG``), or ``None``; read, not imported."""
    if not sglang_installed():  # cheap: no package, no metadata lookup
        return None
    try:
        return _static_note()
    except ValueError as exc:
        LOG.debug("Importing sglang.cli.main for its help note: %s", exc)
    main = _import_sglang(  # a note is never worth a failure
        "sglang.cli.main", "No help note: sglang.cli.main failed to import: %s", expected=True
    )
    note = getattr(main, _NOTE_NAME, None)
    return note if isinstance(note, str) and note else None


def _static_note() -> str | None:
    """The note parsed from the ``sglang`` distribution's regular file, found without importing."""
    import importlib.metadata

    from sglang_backends._core.discovery import has_metadata, is_regular_file

    try:
        dist = importlib.metadata.distribution("sglang")
    except importlib.metadata.PackageNotFoundError as exc:
        raise ValueError("no sglang distribution is installed") from exc
    path = str(dist.locate_file(_NOTE_FILE))
    if os.path.lexists(path) and not is_regular_file(path):  # a FIFO, say: it could block
        LOG.debug("No help note: %s is not a regular file", path)
        return None
    if not is_regular_file(path):
        # Not where the distribution's root says: ask its RECORD (read only now: it is long).
        try:
            files = dist.files if has_metadata(dist, "RECORD") else None
        except OSError as exc:
            raise ValueError(str(exc)) from exc
        listed = [str(f.locate()) for f in files or () if f.as_posix() == _NOTE_FILE]
        if not listed or not is_regular_file(listed[0]):
            raise ValueError(f"no regular file {_NOTE_FILE} in the sglang distribution")
        path = listed[0]
    return _read_string(path, _NOTE_NAME) or None


def _read_string(path: str, name: str) -> str:
    """Module-level *name* of *path*: strings, ``+``, f-strings of names bound once; not run."""
    import ast  # only with SGLang installed

    try:
        with open(path, "rb") as stream:
            tree = ast.parse(stream.read(), filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        raise ValueError(f"{path} could not be read: {exc}") from exc
    bound: dict[str, list[ast.expr]] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                bound.setdefault(target.id, []).append(value)

    def evaluate(node: ast.expr, seen: frozenset[str]) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            values = bound.get(node.id, [])
            if len(values) != 1:
                how = "not bound" if not values else "bound more than once"
                raise ValueError(f"{node.id} is {how} at module level")
            if node.id in seen:
                raise ValueError(f"{node.id} refers to itself")
            return evaluate(values[0], seen | {node.id})
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return evaluate(node.left, seen) + evaluate(node.right, seen)
        if isinstance(node, ast.JoinedStr):
            return "".join(evaluate(part, seen) for part in node.values)
        if (
            isinstance(node, ast.FormattedValue)
            and node.conversion in (-1, ord("s"))
            and node.format_spec is None
        ):
            return evaluate(node.value, seen)
        raise ValueError(f"{ast.unparse(node)[:80]!r} is not a string literal")

    return evaluate(ast.Name(id=name), frozenset())
