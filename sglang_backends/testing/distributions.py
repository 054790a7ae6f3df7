"""Write real installed distributions into a directory, for tests.

A ``NAME-VERSION.dist-info`` directory with ``METADATA`` and ``entry_points.txt``,
plus the modules it ships: what an installer leaves, found by
:mod:`importlib.metadata` and stevedore once the directory is on ``sys.path``.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sglang_backends.names import SERVE_BACKENDS_GROUP

__all__ = ["PluginSite", "write_distribution"]


def write_distribution(
    root: str | os.PathLike[str],
    name: str,
    *,
    version: str = "1.0",
    entry_points: Mapping[str, str] | None = None,
    group: str = SERVE_BACKENDS_GROUP,
    modules: Mapping[str, str] | None = None,
    requires: Sequence[str] = (),
) -> Path:
    """Install distribution *name* into *root* and return its dist-info path.

    :param entry_points: backend name to ``module:attr`` target, in *group*.
    :param requires: ``Requires-Dist`` lines (``sglang==0.5.22``, ``pytest; extra == "test"``).
    :param modules: relative file path (``pkg/mod.py``) to source; the source
        is dedented, so triple-quoted blocks can be indented in tests.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[-_.]+", "_", name)
    info = root / f"{safe}-{version}.dist-info"
    info.mkdir()
    requirements = "".join(f"Requires-Dist: {line}\n" for line in requires)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requirements}",
        encoding="utf-8",
    )
    if entry_points:
        lines = [f"[{group}]"] + [f"{key} = {value}" for key, value in entry_points.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for relative, source in (modules or {}).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    importlib.invalidate_caches()
    return info


class PluginSite:
    """A directory of installed distributions, like a private ``site-packages``.

    Use :meth:`activated` to put it on ``sys.path`` for this interpreter and
    :meth:`environ` to hand it to a subprocess.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._modules: set[str] = set()

    def install(
        self, name: str, *, modules: Mapping[str, str] | None = None, **options: Any
    ) -> Path:
        """Install a distribution here; see :func:`write_distribution` for the options.

        Modules it ships that were already imported are dropped from
        :data:`sys.modules`, so the next import sees the new code.
        """
        tops = {Path(relative).parts[0].removesuffix(".py") for relative in modules or {}}
        self._modules |= tops
        self._forget(tops)
        return write_distribution(self.path, name, modules=modules, **options)

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A copy of *base* (default ``os.environ``) with this site on ``PYTHONPATH``."""
        env = dict(os.environ if base is None else base)
        parts = [str(self.path)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(parts)
        return env

    def forget_modules(self) -> None:
        """Drop modules imported from this site so the next import is fresh."""
        self._forget(self._modules)

    @staticmethod
    def _forget(tops: set[str]) -> None:
        for name in list(sys.modules):
            if name.split(".")[0] in tops:
                del sys.modules[name]

    @contextmanager
    def activated(self) -> Iterator[PluginSite]:
        """Put this site first on ``sys.path`` for the duration of the block."""
        entry = str(self.path)
        sys.path.insert(0, entry)
        importlib.invalidate_caches()
        try:
            yield self
        finally:
            while entry in sys.path:
                sys.path.remove(entry)
            self.forget_modules()
            importlib.invalidate_caches()
