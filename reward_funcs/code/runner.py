"""Run parsed tests against extracted code in the sandbox and turn its records into per-test outcomes.

The sandbox (:mod:`reward_funcs.code.sandbox`) only reports what the candidate computed; every verdict is decided
here, in the parent, against expected values that never enter the sandbox:

* stdin/stdout and call-based cases: one record per case, compared with ``stdout_matches`` / ``values_match``;
* assert-style tests (:mod:`reward_funcs.code.asserts`): one verdict per test from the sandboxed oracle process,
  which runs the test code against stubs that call the candidate's process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import sandbox
from .asserts import plan_asserts
from .formats import parse_tests, stdout_matches, values_match
from .sandboxed.codec import decode_value, encode_value

OUTCOMES = ("passed", "failed", "error", "timeout", "memory", "skipped")


@dataclass(frozen=True)
class TestOutcome:
    """Outcome of one test (one assert statement, one stdin/stdout case or one call case)."""

    index: int
    outcome: str  # one of OUTCOMES
    detail: str = ""

    __test__ = False  # not a pytest class


@dataclass(frozen=True)
class CodeTestReport:
    """Per-test outcomes of one program; ``code_found`` is False when nothing was run."""

    outcomes: tuple[TestOutcome, ...]
    test_format: str  # "assert" | "stdio" | "call"
    code_found: bool = True
    isolation: str = ""

    @property
    def passed(self) -> int:
        return sum(o.outcome == "passed" for o in self.outcomes)

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True)
class RunSettings:
    """Sandbox limits, comparison tolerance and isolation of one reward (or one ``run_code_tests`` call)."""

    limits: sandbox.Limits = sandbox.Limits()
    float_tol: float | None = None
    isolation: str = "auto"
    site_packages: bool = False


def make_settings(timeout_s, memory_mb, float_tol, isolation, limits: dict) -> RunSettings:
    """Validated settings; ``limits`` holds the extra keyword limits (it is consumed: ``site_packages`` popped)."""
    site = bool(limits.pop("site_packages", False))
    unknown = set(limits) - {"file_mb", "max_procs", "output_bytes"}
    if unknown:
        raise TypeError(f"unknown sandbox options: {sorted(unknown)}")
    if timeout_s <= 0 or memory_mb < 64:
        raise ValueError("timeout_s must be > 0 and memory_mb >= 64")
    lim = sandbox.Limits(timeout_s=float(timeout_s), memory_mb=int(memory_mb), **limits)
    return RunSettings(lim, float_tol, isolation, site)


def case_count(kind: str, spec: Any, entry_point: str | None) -> int:
    """How many tests a parsed ``tests`` cell holds (see ``formats.parse_tests``)."""
    if kind == "stdio":
        return len(spec[0])
    if kind == "call":
        return len(spec[1])
    return len(plan_asserts(spec, entry_point).units)


def run_code_tests(
    code: str | None,
    tests: Any,
    *,
    timeout_s: float = 4.0,
    memory_mb: int = 1024,
    float_tol: float | None = None,
    isolation: str = "auto",
    stop_on_failure: bool = False,
    entry_point: str | None = None,
    **limits: Any,
) -> CodeTestReport:
    """Run ``tests`` against ``code`` (already extracted; see :func:`extract_code`) and return per-test outcomes.

    Extra keyword limits: ``file_mb``, ``max_procs``, ``output_bytes``; ``site_packages=True`` lets the program import
    installed packages (default: standard library only). Raises ``ValueError`` for unusable tests.

    >>> r = run_code_tests("def add(a, b):\\n    return a + b", "assert add(1, 2) == 3\\nassert add(1, 1) == 3")
    >>> [o.outcome for o in r.outcomes], r.fraction
    (['passed', 'failed'], 0.5)
    """
    settings = make_settings(timeout_s, memory_mb, float_tol, isolation, limits)
    kind, spec = parse_tests(tests)
    if not code or not code.strip():
        n = case_count(kind, spec, entry_point)
        return CodeTestReport(tuple(TestOutcome(i, "skipped", "no code") for i in range(n)), kind, False, "")
    return run_parsed(code, kind, spec, settings, stop_on_failure, entry_point)


# One sandbox run: run(job, on_record=None) -> the supervisor's records by index (``sandbox.run_job`` with the
# settings' limits, backend and site-packages bound).
_Run = Callable[..., dict]


def run_parsed(
    code: str, kind: str, spec: Any, settings: RunSettings, stop_on_failure: bool, entry_point: str | None
) -> CodeTestReport:
    """Run the tests of a parsed ``tests`` cell (``kind``, ``spec``) against ``code``; see ``run_code_tests``."""
    backend = sandbox.resolve_backend(settings.isolation)
    run = functools.partial(
        sandbox.run_job, limits=settings.limits, backend=backend, site_packages=settings.site_packages
    )
    tol = settings.float_tol
    if kind == "stdio":
        inputs, outputs = spec

        def same_output(k: int, rec: dict) -> bool:
            return rec.get("o") == "ran" and stdout_matches(str(rec.get("out", "")), outputs[k], tol)

        job = {"mode": "stdio", "code": code, "inputs": inputs}
        outcomes = _run_cases(run, job, len(inputs), same_output, "wrong output", stop_on_failure)
    elif kind == "call":
        fn, inputs, outputs = spec

        def same_value(k: int, rec: dict) -> bool:
            return values_match(decode_value(rec.get("v")), outputs[k], tol)

        job = {"mode": "calls", "code": code, "cases": [{"fn": fn, "args": encode_value(list(a))} for a in inputs]}
        outcomes = _run_cases(run, job, len(inputs), same_value, "wrong return value", stop_on_failure)
    else:
        plan = plan_asserts(spec, entry_point)

        def assert_passed(k: int, rec: dict) -> bool:
            return rec.get("o") == "ok" and rec.get("v") is True

        job = {
            "mode": "program",
            "code": code,
            "steps": [list(s) for s in plan.steps],
            "units": len(plan.units),
            "names": list(plan.solution_names),
        }
        outcomes = _run_cases(run, job, len(plan.units), assert_passed, plan.units, stop_on_failure)
    return CodeTestReport(outcomes, kind, True, backend)


def _sandbox_outcome(rec: dict | None) -> TestOutcome | None:
    """Failure outcomes shared by all formats; None means 'the candidate produced something, compare it'."""
    if rec is None:
        return None
    o = rec.get("o")
    if o in ("timeout", "memory", "error"):
        return TestOutcome(rec["k"], o, str(rec.get("d", "")))
    return None


def _run_cases(
    run: _Run,
    job: dict,
    n: int,
    correct: Callable[[int, dict], bool],
    wrong: str | tuple[str, ...],
    stop_on_failure: bool,
) -> tuple[TestOutcome, ...]:
    """Tests with one record each: ``correct(k, record)`` judges what test k produced; a failed one's detail is
    ``wrong``, or with one source per test (assert-style) what the oracle said, else the assert's source. Tests
    without a record (the run stopped early) are skipped."""
    decided: dict[int, TestOutcome] = {}

    def on_record(rec: dict) -> bool:
        k = rec["k"]
        outcome = _sandbox_outcome(rec)
        if outcome is None:
            outcome = TestOutcome(k, "passed") if _judged(correct, k, rec) else _failed(k, rec, wrong)
        decided[k] = outcome
        return stop_on_failure and outcome.outcome != "passed"

    run(job, on_record=on_record)
    return tuple(decided.get(k, TestOutcome(k, "skipped")) for k in range(n))


def _failed(k: int, rec: dict, wrong: str | tuple[str, ...]) -> TestOutcome:
    if isinstance(wrong, str):
        return TestOutcome(k, "failed", wrong)
    told = str(rec.get("d", ""))  # the oracle's: "AssertionError: " for an assert without a message
    return TestOutcome(k, "failed", told + wrong[k] if told in ("", "AssertionError: ") else told)


def _judged(correct: Callable[[int, dict], bool], k: int, rec: dict) -> bool:
    """``correct(k, rec)``, where anything the candidate's value makes the comparison raise (an int too large for
    ``float_tol``, a malformed value) is the candidate's failure, never an error out of the reward call."""
    try:
        return correct(k, rec)
    except Exception:
        return False
