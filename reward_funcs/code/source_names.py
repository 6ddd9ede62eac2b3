"""Names in test source: what a statement binds, what a node reads, what a test program takes from the solution.

Static analysis of trusted test code (``ast`` and ``symtable``, nothing is run); :mod:`reward_funcs.code.asserts`
uses it to tell candidate names from test names.
"""

from __future__ import annotations

import ast
import builtins
import symtable
import sys

BUILTINS = frozenset(dir(builtins))
STDLIB = frozenset(sys.stdlib_module_names)


def bound_names(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement binds (a definition's name, an import's top-level name, assignment targets)."""
    names: set[str] = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for a in stmt.names:
            names.add((a.asname or a.name).split(".")[0])
        return names
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
    return names


def local_names(node: ast.AST) -> set[str]:
    """Names bound inside a node (function parameters, comprehension targets, inner assignments)."""
    names: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
    return names


def used_names(node: ast.AST) -> set[str]:
    """Names a node reads that it does not bind itself (see :func:`local_names`)."""
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - local_names(node)


def solution_names(source: str) -> set[str]:
    """Global names the test program reads but never binds (nor are builtins): they come from the solution."""
    top = symtable.symtable(source, "<tests>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    free: set[str] = set()
    stack = [top]
    while stack:
        table = stack.pop()
        for sym in table.get_symbols():
            if sym.is_referenced() and (sym.is_global() if table.get_type() != "module" else True):
                free.add(sym.get_name())
        stack.extend(table.get_children())
    return free - bound - BUILTINS
