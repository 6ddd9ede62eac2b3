"""Checks the parent decides itself: which check expressions are plain data, and their evaluator.

A check whose expression holds only plain-data nodes (constants, names of probe values or test literals, lists,
comparisons, ``and``/``or``/``not``, indexing) and a few pure builtins is evaluated here, in the trainer's process,
on the probe values rebuilt from plain data (:func:`eval_simple`); any other check runs in the sandboxed oracle
process (:mod:`reward_funcs.code.asserts` explains the split). No arithmetic: ``__p0__ * 10**9`` on a
candidate-supplied list would be a memory bomb in the trainer.
"""

from __future__ import annotations

import ast

from .sandboxed.codec import check_hashes

_SIMPLE_NODES = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.Compare,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.Is,
    ast.IsNot,
    ast.Subscript,
    ast.Slice,
)
_SAFE_CALLS = {
    "len": len,
    "sorted": sorted,
    "set": lambda *a: set(*map(check_hashes, a)),  # a candidate's colliding keys must not make this quadratic
    "frozenset": lambda *a: frozenset(*map(check_hashes, a)),
    "list": list,
    "tuple": tuple,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sum": sum,
    "all": all,
    "any": any,
    "bool": bool,
    "math.isclose": __import__("math").isclose,
}
_SAFE_KEYWORDS = {"reverse", "rel_tol", "abs_tol"}


def is_simple(expr: ast.expr, literals: dict) -> bool:
    """Can the parent evaluate this check itself? Only plain-data nodes, indexing and a few pure builtins (no
    arithmetic: ``__p0__ * 10**9`` on a candidate-supplied list would be a memory bomb in the trainer)."""
    callees = set()
    for n in ast.walk(expr):
        if isinstance(n, ast.Call):
            name = ast.unparse(n.func)
            if name not in _SAFE_CALLS or any(k.arg not in _SAFE_KEYWORDS for k in n.keywords):
                return False
            callees.add(id(n.func))
            callees.update(id(c) for c in ast.walk(n.func))
    for n in ast.walk(expr):
        if id(n) in callees or isinstance(n, (ast.Call, ast.keyword)):
            continue
        if not isinstance(n, _SIMPLE_NODES):
            return False
        if isinstance(n, ast.UnaryOp) and not isinstance(n.op, (ast.Not, ast.USub, ast.UAdd)):
            return False
        if isinstance(n, ast.Name) and not (n.id.startswith("__p") or n.id in literals):
            return False
    return True


def eval_simple(expr: str, values: dict, literals: dict):
    """Evaluate a check built only from plain-data nodes; the operands are builtin values rebuilt in this process.

    >>> eval_simple("__p0__ == [1, 2] and not __p1__", {"__p0__": [1, 2], "__p1__": 0}, {})
    True
    """
    env = {**literals, **values}

    def ev(n: ast.AST):
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return env[n.id]
        if isinstance(n, ast.List):
            return [ev(e) for e in n.elts]
        if isinstance(n, ast.Tuple):
            return tuple(ev(e) for e in n.elts)
        if isinstance(n, ast.Set):
            return {ev(e) for e in n.elts}
        if isinstance(n, ast.Dict):
            return {ev(k): ev(v) for k, v in zip(n.keys, n.values, strict=True)}
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            return not v if isinstance(n.op, ast.Not) else (-v if isinstance(n.op, ast.USub) else +v)
        if isinstance(n, ast.BoolOp):
            result = None
            for e in n.values:
                result = ev(e)
                if isinstance(n.op, ast.And) != bool(result):
                    return result
            return result
        if isinstance(n, ast.Subscript):
            return ev(n.value)[ev(n.slice)]
        if isinstance(n, ast.Slice):
            return slice(*(None if e is None else ev(e) for e in (n.lower, n.upper, n.step)))
        if isinstance(n, ast.Call):
            fn = _SAFE_CALLS[ast.unparse(n.func)]
            return fn(*(ev(a) for a in n.args), **{k.arg: ev(k.value) for k in n.keywords})
        if isinstance(n, ast.Compare):
            left = ev(n.left)
            for op, comp in zip(n.ops, n.comparators, strict=True):
                right = ev(comp)
                if not _OPS[type(op)](left, right):
                    return False
                left = right
            return True
        raise ValueError(f"not a simple node: {type(n).__name__}")

    return ev(ast.parse(expr, mode="eval").body)


_OPS = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}
