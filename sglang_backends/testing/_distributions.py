"""Write real installed distributions into a directory, for tests.

A ``NAME-VERSION.dist-info`` directory with ``METADATA``, ``entry_points.txt`` and
``RECORD``, plus the modules it ships: what an installer leaves, found by
:mod:`importlib.metadata` and stevedore once the directory is on ``sys.path``.
Installing a distribution again replaces it, as pip does: the files the old
copy's ``RECORD`` lists go first, whatever the version.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.metadata import PathDistribution
from pathlib import Path
from typing import Any

from sglang_backends._core.discovery import normalize_distribution
from sglang_backends._core.names import SERVE_BACKENDS_GROUP
from sglang_backends.errors import ConfigurationError, refuse_string


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

    A copy of *name* already in *root*, at any version, is uninstalled first, as
    ``pip install`` replaces it: its dist-info and the files its ``RECORD`` lists go,
    and modules imported from those files are dropped from :data:`sys.modules`, so the
    next import reads the new copy. Objects taken from the old modules before (a
    factory, a backend, a registry built then) keep the old code.

    :param entry_points: backend name to ``module:attr`` target, in *group*.
    :param requires: ``Requires-Dist`` lines (``sglang==0.5.22``, ``pytest; extra == "test"``).
    :param modules: relative file path (``pkg/mod.py``) to source; the source
        is dedented, so triple-quoted blocks can be indented in tests.
    :raises ConfigurationError: *requires*, *entry_points* or *modules* is a string (a
        ``TypeError`` too); *name* or *version* holds a line break or a path separator, or
        a module's path leaves *root*; nothing is written.
    """
    refuse_string(requires, "requires must be a sequence of Requires-Dist lines")
    refuse_string(entry_points, "entry_points must map backend names to module:attr targets")
    refuse_string(modules, "modules must map relative file paths to sources")
    for label, value in (("name", name), ("version", version)):
        # A line break would write another METADATA header; a separator, outside root.
        if re.search(r"[\r\n/\\]", value):
            raise ConfigurationError(f"{label} {value!r} holds a line break or a path separator")
    for relative in modules or {}:
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            raise ConfigurationError(
                f"module path {relative!r} leaves the root: give a relative path without '..'"
            )
    root = Path(root)
    safe = re.sub(r"[-_.]+", "_", name)
    _uninstall(root, name)
    info = root / f"{safe}-{version}.dist-info"
    info.mkdir(parents=True)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files = {info / "METADATA": metadata + "".join(f"Requires-Dist: {r}\n" for r in requires)}
    if entry_points:
        lines = [f"[{group}]"] + [f"{key} = {value}" for key, value in entry_points.items()]
        files[info / "entry_points.txt"] = "\n".join(lines) + "\n"
    for relative, source in (modules or {}).items():
        files[root / relative] = textwrap.dedent(source)
    with open(info / "RECORD", "w", encoding="utf-8", newline="") as record:
        writer = csv.writer(record, lineterminator="\n")
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            data = text.encode("utf-8")
            path.write_bytes(data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            writer.writerow([path.relative_to(root).as_posix(), f"sha256={digest}", len(data)])
        writer.writerow([f"{info.name}/RECORD", "", ""])
    importlib.invalidate_caches()
    return info


def _uninstall(root: Path, name: str) -> None:
    """Remove every copy of distribution *name* from *root*, as ``pip uninstall`` does.

    Each copy's files listed in its ``RECORD`` (with their cached bytecode), the
    directories that leaves empty, and its dist-info go; modules imported from those
    files are dropped from :data:`sys.modules`. Names compare as pip compares them
    (``My.Plugin`` is ``my-plugin``).
    """
    root = root.resolve()
    wanted = normalize_distribution(name)
    removed: list[Path] = []
    for info in sorted(root.glob("*.dist-info")):
        if normalize_distribution(info.name.partition("-")[0]) != wanted:
            continue
        # Its files are None without a RECORD.
        for recorded in PathDistribution(info).files or ():
            path = (root / recorded).resolve()
            # Skip a path outside the site, or in the dist-info itself (removed below).
            if root not in path.parents or info in path.parents:
                continue
            files = [path]
            # A module's bytecode goes too, for every interpreter and level.
            if path.suffix == ".py":
                files += path.parent.glob(f"__pycache__/{path.stem}.*.pyc")
            for file in files:
                if file.is_file() or file.is_symlink():
                    file.unlink()
                    removed.append(file)
        shutil.rmtree(info)
    # Each climbs as far as it empties, so the order does not matter.
    for directory in {p.parent for p in removed}:
        while directory != root and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            directory = directory.parent
    for module_name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if removed and origin and Path(origin).resolve() in removed:
            # The next import reads the new copy.
            del sys.modules[module_name]


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
        # write_distribution checks the options.
        info = write_distribution(self.path, name, modules=modules, **options)
        tops = {Path(relative).parts[0].removesuffix(".py") for relative in modules or {}}
        self._modules |= tops
        self._forget(tops)
        return info

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
