"""A module-level string of a Python file, read without executing the file.

The help note (:func:`sglang_backends.host.help_note`) is read this way,
since importing SGLang costs seconds.

Internal module: its names may change between releases without notice.
"""

from __future__ import annotations

import ast

__all__ = ["NotLiteral", "read_string"]


class NotLiteral(Exception):
    """The value cannot be known without executing the file; the message says why."""


def read_string(path: str, name: str) -> str:
    """Module-level *name* of the Python file *path*, evaluated without executing anything.

    Understood: string literals (implicit concatenation included), ``+``
    between strings, and f-strings whose fields are module-level names
    bound once to such values (``f"... {COOKBOOK_URL} ..."``, no format
    spec, no ``!r``/``!a``), as setuptools' ``attr:`` reads a version
    before falling back to an import.

    :raises NotLiteral: the file cannot be read or parsed, *name* is unbound
        or bound more than once at module level, or its value is anything else.
    """
    try:
        with open(path, "rb") as stream:
            tree = ast.parse(stream.read(), filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        raise NotLiteral(f"{path} could not be read: {exc}") from exc
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

    def lookup(variable: str, seen: frozenset[str]) -> str:
        values = bound.get(variable, [])
        if len(values) != 1:
            how = "not bound" if not values else "bound more than once"
            raise NotLiteral(f"{variable} is {how} at module level")
        if variable in seen:
            raise NotLiteral(f"{variable} refers to itself")
        return evaluate(values[0], seen | {variable})

    def evaluate(node: ast.expr, seen: frozenset[str]) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return lookup(node.id, seen)
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
        raise NotLiteral(f"{ast.unparse(node)[:80]!r} is not a string literal")

    return lookup(name, frozenset())
