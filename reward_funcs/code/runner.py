"""Run parsed tests against extracted code in the sandbox and turn its records into per-test outcomes.

The sandbox (:mod:`reward_funcs.code.sandbox`) only reports what the candidate computed; every verdict is decided
here, in the parent, against expected values that never enter the sandbox:

* stdin/stdout and call-based cases: one record per case, compared with ``stdout_matches`` / ``values_match``;
* assert-style tests split into probes (:mod:`reward_funcs.code.asserts`): the candidate returns the probes' values,
  simple checks are evaluated here and the others by an oracle process that runs only the test code;
* a test program that cannot be split: one all-or-nothing verdict from the oracle.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import sandbox
from .asserts import AssertPlan, eval_simple, plan_asserts
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
    return len(plan_asserts(spec, entry_point).checks)


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
        if plan.program is not None:
            outcomes = (_run_program(run, code, plan),)
        else:
            outcomes = _run_split_asserts(run, code, plan, stop_on_failure)
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
    run: _Run, job: dict, n: int, correct: Callable[[int, dict], bool], wrong: str, stop_on_failure: bool
) -> tuple[TestOutcome, ...]:
    """Cases with one record each (stdin/stdout, call-based): ``correct(k, record)`` judges what case k produced;
    ``wrong`` is the detail of a failed one. Cases without a record (the run stopped early) are skipped."""
    decided: dict[int, TestOutcome] = {}

    def on_record(rec: dict) -> bool:
        k = rec["k"]
        outcome = _sandbox_outcome(rec)
        if outcome is None:
            outcome = TestOutcome(k, "passed") if _judged(correct, k, rec) else TestOutcome(k, "failed", wrong)
        decided[k] = outcome
        return stop_on_failure and outcome.outcome != "passed"

    run(job, on_record=on_record)
    return tuple(decided.get(k, TestOutcome(k, "skipped")) for k in range(n))


def _judged(correct: Callable[[int, dict], bool], k: int, rec: dict) -> bool:
    """``correct(k, rec)``, where anything the candidate's value makes the comparison raise (an int too large for
    ``float_tol``, a malformed value) is the candidate's failure, never an error out of the reward call."""
    try:
        return correct(k, rec)
    except Exception:
        return False


def _run_program(run: _Run, code: str, plan: AssertPlan) -> TestOutcome:
    """A test program that cannot be split: the oracle runs it against the candidate's call server."""
    job = {"mode": "program", "code": code, "test": plan.program, "names": list(plan.solution_names)}
    rec = run(job).get(0)
    outcome = _sandbox_outcome(rec)
    if outcome is None:
        passed = rec is not None and rec.get("o") == "ok" and rec.get("v") is True
        detail = "" if passed else str(rec.get("d", "") if rec else "no result")
        outcome = TestOutcome(0, "passed" if passed else "failed", detail)
    return outcome


def _run_split_asserts(run: _Run, code: str, plan: AssertPlan, stop_on_failure: bool) -> tuple[TestOutcome, ...]:
    """Probes in the candidate process, then the checks: simple ones here, the others in the oracle process."""
    checks = _SplitChecks(plan, stop_on_failure, run.keywords["limits"].output_bytes)
    if plan.probes:
        job = {
            "mode": "calls",
            "code": code,
            "setup": list(plan.child_setup),
            "cases": [{"expr": e} for e in plan.probes],
        }
        run(job, on_record=checks.on_probe)
    oracle = checks.decide_rest()
    if oracle:
        cases = [
            {
                "expr": plan.checks[i].expr,
                "truth": True,
                "bind": {f"__p{p}__": encode_value(checks.values[p]) for p in plan.checks[i].probes},
            }
            for i in oracle
        ]
        checks.take_oracle(
            oracle, run({"mode": "calls", "code": "", "setup": list(plan.oracle_setup), "cases": cases})
        )
    return checks.outcomes()


class _SplitChecks:
    """The state of split assert tests: probe values (or failures) as they arrive, and the checks decided so far."""

    def __init__(self, plan: AssertPlan, stop_on_failure: bool, limit: int) -> None:
        self.plan, self.stop_on_failure = plan, stop_on_failure
        self.plan_limit = limit  # bytes of probe records the trainer decodes and keeps for one run
        self.values: dict[int, Any] = {}  # probe values still needed (by the oracle's checks), see on_probe
        self.kept_bytes = 0
        self.probe_fail: dict[int, TestOutcome] = {}
        self.done: dict[int, TestOutcome] = {}
        self.owner = {p: i for i, c in enumerate(plan.checks) for p in c.probes}

    def decide_simple(self, i: int) -> TestOutcome | None:
        """Check i's outcome once its probes are in, if the parent evaluates it itself; else None."""
        c = self.plan.checks[i]
        for p in c.probes:
            if p in self.probe_fail:
                return TestOutcome(i, self.probe_fail[p].outcome, self.probe_fail[p].detail)
            if p not in self.values:
                return None
        if not c.simple:
            return None
        try:
            ok = bool(eval_simple(c.expr, {f"__p{p}__": self.values[p] for p in c.probes}, self.plan.literals))
        except Exception as exc:  # e.g. TypeError comparing str and int: the assert would have raised
            return TestOutcome(i, "failed", f"{type(exc).__name__} evaluating {c.source}")
        return TestOutcome(i, "passed") if ok else TestOutcome(i, "failed", c.source)

    def on_probe(self, rec: dict) -> bool:
        """A probe's record; True stops the run (``stop_on_failure`` and a check failed)."""
        p = rec["k"]
        bad = _sandbox_outcome(rec)
        self.kept_bytes += int(rec.get("size", 0))
        if bad is not None:
            self.probe_fail[p] = bad
        elif self.kept_bytes > self.plan_limit:
            self.probe_fail[p] = TestOutcome(p, "error", "probe values larger than the output limit")
        else:
            try:
                self.values[p] = decode_value(rec.get("v"))
            except (ValueError, TypeError, RecursionError):
                self.probe_fail[p] = TestOutcome(p, "error", "undecodable value")
        i = self.owner.get(p)
        if i is not None and i not in self.done:
            res = self.decide_simple(i)
            if res is not None:
                self.done[i] = res
                self._forget(i)
                return self.stop_on_failure and res.outcome != "passed"
        return False

    def _forget(self, i: int) -> None:
        """Check i is decided: drop its probe values, so that the trainer keeps only what the oracle still needs."""
        for p in self.plan.checks[i].probes:
            self.values.pop(p, None)

    def decide_rest(self) -> list[int]:
        """After the probes: decide the simple checks left; return the checks that go to the oracle."""
        stopped = self.stop_on_failure and any(o.outcome != "passed" for o in self.done.values())
        for i, c in enumerate(self.plan.checks):
            if i not in self.done and not stopped and all(p in self.values or p in self.probe_fail for p in c.probes):
                res = self.decide_simple(i)
                if res is not None:
                    self.done[i] = res
                    self._forget(i)
        return [
            i
            for i, c in enumerate(self.plan.checks)
            if i not in self.done and not stopped and all(p in self.values for p in c.probes)
        ]

    def take_oracle(self, oracle: list[int], recs: dict) -> None:
        """The oracle's verdicts on checks ``oracle`` (its record j is about check ``oracle[j]``)."""
        for j, i in enumerate(oracle):
            rec = recs.get(j)
            if rec is None or rec.get("o") != "ok":
                self.done[i] = TestOutcome(i, "failed", f"check raised: {rec.get('d', '') if rec else 'no result'}")
            else:
                passed = rec.get("v") is True
                self.done[i] = TestOutcome(
                    i, "passed" if passed else "failed", "" if passed else self.plan.checks[i].source
                )

    def outcomes(self) -> tuple[TestOutcome, ...]:
        return tuple(self.done.get(i, TestOutcome(i, "skipped")) for i in range(len(self.plan.checks)))
