"""How the kit reads a factory's source: the ``api_version`` each backend it builds is given.

A function is read from its module's source, so a lambda is found too,
wherever it is written (in a dict of factories, say); a
:func:`functools.partial` is read where it is made (the module holding it)
and through the function it wraps. Nothing is run.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import sys
import types
from collections.abc import Iterator


def declared_api_versions(factory: object) -> list[ast.expr]:
    """The ``api_version`` arguments of the calls building a backend in *factory*'s source."""
    found = (_api_version_argument(node) for node in _declarations(factory))
    return [value for value in found if value is not None]


_BUILDERS = ("ServeBackend", "portable_backend")


def _declarations(factory: object, depth: int = 0) -> Iterator[ast.Call]:
    """The calls building a backend in *factory*'s source: ``ServeBackend(...)`` and the like."""
    if depth > 8:
        return
    if isinstance(factory, functools.partial):
        for module in list(sys.modules.values()):
            # The global names bound to it; an object in sys.modules may have no __dict__.
            names = {k for k, v in getattr(module, "__dict__", {}).items() if v is factory}
            for node in ast.walk(_parse(getattr(module, "__file__", None))) if names else ():
                # Where a name holding it is assigned: ``factory = partial(...)``.
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id in names for t in node.targets
                ):
                    yield from (n for n in _calls(node.value) if _name(n.func) == "partial")
        yield from _declarations(factory.func, depth + 1)
        return
    code = getattr(inspect.unwrap(factory), "__code__", None)  # type: ignore[arg-type]
    if code is None:
        return
    for node in ast.walk(_parse(code.co_filename)):
        if _defines(node, code):
            yield from _calls(node)


def _parse(filename: str | None) -> ast.Module:
    """*filename*'s source, parsed; an empty module when it has none or it does not parse."""
    try:
        return ast.parse("".join(linecache.getlines(filename or "")))
    except (SyntaxError, ValueError):
        return ast.Module(body=[], type_ignores=[])


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    return (n for n in ast.walk(tree) if isinstance(n, ast.Call))


def _defines(node: ast.AST, code: types.CodeType) -> bool:
    """Whether *node* is the ``def`` or ``lambda`` that compiled to *code*."""
    if isinstance(node, ast.Lambda):
        return code.co_name == "<lambda>" and node.lineno == code.co_firstlineno
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        return code.co_firstlineno in (first, node.lineno)
    return False


def _name(expr: ast.expr) -> str | None:
    """The name *expr* ends in: ``f`` for ``f`` and for ``mod.f``; ``None`` for another."""
    return expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", None)


def _api_version_argument(node: ast.Call) -> ast.expr | None:
    """The ``api_version`` *node* passes to a backend builder, directly or through ``partial``."""
    builder = node.func
    args = node.args
    if _name(builder) == "partial" and args:
        builder, *args = args
    if _name(builder) not in _BUILDERS:
        return None
    value = next((k.value for k in node.keywords if k.arg == "api_version"), None)
    return args[0] if value is None and args else value
