"""SGLang's closing note after a help (``COOKBOOK_EPILOG``): read from its file, not imported.

``sglang serve`` imports SGLang (seconds) to print it; this reads the
distribution's ``sglang/cli/main.py`` and evaluates the one string instead.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os

from sglang_backends._core.discovery import is_regular_file
from sglang_backends._sglang.installed import import_sglang, sglang_installed

LOG = logging.getLogger(__name__)

# SGLang's help note: the file, from the distribution's root, and the name in it.
_NOTE_FILE = "sglang/cli/main.py"
_NOTE_NAME = "COOKBOOK_EPILOG"


def help_note() -> str | None:
    """SGLang's closing note after a help (``COOKBOOK_EPILOG``), or ``None``; read, not imported."""
    # Cheap: no package, no metadata lookup.
    if not sglang_installed():
        return None
    try:
        return _static_note()
    except ValueError as exc:
        LOG.debug("Importing sglang.cli.main for its help note: %s", exc)
    # A note is never worth a failure.
    main = import_sglang(
        "sglang.cli.main", "No help note: sglang.cli.main failed to import: %s", expected=True
    )
    note = getattr(main, _NOTE_NAME, None)
    return note if isinstance(note, str) and note else None


def _static_note() -> str | None:
    """The note parsed from the ``sglang`` distribution's regular file, found without importing."""
    try:
        dist = importlib.metadata.distribution("sglang")
    except importlib.metadata.PackageNotFoundError as exc:
        raise ValueError("no sglang distribution is installed") from exc
    path = str(dist.locate_file(_NOTE_FILE))
    if not is_regular_file(path):
        # It exists but is no regular file: a FIFO, say, which could block.
        if os.path.lexists(path):
            LOG.debug("No help note: %s is not a regular file", path)
            return None
        # RECORD would locate it at the same place: no need to ask
        raise ValueError(f"no regular file {_NOTE_FILE} in the sglang distribution")
    return _read_string(path) or None


def _read_string(path: str) -> str:
    """Module-level :data:`_NOTE_NAME` of *path*: strings, ``+``, f-strings of names bound
    once; not run."""
    # About 1.5 ms every help would pay, for what only SGLang's note needs.
    import ast

    try:
        with open(path, "rb") as stream:
            tree = ast.parse(stream.read(), filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        raise ValueError(f"{path} could not be read: {exc}") from exc
    bound: dict[str, list[ast.expr]] = {}
    for statement in tree.body:
        # ``X: T = V`` binds X as ``X = V`` does.
        if isinstance(statement, ast.AnnAssign) and statement.value is not None:
            statement = ast.Assign(targets=[statement.target], value=statement.value)
        if not isinstance(statement, ast.Assign):
            continue
        for target in statement.targets:
            if isinstance(target, ast.Name):
                bound.setdefault(target.id, []).append(statement.value)

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

    return evaluate(ast.Name(id=_NOTE_NAME), frozenset())
