"""Whether SGLang is installed as a host, found without importing it; and importing it.

SGLang counts as installed where its ``sglang`` package holds the serve-backend
API. :func:`load_sglang` is the one way this package imports SGLang's
modules (lazily: importing SGLang takes seconds), after SGLang's warning filters;
:func:`import_sglang` logs its failure instead, so that without SGLang (or with an
older release) each use falls back as doc/source/user/operators.rst describes.
Also what each built-in needs installed, all the general help needs of them.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import os
from collections.abc import Callable, Iterable
from types import ModuleType

LOG = logging.getLogger(__name__)

#: What to install for each built-in to serve, by name.
INSTALL_COMMANDS = {"llm": "pip install sglang", "diffusion": 'pip install "sglang[diffusion]"'}
#: What ``sglang serve --model-type diffusion --help`` prints without diffusion support.
DIFFUSION_INSTALL_HINT = (
    f"Diffusion model support is not available. Install with: {INSTALL_COMMANDS['diffusion']}"
)
#: How ``list`` and the general help describe each built-in, in
#: :func:`default_builtins`'s order: all the general help needs of them, with
#: :func:`install_hint`.
BUILTIN_NOTES = {
    "llm": "built-in, SGLang's LLM server",
    "diffusion": "built-in, SGLang's diffusion server",
}

_quieted = False


def sglang_package() -> list[str] | None:
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
    places = sglang_package()
    return places is not None and has_serve_backend_api(places)


def has_serve_backend_api(places: Iterable[str]) -> bool:
    """Whether a module ``cli/serve_backends`` (source, bytecode or extension) is in *places*."""
    suffixes = importlib.machinery.all_suffixes()
    return any(
        os.path.isfile(os.path.join(place, "cli", "serve_backends" + suffix))
        for place in places
        for suffix in suffixes
    )


def install_hint(name: str) -> str:
    """What built-in *name* needs installed, for a status: its install command; beside an
    ``sglang`` package without SGLang's serve-backend API (a fork), a pointer to serve's
    error instead, which names that package's distribution and does not install over it.
    """
    places = sglang_package()
    if places is None or has_serve_backend_api(places):
        return INSTALL_COMMANDS[name]
    return (
        "the installed 'sglang' package lacks SGLang's serve-backend API: "
        f"see serve --model-type {name}"
    )


def quiet_sglang() -> None:
    """Apply SGLang's (cosmetic) warning filters once, as ``sglang serve`` does, before a use
    of installed SGLang."""
    global _quieted
    if _quieted:
        return
    # Set first: load_sglang calls back here.
    _quieted = True
    common = import_sglang(
        "sglang.srt.utils.common", "SGLang's warning filters were not applied: %s", expected=True
    )
    suppress = getattr(common, "suppress_noisy_warnings", None)
    if callable(suppress):
        suppress()


def load_sglang(module: str, *, filtered: bool = True) -> ModuleType:
    """SGLang's *module*, imported after SGLang's warning filters (unless not *filtered*).

    :raises ModuleNotFoundError: SGLang is not installed (a fork's ``sglang`` package is
        not SGLang: nothing of it is imported).
    :raises Exception: what importing *module* raises.
    """
    if not sglang_installed():
        raise ModuleNotFoundError("No module named 'sglang'", name="sglang")
    if filtered:
        quiet_sglang()
    return importlib.import_module(module)


def import_sglang(
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
    try:
        return load_sglang(module)
    except errors as exc:
        # An older SGLang lacks *module* (or a parent): not a fault.
        absent = getattr(exc, "name", None) or ""
        quiet = expected or (
            isinstance(exc, ModuleNotFoundError)
            and absent.startswith("sglang.")
            # *module* or a parent.
            and f"{module}.".startswith(f"{absent}.")
        )
        (LOG.debug if quiet else LOG.warning)(failure, detail(exc))
        return None
