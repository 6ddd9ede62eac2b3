"""Verifier rewards for code: run unit tests on model-written Python in a sandbox it cannot escape or fool.

Public API (TRL reward signature, see docs/code-sandbox.md):

* :func:`code_reward` ``(completions, tests, **kwargs) -> list[float | None]``: 1.0 when every test passes, else 0.0;
  ``None`` for rows without usable tests (TRL then ignores this function for the row);
* :func:`make_code_reward` returns a configured, picklable reward callable (partial credit, limits, workers);
* :func:`run_code_tests` returns per-test outcomes (``passed``/``failed``/``error``/``timeout``/``memory``/``skipped``);
* :func:`extract_code` is the code-block extraction the rewards use.

Test formats of the ``tests`` column (a JSON string of a dict is accepted too):

* assert-style Python: ``"assert add(1, 2) == 3\\nassert add(0, 0) == 0"`` (or a list of such strings; HumanEval's
  ``def check(candidate)`` with a ``check(fn)`` call or an ``entry_point`` column is inlined);
* stdin/stdout: ``{"inputs": ["1 2\\n"], "outputs": ["3\\n"]}``;
* call-based: ``{"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]}`` (``inputs[i]`` is the argument list;
  a ``class Solution`` method of that name is used when there is no such function).
"""

from __future__ import annotations

import json
import logging
import math
import re
import tempfile
import textwrap
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import _sandbox
from ._assert_plan import UnsupportedTests, eval_simple, plan_asserts
from ._sandbox_child import decode_value, encode_value

__all__ = [
    "CodeReward",
    "CodeTestReport",
    "TestOutcome",
    "code_reward",
    "extract_code",
    "make_code_reward",
    "run_code_tests",
]

OUTCOMES = ("passed", "failed", "error", "timeout", "memory", "skipped")

# Consecutive sandbox failures (no verdict at all) after which a reward raises instead of returning None: one may be
# a transient hiccup, a streak means nothing can be scored, and every advantage would silently be zero.
SANDBOX_FAILURE_LIMIT = 3

logger = logging.getLogger(__name__)

# Opening fence at the start of a line (indentation allowed), info string, body, closing fence of the same kind.
_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*([^\s`~]*)[^\n]*\n(.*?)^[ \t]*\2[ \t]*$", re.M | re.S)
_PY_TAGS = {"python", "py", "python3", "py3"}


def extract_code(completion: str) -> str | None:
    """Return the code of the last ```python block (tags python/py/python3, any case), else of the last bare ```
    block, else None. Blocks in other languages are ignored; an unclosed (truncated) block does not count.

    >>> extract_code("Draft:\\n```python\\nx = 1\\n```\\nFinal:\\n```py\\nx = 2\\n```\\n```\\nsample output\\n```")
    'x = 2\\n'
    >>> extract_code("no code here") is None
    True
    """
    python, bare = None, None
    for m in _FENCE.finditer(completion):
        tag = m.group(3).lower()
        body = textwrap.dedent(m.group(4))
        if tag in _PY_TAGS:
            python = body
        elif tag == "":
            bare = body
    code = python if python is not None else bare
    return code if code is not None and code.strip() else None


def _completion_text(completion: Any) -> str:
    """Plain string, or TRL conversational format: the text of the assistant messages."""
    if isinstance(completion, str):
        return completion
    parts = []
    for msg in completion:
        if isinstance(msg, dict) and msg.get("role", "assistant") == "assistant":
            content = msg.get("content") or ""
            if isinstance(content, list):  # multimodal parts
                content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(content)
    return "\n".join(parts)


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


# ----------------------------------------------------------------------------------------------------------------
# Test specs
# ----------------------------------------------------------------------------------------------------------------


def _parse_tests(tests: Any) -> tuple[str, Any]:
    """Normalise a ``tests`` cell to ("assert", source) | ("stdio", (inputs, outputs)) | ("call", (fn, in, out))."""
    if isinstance(tests, bytes):
        tests = tests.decode()
    if isinstance(tests, str) and tests.lstrip().startswith("{"):
        try:
            tests = json.loads(tests)
        except ValueError:
            pass
    if isinstance(tests, str):
        return "assert", tests
    if isinstance(tests, (list, tuple)) and all(isinstance(t, str) for t in tests):
        return "assert", "\n".join(tests)  # MBPP's test_list
    if not isinstance(tests, dict):
        raise UnsupportedTests(f"unsupported tests value of type {type(tests).__name__}")
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise UnsupportedTests("tests need 'inputs' and 'outputs' lists of equal length")
    if not inputs:
        raise UnsupportedTests("tests have no cases")
    fn = tests.get("fn_name")
    if fn:
        return "call", (str(fn), [i if isinstance(i, list) else [i] for i in inputs], outputs)

    def as_text(v):
        return "\n".join(map(str, v)) + "\n" if isinstance(v, list) else str(v)

    return "stdio", ([as_text(i) for i in inputs], [as_text(o) for o in outputs])


def _stdout_lines(text: str) -> list[str]:
    text = text.replace("\r\n", "\n")
    if text.endswith("\n"):
        text = text[:-1]
    return [line.rstrip() for line in text.split("\n")]


def stdout_matches(actual: str, expected: str, float_tol: float | None = None) -> bool:
    """Compare program output: CRLF = LF, trailing whitespace per line and one final newline ignored; any other
    difference (extra or missing lines, ``3.0`` vs ``3``) fails unless ``float_tol`` allows numeric tokens to differ.

    >>> stdout_matches("3 \\r\\n", "3"), stdout_matches("3\\n4\\n", "3\\n"), stdout_matches("3.0", "3")
    (True, False, False)
    >>> stdout_matches("3.0000001", "3", float_tol=1e-6)
    True
    """
    a, e = _stdout_lines(actual), _stdout_lines(expected)
    if a == e:
        return True
    if float_tol is None or len(a) != len(e):
        return False
    for la, le in zip(a, e, strict=True):
        ta, te = la.split(), le.split()
        if len(ta) != len(te):
            return False
        for x, y in zip(ta, te, strict=True):
            if x == y:
                continue
            try:
                fx, fy = float(x), float(y)
            except ValueError:
                return False
            if not math.isclose(fx, fy, rel_tol=float_tol, abs_tol=float_tol):
                return False
    return True


def _json_key(k: Any) -> Any:
    if isinstance(k, str):
        return k
    if k is None or isinstance(k, bool):
        return json.dumps(k)
    if isinstance(k, (int, float)):
        return json.dumps(k)
    return object()  # unmatchable


def values_match(actual: Any, expected: Any, float_tol: float | None = None) -> bool:
    """Call-based comparison of a returned value (plain data) with a JSON expected value. Tuples count as lists
    (JSON has none); ``bool`` is not ``int``; ``3.0`` is not ``3`` unless ``float_tol`` is set.

    >>> values_match((1, [2]), [1, [2]]), values_match(3.0, 3), values_match(3.0, 3, 1e-9), values_match(True, 1)
    (True, False, True, False)
    """
    te = type(expected)
    if expected is None or te in (bool, str):
        return type(actual) is te and actual == expected
    if te in (int, float):
        if type(actual) not in (int, float):
            return False
        if float_tol is None:
            return type(actual) is te and actual == expected
        return math.isclose(actual, expected, rel_tol=float_tol, abs_tol=float_tol)
    if te is list:
        return (
            type(actual) in (list, tuple)
            and len(actual) == len(expected)
            and all(values_match(a, e, float_tol) for a, e in zip(actual, expected, strict=True))
        )
    if te is dict:
        if type(actual) is not dict:
            return False
        norm = {_json_key(k): v for k, v in actual.items()}
        return (
            len(norm) == len(actual)
            and set(norm) == set(expected)
            and all(values_match(norm[k], expected[k], float_tol) for k in expected)
        )
    return False


# ----------------------------------------------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    limits: _sandbox.Limits = _sandbox.Limits()
    float_tol: float | None = None
    isolation: str = "auto"
    site_packages: bool = False


def _sandbox_outcome(rec: dict | None) -> TestOutcome | None:
    """Failure outcomes shared by all formats; None means 'the candidate produced something, compare it'."""
    if rec is None:
        return None
    o = rec.get("o")
    if o in ("timeout", "memory", "error"):
        return TestOutcome(rec["k"], o, str(rec.get("d", "")))
    return None


def _run(
    code: str, kind: str, spec: Any, settings: _Settings, stop_on_failure: bool, entry_point: str | None
) -> CodeTestReport:
    backend = _sandbox.resolve_backend(settings.isolation)
    run = _sandbox.run_job
    kw = dict(backend=backend, site_packages=settings.site_packages)
    lim = settings.limits
    if kind == "stdio":
        inputs, outputs = spec
        decided: dict[int, TestOutcome] = {}

        def on_stdio(rec: dict) -> bool:
            k = rec["k"]
            bad = _sandbox_outcome(rec)
            if bad is None:
                ok = rec.get("o") == "ran" and stdout_matches(str(rec.get("out", "")), outputs[k], settings.float_tol)
                bad = TestOutcome(k, "passed") if ok else TestOutcome(k, "failed", "wrong output")
            decided[k] = bad
            return stop_on_failure and bad.outcome != "passed"

        run({"mode": "stdio", "code": code, "inputs": inputs}, lim, on_record=on_stdio, **kw)
        outcomes = [decided.get(k, TestOutcome(k, "skipped")) for k in range(len(inputs))]
        return CodeTestReport(tuple(outcomes), "stdio", True, backend)

    if kind == "call":
        fn, inputs, outputs = spec
        decided = {}

        def on_call(rec: dict) -> bool:
            k = rec["k"]
            bad = _sandbox_outcome(rec)
            if bad is None:
                try:
                    ok = values_match(decode_value(rec.get("v")), outputs[k], settings.float_tol)
                except (ValueError, TypeError, RecursionError):
                    ok = False
                bad = TestOutcome(k, "passed") if ok else TestOutcome(k, "failed", "wrong return value")
            decided[k] = bad
            return stop_on_failure and bad.outcome != "passed"

        cases = [{"fn": fn, "args": encode_value(list(args))} for args in inputs]
        run({"mode": "calls", "code": code, "cases": cases}, lim, on_record=on_call, **kw)
        outcomes = [decided.get(k, TestOutcome(k, "skipped")) for k in range(len(inputs))]
        return CodeTestReport(tuple(outcomes), "call", True, backend)

    plan = plan_asserts(spec, entry_point)
    values: dict[int, Any] = {}
    probe_fail: dict[int, TestOutcome] = {}
    checks_done: dict[int, TestOutcome] = {}
    owner = {p: i for i, c in enumerate(plan.checks) for p in c.probes}

    def decide_simple(i: int) -> TestOutcome | None:
        c = plan.checks[i]
        for p in c.probes:
            if p in probe_fail:
                return TestOutcome(i, probe_fail[p].outcome, probe_fail[p].detail)
            if p not in values:
                return None
        if not c.simple:
            return None
        try:
            ok = bool(eval_simple(c.expr, {f"__p{p}__": values[p] for p in c.probes}, plan.literals))
        except Exception as exc:  # e.g. TypeError comparing str and int: the assert would have raised
            return TestOutcome(i, "failed", f"{type(exc).__name__} evaluating {c.source}")
        return TestOutcome(i, "passed") if ok else TestOutcome(i, "failed", c.source)

    def on_probe(rec: dict) -> bool:
        p = rec["k"]
        bad = _sandbox_outcome(rec)
        if bad is not None:
            probe_fail[p] = bad
        else:
            try:
                values[p] = decode_value(rec.get("v"))
            except (ValueError, TypeError, RecursionError):
                probe_fail[p] = TestOutcome(p, "error", "undecodable value")
        i = owner.get(p)
        if i is not None and i not in checks_done:
            res = decide_simple(i)
            if res is not None:
                checks_done[i] = res
                return stop_on_failure and res.outcome != "passed"
        return False

    if plan.probes:
        job = {
            "mode": "calls",
            "code": code,
            "setup": list(plan.child_setup),
            "cases": [{"expr": e} for e in plan.probes],
        }
        run(job, lim, on_record=on_probe, **kw)
    stopped = stop_on_failure and any(o.outcome != "passed" for o in checks_done.values())
    for i, c in enumerate(plan.checks):
        if i not in checks_done and not stopped and all(p in values or p in probe_fail for p in c.probes):
            res = decide_simple(i)
            if res is not None:
                checks_done[i] = res
    # Checks the parent does not evaluate itself go to an oracle process that runs only the test code.
    oracle = [
        i
        for i, c in enumerate(plan.checks)
        if i not in checks_done and not stopped and all(p in values for p in c.probes)
    ]
    if oracle:
        cases = [
            {
                "expr": plan.checks[i].expr,
                "truth": True,
                "bind": {f"__p{p}__": encode_value(values[p]) for p in plan.checks[i].probes},
            }
            for i in oracle
        ]
        recs = run({"mode": "calls", "code": "", "setup": list(plan.oracle_setup), "cases": cases}, lim, **kw)
        for j, i in enumerate(oracle):
            rec = recs.get(j)
            if rec is None or rec.get("o") != "ok":
                checks_done[i] = TestOutcome(i, "failed", f"check raised: {rec.get('d', '') if rec else 'no result'}")
            else:
                passed = rec.get("v") is True
                checks_done[i] = TestOutcome(
                    i, "passed" if passed else "failed", "" if passed else plan.checks[i].source
                )
    outcomes = [checks_done.get(i, TestOutcome(i, "skipped")) for i in range(len(plan.checks))]
    return CodeTestReport(tuple(outcomes), "assert", True, backend)


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
    settings = _make_settings(timeout_s, memory_mb, float_tol, isolation, limits)
    kind, spec = _parse_tests(tests)
    if not code or not code.strip():
        n = (
            len(spec[0])
            if kind == "stdio"
            else len(spec[1])
            if kind == "call"
            else len(plan_asserts(spec, entry_point).checks)
        )
        return CodeTestReport(tuple(TestOutcome(i, "skipped", "no code") for i in range(n)), kind, False, "")
    return _run(code, kind, spec, settings, stop_on_failure, entry_point)


def _make_settings(timeout_s, memory_mb, float_tol, isolation, limits: dict) -> _Settings:
    site = bool(limits.pop("site_packages", False))
    unknown = set(limits) - {"file_mb", "max_procs", "output_bytes"}
    if unknown:
        raise TypeError(f"unknown sandbox options: {sorted(unknown)}")
    if timeout_s <= 0 or memory_mb < 64:
        raise ValueError("timeout_s must be > 0 and memory_mb >= 64")
    lim = _sandbox.Limits(timeout_s=float(timeout_s), memory_mb=int(memory_mb), **limits)
    return _Settings(lim, float_tol, isolation, site)


# ----------------------------------------------------------------------------------------------------------------
# TRL reward
# ----------------------------------------------------------------------------------------------------------------


class CodeReward:
    """Picklable TRL reward function (see :func:`make_code_reward`)."""

    def __init__(self, *, partial_credit: bool, max_workers: int | None, settings: _Settings, name: str) -> None:
        self.partial_credit = partial_credit
        self.max_workers = max_workers
        self.settings = settings
        self.__name__ = name
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        self._warned: set[str] = set()
        self._failures = 0  # consecutive sandbox failures
        self._failures_lock = threading.Lock()
        self._noticed_for: Any = _NOT_YET  # the TrainerState the isolation fallback was last reported for

    def __repr__(self) -> str:
        return f"CodeReward(name={self.__name__!r}, partial_credit={self.partial_credit}, {self.settings})"

    def __getstate__(self) -> dict:
        process_state = ("_warned", "_failures", "_failures_lock", "_noticed_for")
        return {k: v for k, v in self.__dict__.items() if k not in process_state}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_process_state()

    def score(self, completion: Any, tests: Any, entry_point: str | None = None) -> float | None:
        """Reward of one completion: None when the tests are unusable, 0.0 without code."""
        try:
            kind, spec = _parse_tests(tests)
            if kind == "assert":
                plan_asserts(spec, entry_point)  # validate before running anything
        except UnsupportedTests as exc:
            self._warn(str(exc))
            return None
        code = extract_code(_completion_text(completion))
        if code is None:
            return 0.0
        try:
            report = _run(code, kind, spec, self.settings, not self.partial_credit, entry_point)
        except (RuntimeError, OSError) as exc:  # sandbox infrastructure failure: no verdict rather than a wrong one
            self._sandbox_failed(exc)
            self._warn(f"sandbox failure: {exc}", prefix="no verdict, reward None")
            return None
        with self._failures_lock:
            self._failures = 0
        if report.total == 0:
            return None
        return report.fraction if self.partial_credit else float(report.all_passed)

    def __call__(
        self, completions: Sequence[Any], tests: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        if tests is None:
            raise TypeError(f"{self.__name__} needs a `tests` dataset column")
        if len(tests) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(tests)} tests")
        entry = kwargs.get("entry_point") or [None] * len(completions)
        self._report_isolation(kwargs.get("trainer_state"), kwargs.get("log_metric"))  # probes before the threads
        # GRPO groups often contain identical completions: run each distinct (code, tests) pair once.
        keys = [
            (extract_code(_completion_text(c)), _freeze(t), e)
            for c, t, e in zip(completions, tests, entry, strict=True)
        ]
        first: dict[Any, int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        jobs = sorted(first.values())
        workers = max(1, min(self.max_workers or _default_workers(), len(jobs)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="code-reward") as pool:
            results = dict(
                zip(jobs, pool.map(lambda i: self.score(completions[i], tests[i], entry[i]), jobs), strict=True)
            )
        return [results[first[key]] for key in keys]

    def _sandbox_failed(self, error: Exception) -> None:
        """Count a run that gave no verdict; raise `SandboxUnavailable` once they form a streak."""
        with self._failures_lock:
            self._failures += 1
            streak = self._failures
        if streak < SANDBOX_FAILURE_LIMIT:
            return
        backend = _sandbox.resolve_backend(self.settings.isolation, warn=False)
        raise _sandbox.SandboxUnavailable(
            f"{self.__name__}: the code sandbox (backend {backend!r}) failed {streak} times in a row, so no "
            f"completion can be scored (training would go on with every advantage zero). Last failure: "
            f"{type(error).__name__}: {error}. Check what the sandbox needs: `unshare` (util-linux) and user "
            "namespaces for the namespace backends, room under the process limit (ulimit -u) and free space in "
            f"{tempfile.gettempdir()}; see docs/code-sandbox.md. isolation='rlimits' runs without namespaces "
            "(weaker isolation)."
        ) from error

    def _report_isolation(self, trainer_state: Any, log_metric: Any) -> None:
        """Resolve the backend; a fallback below namespaces is a metric every call and a warning per trainer start.

        TRL passes the trainer's ``TrainerState``, a new object at each ``train()``, so the warning comes back at
        every start instead of once per process (where it scrolls away with the first run's output).
        """
        notice = _sandbox.fallback_notice(self.settings.isolation)
        if log_metric is not None:
            log_metric(f"{self.__name__}/sandbox_fallback", 0.0 if notice is None else 1.0)
        if notice is not None and trainer_state is not self._noticed_for:
            self._noticed_for = trainer_state
            logger.warning("%s: %s", self.__name__, notice)

    def _warn(self, message: str, prefix: str = "unusable tests, reward None") -> None:
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(f"{self.__name__}: {prefix}: {message}", RuntimeWarning, stacklevel=3)


_NOT_YET = object()


def _freeze(tests: Any) -> Any:
    return tests if isinstance(tests, (str, bytes)) else json.dumps(tests, sort_keys=True, default=str)


def _default_workers() -> int:
    import os

    return max(1, len(os.sched_getaffinity(0)))


def make_code_reward(
    partial_credit: bool = False,
    timeout_s: float = 4.0,
    memory_mb: int = 1024,
    max_workers: int | None = None,
    *,
    float_tol: float | None = None,
    isolation: str = "auto",
    name: str | None = None,
    **limits: Any,
) -> CodeReward:
    """Build a TRL reward function that runs each completion's code against its row's ``tests``.

    ``partial_credit``: reward = fraction of tests passed (else 1.0 only when all pass; the run then stops at the
    first failing test). ``timeout_s``: wall time per test (CPU time is capped too). ``memory_mb``: address-space
    limit per process. ``max_workers``: sandboxes run in parallel (default: CPUs available). ``float_tol``: numeric
    tolerance for stdout tokens and call-based values. ``isolation``: "auto", "namespaces" or "rlimits". Other
    limits: ``file_mb``, ``max_procs``, ``output_bytes``, ``site_packages``.

    >>> reward = make_code_reward(partial_credit=True, timeout_s=2)
    >>> reward(["```python\\ndef add(a, b):\\n    return a + b\\n```"], tests=["assert add(1, 2) == 3"])
    [1.0]
    """
    settings = _make_settings(timeout_s, memory_mb, float_tol, isolation, dict(limits))
    label = name or ("code_reward_partial" if partial_credit else "code_reward")
    return CodeReward(partial_credit=partial_credit, max_workers=max_workers, settings=settings, name=label)


_DEFAULT = CodeReward(partial_credit=False, max_workers=None, settings=_Settings(), name="code_reward")


def code_reward(completions: Sequence[Any], tests: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the completion's code passes every test of its row, else 0.0 (None: row has no usable tests).

    >>> code_reward([[{"role": "assistant", "content": "```python\\nprint(int(input()) * 2)\\n```"}]],
    ...             tests=['{"inputs": ["21\\\\n"], "outputs": ["42\\\\n"]}'])
    [1.0]
    """
    return _DEFAULT(completions, tests, **kwargs)
