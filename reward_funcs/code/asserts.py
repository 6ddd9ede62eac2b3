"""Split assert-style tests into *probes* (evaluated in the candidate process) and *checks* (decided outside it).

Why: if ``assert add(1, 2) == 3`` ran in the candidate's process, an object with an always-true ``__eq__`` or a
patched ``AssertionError`` would pass it, and the candidate could read ``3`` from the test source or the stack.
Instead only the candidate-dependent operands (``add(1, 2)``) are sent to the sandbox; their values come back as
plain data and the comparison (``== 3``) runs in the parent, or, for expressions the parent does not evaluate itself
(``abs(x - 2.5) < 1e-6``), in a separate sandboxed *oracle* process that runs only the test code, never the
candidate's.

Rules (the tests are trusted dataset content and are parsed with ``ast`` in the parent):
* a *candidate name* is a free name of the tests that the tests do not bind and that is not a builtin or a stdlib
  module (``add``); test statements that use candidate names (``res = add(1, 2)``) run in the candidate process;
* ``Compare``, ``BoolOp``, ``not`` and ``if-else`` nodes are never evaluated in the candidate process;
* any other candidate-dependent node is sent as one probe if its only constants and test variables are arguments of
  calls to candidate functions (``sorted(add(1, 2))`` is one probe; ``abs(add(1, 2) - 3)`` is split so that the
  ``3`` stays outside);
* an assert that never uses the solution (HumanEval's ``assert True, "..."``) is not a test: it would give every
  program, even one that exits at once, a floor of credit.

Tests that cannot be split this way (asserts inside loops or helper functions, comparisons inside comprehensions)
become one *program* test, all or nothing: the whole test program runs in the oracle process with every solution
name replaced by a stub that calls the candidate process with plain-data arguments and gets plain data back
(``sandboxed.supervisor.Supervisor.run_program``), so the same guarantees hold: no candidate object, frame or exit
code takes part in the verdict, and the test program is never in the candidate's process.

This module builds the plan (:func:`plan_asserts`); the name analysis it rests on is in :mod:`.source_names`, the
parent's evaluator of simple checks in :mod:`.plain_eval`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache

# eval_simple is re-exported: the runner and the tests import it from here.
from .plain_eval import eval_simple, is_simple  # noqa: F401
from .source_names import BUILTINS, STDLIB, bound_names, local_names, solution_names, used_names

_NEVER_PROBE = (ast.Compare, ast.BoolOp, ast.IfExp)


class UnsupportedTests(ValueError):
    """The assert-style tests use a construct this harness cannot check safely."""


class _NeedsProgram(UnsupportedTests):
    """The tests cannot be split into probes and checks; they can still run as one program test."""


@dataclass(frozen=True)
class Check:
    """One top-level assert: ``expr`` is the assert's test with probes replaced by ``__p<i>__`` names."""

    source: str
    expr: str
    probes: tuple[int, ...]
    simple: bool  # decidable in the parent by the tiny plain-data evaluator


@dataclass(frozen=True)
class AssertPlan:
    probes: tuple[str, ...]
    child_setup: tuple[str, ...]
    oracle_setup: tuple[str, ...]
    checks: tuple[Check, ...]
    literals: dict = field(default_factory=dict)  # test names bound to literal values (usable by the parent)
    program: str | None = None  # set: run this whole test program as the one test (see the module docstring)
    solution_names: tuple[str, ...] = ()  # program mode: names the test program takes from the solution


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
    if not entry:
        raise UnsupportedTests("HumanEval-style check(candidate) needs a call check(<fn>) or an entry_point column")
    alias = ast.parse(f"{fn.args.args[0].arg} = {entry}").body
    rest = [s for s in stmts if s is not fn and s not in calls]
    return rest + alias + fn.body


class _Splitter:
    def __init__(self, candidate: set[str], test_vars: set[str]) -> None:
        self.candidate = candidate
        self.test_vars = test_vars  # test-bound names other than imports (values that may encode expectations)
        self.probes: list[ast.expr] = []

    def refs_candidate(self, node: ast.AST) -> bool:
        return bool(used_names(node) & self.candidate)

    def probe_ok(self, node: ast.AST, allow_constants: bool = False) -> bool:
        """May ``node`` be evaluated in the candidate process? ``allow_constants`` is used for comprehensions,
        whose constants are almost always inputs (``range(3)``); comparisons are never allowed."""
        if isinstance(node, _NEVER_PROBE) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            return False
        local = local_names(node)
        ok = True

        def visit(n: ast.AST, in_args: bool) -> None:
            nonlocal ok
            if not ok:
                return
            if isinstance(n, _NEVER_PROBE) or (isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)):
                if not in_args:
                    ok = False
                    return
            if isinstance(n, ast.Constant) and not in_args and not allow_constants:
                ok = False
                return
            if isinstance(n, ast.Name) and not in_args and n.id in self.test_vars and n.id not in local:
                ok = False
                return
            if isinstance(n, ast.Call) and self.refs_candidate(n.func):
                visit(n.func, in_args)
                for a in [*n.args, *(k.value for k in n.keywords)]:
                    visit(a, True)  # arguments of candidate calls are inputs: they may be revealed
                return
            for child in ast.iter_child_nodes(n):
                visit(child, in_args)

        visit(node, False)
        return ok

    def split(self, node: ast.expr) -> ast.expr:
        if not self.refs_candidate(node):
            return node
        if self.probe_ok(node):
            self.probes.append(node)
            return ast.Name(id=f"__p{len(self.probes) - 1}__", ctx=ast.Load())
        if isinstance(
            node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr, ast.Await)
        ):
            if self.probe_ok(node, allow_constants=True):
                self.probes.append(node)
                return ast.Name(id=f"__p{len(self.probes) - 1}__", ctx=ast.Load())
            # Its comparisons would have to run next to the candidate's objects (all(f(i) == i for i in ...)).
            raise _NeedsProgram(f"cannot split {ast.unparse(node)!r}: compare outside comprehensions/lambdas")
        for fname, value in ast.iter_fields(node):
            if isinstance(value, ast.expr):
                setattr(node, fname, self.split(value))
            elif isinstance(value, list):
                setattr(node, fname, [self.split(v) if isinstance(v, ast.expr) else v for v in value])
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                kw.value = self.split(kw.value)
        return node


@lru_cache(maxsize=4096)
def plan_asserts(tests: str, entry_point: str | None = None) -> AssertPlan:
    """Build the probe/check plan for assert-style tests (cached: GRPO repeats each row's tests per generation).

    Tests that cannot be split into probes and checks get a plan with ``program`` set: one all-or-nothing test.

    >>> plan = plan_asserts("assert add(1, 2) == 3")
    >>> plan.probes, plan.checks[0].expr, plan.checks[0].simple
    (('add(1, 2)',), '__p0__ == 3', True)
    >>> loop = plan_asserts("for i in range(3):\\n    assert add(i, 1) == i + 1")
    >>> loop.solution_names, len(loop.checks)
    (('add',), 1)
    """
    try:
        stmts = ast.parse(tests).body
    except SyntaxError as exc:
        raise UnsupportedTests(f"tests do not parse: {exc}") from exc
    try:
        return _split_plan(stmts, entry_point)
    except _NeedsProgram:
        return _program_plan(tests, ast.parse(tests).body, entry_point)


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
    names = solution_names(program)
    stdlib = sorted(n for n in names if n in STDLIB)  # `math.isclose` relying on the solution's `import math`
    solution = tuple(sorted(names - set(stdlib)))
    if not solution:
        raise UnsupportedTests("the tests never use the solution")
    if stdlib:
        program = "".join(f"import {m}\n" for m in stdlib) + program
    check = Check("<the whole test program>", "", (), False)
    return AssertPlan((), (), (), (check,), {}, program=program, solution_names=solution)


@dataclass
class _Scan:
    """The test statements sorted by what they depend on (see `_scan`)."""

    bound: set[str] = field(default_factory=set)  # names bound by test statements that do not depend on the candidate
    imports: set[str] = field(default_factory=set)
    candidate: set[str] = field(default_factory=set)
    literals: dict = field(default_factory=dict)
    setup: list[tuple[ast.stmt, bool]] = field(default_factory=list)  # (statement, depends on candidate)
    asserts: list[ast.Assert] = field(default_factory=list)
    implicit_imports: set[str] = field(default_factory=set)


def _scan(stmts: list[ast.stmt]) -> _Scan:
    """Walk the top-level test statements once: candidate names, test-bound names, literals, setup and asserts."""
    scan = _Scan()
    for st in stmts:
        if isinstance(st, ast.Assert):
            scan.asserts.append(st)
            unknown = used_names(st) - scan.bound - BUILTINS
        else:
            if any(isinstance(n, ast.Assert) for n in ast.walk(st)):
                raise _NeedsProgram("asserts must be top-level statements (no loops, ifs or helper functions)")
            unknown = used_names(st) - scan.bound - BUILTINS - bound_names(st)
        for name in unknown:
            # `math.isclose(...)` in MBPP tests often relies on the solution's `import math`: import it test-side.
            (scan.implicit_imports if name in STDLIB and name not in scan.candidate else scan.candidate).add(name)
        if isinstance(st, ast.Assert):
            continue
        dep = bool(used_names(st) & scan.candidate)
        scan.setup.append((st, dep))
        names = bound_names(st)
        if dep:
            scan.candidate |= names
            scan.bound -= names
        else:
            scan.bound |= names
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                scan.imports |= names
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                try:
                    scan.literals[st.targets[0].id] = ast.literal_eval(st.value)
                except ValueError:
                    scan.literals.pop(st.targets[0].id, None)
    if not scan.asserts:
        raise _NeedsProgram("no top-level assert statement found")
    return scan


def _split_plan(stmts: list[ast.stmt], entry_point: str | None) -> AssertPlan:
    scan = _scan(_lift_check_function(stmts, entry_point))
    implicit = [ast.parse(f"import {m}").body[0] for m in sorted(scan.implicit_imports)]
    splitter = _Splitter(scan.candidate, scan.bound - scan.imports - scan.implicit_imports)
    for st, dep in scan.setup:
        # Test statements that use the solution run in its process: allow only plain `name = <probe-like expr>`
        # (or a bare call), so no expected value or comparison is evaluated where the candidate can reach it.
        value = st.value if isinstance(st, (ast.Assign, ast.Expr)) else None
        if dep and (value is None or not (splitter.probe_ok(value) or isinstance(value, ast.Name))):
            raise _NeedsProgram(f"test statement {ast.unparse(st)[:80]!r} mixes the solution with test values")
    checks = []
    for st in scan.asserts:
        first = len(splitter.probes)
        source = ast.unparse(st)  # before split() rewrites the node in place
        expr = splitter.split(st.test)
        idx = tuple(range(first, len(splitter.probes)))
        if idx:  # an assert that does not use the solution tests nothing (and would be a free pass)
            checks.append(Check(source, ast.unparse(expr), idx, is_simple(expr, scan.literals)))
    if not checks:
        raise UnsupportedTests("no assert uses the solution")
    oracle = implicit + [st for st, dep in scan.setup if not dep]
    child = _child_setup(scan.setup, splitter.probes, implicit)
    _check_child_setup(child, scan.setup, checks)
    return AssertPlan(
        probes=tuple(ast.unparse(p) for p in splitter.probes),
        child_setup=tuple(ast.unparse(s) for s in child),
        oracle_setup=tuple(ast.unparse(s) for s in oracle),
        checks=tuple(checks),
        literals=scan.literals,
    )


def _child_setup(setup: list[tuple[ast.stmt, bool]], probes: list, implicit: list[ast.stmt]) -> list[ast.stmt]:
    """The candidate process gets the candidate-dependent statements plus the test statements they or the probes
    need (transitively), never the rest, so test variables holding expected values stay out of its reach."""
    needed = set().union(*(used_names(p) for p in probes)) if probes else set()
    child: list[ast.stmt] = []
    for st, dep in reversed(setup):
        if dep or (bound_names(st) & needed):
            child.append(st)
            needed |= used_names(st)
    child.reverse()
    return [s for s in implicit if bound_names(s) & needed] + child


def _check_child_setup(child: list[ast.stmt], setup: list[tuple[ast.stmt, bool]], checks: list[Check]) -> None:
    """Raise `_NeedsProgram` (the whole program then runs test-side) unless every test statement sent to the
    candidate's process is an import or binds plain literals that no check compares with, directly or through other
    test statements. ``cases = [((2, 3), 17)]`` or ``x, expected = 7, 12345`` would put expected values in the
    solution's globals; a helper the tests define (``encode_cyclic``) would run where the solution can read its
    arguments from the stack, and they can be the expected value."""
    compared = set().union(*(used_names(ast.parse(c.expr, mode="eval")) for c in checks))
    for st, dep in reversed(setup):  # what the checks read, through the test statements that compute it
        if not dep and bound_names(st) & compared:
            compared |= used_names(st)
    test_side = {id(st) for st, dep in setup if not dep}
    for st in child:
        if id(st) not in test_side or isinstance(st, (ast.Import, ast.ImportFrom)):
            continue
        if not _binds_literal(st) or bound_names(st) & compared:
            raise _NeedsProgram(f"test statement {ast.unparse(st)[:80]!r} would run beside the solution")


def _binds_literal(st: ast.stmt) -> bool:
    """``name = <literal>`` or ``a, b = <literals>``: plain inputs, nothing that runs."""
    if not isinstance(st, ast.Assign):
        return False
    try:
        ast.literal_eval(st.value)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False
    return True
