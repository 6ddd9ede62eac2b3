"""Assert-style tests as the steps the sandboxed oracle runs, and the test units they score.

Every assert-style test runs the same way: the test program runs in the *oracle*, a sandboxed process of its own,
with each of the solution's names replaced by a stub that calls the candidate's process with plain-data arguments
and gets plain data back, rebuilt as builtin values (``sandboxed.oracle``). Nothing the tests compute is evaluated
in the solution's process, and no object of the solution (a ``str`` subclass that says yes to ``startswith``, an
``int`` that equals everything) takes part in a check.

Test units (the denominator of partial credit), decided here from the source (trusted dataset content, parsed with
``ast``, never run in the trainer):

* HumanEval's ``def check(candidate): ...`` is inlined (``candidate = <entry point>`` then its body) when it calls
  nothing of its own;
* when every ``assert`` is then a top-level statement, each top-level assert that uses the solution (directly or
  through a variable a test statement computed from it) is one test; an assert that never uses it
  (``assert True, "..."``) is not a test and does not run: it would give every program a floor of credit. The
  other statements run in order, test side;
* otherwise (asserts inside loops, ifs or helper functions), the whole program is **one** test, all or nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from .source_names import STDLIB, bound_names, solution_names, used_names

WHOLE_PROGRAM = "<the whole test program>"  # the source shown for a program that is one test


class UnsupportedTests(ValueError):
    """The assert-style tests use a construct this harness cannot check safely."""


@dataclass(frozen=True)
class AssertPlan:
    """``steps``: ``(source, unit)`` in the order they run; unit ``k >= 0`` is test ``k``, ``-1`` a statement that sets
    the tests up. ``units``: each test's source (for failure details). ``solution_names``: the names stubbed."""

    steps: tuple[tuple[str, int], ...]
    units: tuple[str, ...]
    solution_names: tuple[str, ...]
    # Expressions of the tests evaluated in the solution's process: none (the split planner's field, for its callers).
    probes: ClassVar[tuple[str, ...]] = ()


@lru_cache(maxsize=4096)
def plan_asserts(tests: str, entry_point: str | None = None) -> AssertPlan:
    """The steps and test units of assert-style tests (cached: GRPO repeats each row's tests per generation).

    >>> plan = plan_asserts("import math\\nassert add(1, 2) == 3\\nassert True\\nassert math.isclose(add(.1, .2), .3)")
    >>> plan.steps
    (('import math', -1), ('assert add(1, 2) == 3', 0), ('assert math.isclose(add(0.1, 0.2), 0.3)', 1))
    >>> loop = plan_asserts("for i in range(3):\\n    assert add(i, 1) == i + 1")
    >>> loop.solution_names, loop.units
    (('add',), ('<the whole test program>',))
    """
    try:
        stmts = ast.parse(tests).body
    except SyntaxError as exc:
        raise UnsupportedTests(f"tests do not parse: {exc}") from exc
    lifted = _lift_check_function(stmts, entry_point)
    if _asserts_top_level(lifted):
        return _per_assert_plan(lifted)
    return _program_plan(tests, stmts, entry_point)


def _asserts_top_level(stmts: list[ast.stmt]) -> bool:
    """Is every assert a top-level statement, and does the module compile (an inlined body may hold a ``return``)?"""
    module = ast.Module(body=stmts, type_ignores=[])
    top = {id(s) for s in stmts if isinstance(s, ast.Assert)}
    if not top or any(isinstance(n, ast.Assert) and id(n) not in top for n in ast.walk(module)):
        return False
    try:
        compile(module, "<tests>", "exec")
    except SyntaxError:
        return False
    return True


def _lift_check_function(stmts: list[ast.stmt], entry_point: str | None) -> list[ast.stmt]:
    """HumanEval style ``def check(candidate): assert candidate(...) == ...``: inline the body at top level."""
    if any(isinstance(s, ast.Assert) for s in stmts):
        return stmts
    checks = [s for s in stmts if isinstance(s, ast.FunctionDef) and s.name == "check" and len(s.args.args) == 1]
    if not checks:
        return stmts
    fn = checks[0]
    calls = [
        s
        for s in stmts
        if isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Call)
        and isinstance(s.value.func, ast.Name)
        and s.value.func.id == "check"
        and len(s.value.args) == 1
        and isinstance(s.value.args[0], ast.Name)
    ]
    entry = calls[-1].value.args[0].id if calls else entry_point
    if not entry or not entry.isidentifier():
        raise UnsupportedTests("HumanEval-style check(candidate) needs a call check(<fn>) or an entry_point column")
    alias = ast.parse(f"{fn.args.args[0].arg} = {entry}").body
    rest = [s for s in stmts if s is not fn and s not in calls]
    return rest + alias + fn.body


def _names(program: str) -> tuple[list[str], tuple[str, ...]]:
    """Standard-library modules the tests use without importing them (MBPP's ``math.isclose`` relies on the
    solution's ``import math``: imported test-side), and the names the tests take from the solution."""
    names = solution_names(program)
    stdlib = sorted(n for n in names if n in STDLIB)
    solution = tuple(sorted(names - set(stdlib)))
    if not solution:
        raise UnsupportedTests("the tests never use the solution")
    return [f"import {m}" for m in stdlib], solution


def _per_assert_plan(stmts: list[ast.stmt]) -> AssertPlan:
    """One test per top-level assert that uses the solution; see the module docstring."""
    imports, solution = _names(ast.unparse(ast.Module(body=stmts, type_ignores=[])))
    steps: list[tuple[str, int]] = [(s, -1) for s in imports]
    units: list[str] = []
    tainted = set(solution)  # names whose value comes from the solution
    for st in stmts:
        uses = bool(used_names(st) & tainted)
        if isinstance(st, ast.Assert):
            if uses:
                steps.append((ast.unparse(st), len(units)))
                units.append(ast.unparse(st))
            continue
        if uses:
            tainted |= bound_names(st)
        steps.append((ast.unparse(st), -1))
    if not units:
        raise UnsupportedTests("no assert uses the solution")
    return AssertPlan(tuple(steps), tuple(units), solution)


def _program_plan(tests: str, stmts: list[ast.stmt], entry_point: str | None) -> AssertPlan:
    """The whole test program as one test; see the module docstring."""
    if not any(isinstance(n, ast.Assert) for n in ast.walk(ast.Module(body=stmts, type_ignores=[]))):
        raise UnsupportedTests("no assert statement found")
    program = tests
    checks = [s for s in stmts if isinstance(s, ast.FunctionDef) and s.name == "check" and len(s.args.args) == 1]
    called = any(
        isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and ast.unparse(s.value.func) == "check"
        for s in stmts
    )
    if checks and not called:  # HumanEval: the harness calls check(<entry_point>)
        if not entry_point or not entry_point.isidentifier():
            raise UnsupportedTests(
                "HumanEval-style check(candidate) needs a call check(<fn>) or an entry_point column"
            )
        program = f"{tests}\n\ncheck({entry_point})\n"
        stmts = ast.parse(program).body
    # Something at module level must run: `def t(): assert f(1)` alone would pass every program.
    runs = [
        s
        for s in stmts
        if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))
    ]
    if not any(isinstance(n, (ast.Call, ast.Assert)) for s in runs for n in ast.walk(s)):
        raise UnsupportedTests("the tests define functions but never call them")
    imports, solution = _names(program)
    steps = tuple((s, -1) for s in imports) + ((program, 0),)
    return AssertPlan(steps, (WHOLE_PROGRAM,), solution)
