"""Verifier rewards for code: run unit tests on model-written Python in a sandbox it cannot escape or fool.

Public API (TRL reward signature, see docs/code-sandbox.md):

* :func:`code_reward` ``(completions, tests, **kwargs) -> list[float | None]``: 1.0 when every test passes, else 0.0;
  ``None`` for rows without usable tests (TRL then ignores this function for the row);
* ``code_reward_partial``: the same with partial credit (the fraction of tests passed);
* :func:`make_code_reward` returns a configured, picklable reward callable (partial credit, limits, workers);
* :func:`run_code_tests` returns per-test outcomes (``passed``/``failed``/``error``/``timeout``/``memory``/``skipped``);
* :func:`extract_code` is the code-block extraction the rewards use.

Test formats of the ``tests`` column (a JSON string of a dict is accepted too):

* assert-style Python: ``"assert add(1, 2) == 3\\nassert add(0, 0) == 0"`` (or a list of such strings; HumanEval's
  ``def check(candidate)`` with a ``check(fn)`` call or an ``entry_point`` column is inlined). Each top-level assert
  that uses the solution is one test; a test program whose asserts sit in loops or helpers is one all-or-nothing
  test (see :mod:`reward_funcs.code.asserts`);
* stdin/stdout: ``{"inputs": ["1 2\\n"], "outputs": ["3\\n"]}``;
* call-based: ``{"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]}`` (``inputs[i]`` is the argument list;
  a ``class Solution`` method of that name is used when there is no such function).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..inputs import completion_text, require_column
from . import sandbox
from .asserts import UnsupportedTests, plan_asserts
from .extract import extract_code
from .formats import parse_tests
from .runner import RunSettings, make_settings, run_parsed

# Consecutive sandbox failures (no verdict at all) after which a reward raises instead of returning None: one may be
# a transient hiccup, a streak means nothing can be scored, and every advantage would silently be zero.
SANDBOX_FAILURE_LIMIT = 3

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------------------
# TRL reward
# ----------------------------------------------------------------------------------------------------------------


class CodeReward:
    """Picklable TRL reward function (see :func:`make_code_reward`)."""

    columns = ("tests",)  # the dataset column it grades against

    def __init__(self, *, partial_credit: bool, max_workers: int | None, settings: RunSettings, name: str) -> None:
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
        # Rows scored None because the sandbox gave no verdict (it could not start, the machine ran out of something),
        # counted since this object was made (or unpickled in this process): see docs/code-sandbox.md.
        self.no_verdict_rows = 0

    def __repr__(self) -> str:
        return f"CodeReward(name={self.__name__!r}, partial_credit={self.partial_credit}, {self.settings})"

    def __getstate__(self) -> dict:
        process_state = ("_warned", "_failures", "_failures_lock", "_noticed_for", "no_verdict_rows")
        return {k: v for k, v in self.__dict__.items() if k not in process_state}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_process_state()

    def score(self, completion: Any, tests: Any, entry_point: str | None = None) -> float | None:
        """Reward of one completion: None when the tests are unusable or the sandbox gave no verdict, 0.0 without
        code."""
        return self._score(completion, tests, entry_point)[0]

    def _score(self, completion: Any, tests: Any, entry_point: str | None) -> tuple[float | None, bool]:
        """(reward, whether the sandbox failed to give a verdict): see `score`."""
        try:
            kind, spec = parse_tests(tests)
            if kind == "assert":
                plan_asserts(spec, entry_point)  # validate before running anything
        except UnsupportedTests as exc:
            self._warn(str(exc))
            return None, False
        code = extract_code(completion_text(completion, messages="all"))
        if code is None:
            return 0.0, False
        try:
            report = run_parsed(code, kind, spec, self.settings, not self.partial_credit, entry_point)
        except (RuntimeError, OSError, MemoryError) as exc:  # sandbox infrastructure failure: no verdict, not 0.0
            self._sandbox_failed(exc)
            self._warn(f"sandbox failure: {exc}", prefix="no verdict, reward None")
            return None, True
        with self._failures_lock:
            self._failures = 0
        if report.total == 0:
            return None, False
        return (report.fraction if self.partial_credit else float(report.all_passed)), False

    def __call__(
        self, completions: Sequence[Any], tests: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        if tests is None:  # TRL passes columns by name: no `tests` column, no keyword
            require_column(kwargs, self.columns, self.__name__, "the unit tests", option="tests_column")
        if len(tests) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(tests)} tests")
        entry = kwargs.get("entry_point") or [None] * len(completions)
        self._report_isolation(kwargs.get("trainer_state"), kwargs.get("log_metric"))  # probes before the threads
        # GRPO groups often contain identical completions: run each distinct (code, tests) pair once.
        keys = [
            (extract_code(completion_text(c, messages="all")), _freeze(t), e)
            for c, t, e in zip(completions, tests, entry, strict=True)
        ]
        first: dict[Any, int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        jobs = sorted(first.values())
        workers = max(1, min(self.max_workers or _default_workers(), len(jobs)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="code-reward") as pool:
            results = dict(
                zip(jobs, pool.map(lambda i: self._score(completions[i], tests[i], entry[i]), jobs), strict=True)
            )
        rows = [results[first[key]] for key in keys]
        no_verdict = sum(failed for _, failed in rows)
        self.no_verdict_rows += no_verdict
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            log_metric(f"{self.__name__}/no_verdict", float(no_verdict))
        return [value for value, _ in rows]

    def _sandbox_failed(self, error: Exception) -> None:
        """Count a run that gave no verdict; raise `SandboxUnavailable` once they form a streak."""
        with self._failures_lock:
            self._failures += 1
            streak = self._failures
        if streak < SANDBOX_FAILURE_LIMIT:
            return
        backend = sandbox.resolve_backend(self.settings.isolation, warn=False)
        raise sandbox.SandboxUnavailable(
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
        notice = sandbox.fallback_notice(self.settings.isolation)
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
    first failing test). ``timeout_s``: wall time per test in seconds (CPU time is capped too). ``memory_mb``:
    address-space limit per process in MiB. ``max_workers``: sandboxes run in parallel (default: CPUs available). ``float_tol``: numeric
    tolerance for stdout tokens and call-based values. ``isolation``: "auto", "namespaces" or "rlimits". Other
    limits: ``file_mb``, ``max_procs``, ``output_bytes``, ``site_packages``.

    >>> reward = make_code_reward(partial_credit=True, timeout_s=2)
    >>> reward(["```python\\ndef add(a, b):\\n    return a + b\\n```"], tests=["assert add(1, 2) == 3"])
    [1.0]
    """
    settings = make_settings(timeout_s, memory_mb, float_tol, isolation, dict(limits))
    label = name or ("code_reward_partial" if partial_credit else "code_reward")
    return CodeReward(partial_credit=partial_credit, max_workers=max_workers, settings=settings, name=label)


_DEFAULT = CodeReward(partial_credit=False, max_workers=None, settings=RunSettings(), name="code_reward")


def code_reward(completions: Sequence[Any], tests: Sequence[Any] | None = None, **kwargs: Any) -> list[float | None]:
    """1.0 when the completion's code passes every test of its row, else 0.0 (None: row has no usable tests).

    >>> code_reward([[{"role": "assistant", "content": "```python\\nprint(int(input()) * 2)\\n```"}]],
    ...             tests=['{"inputs": ["21\\\\n"], "outputs": ["42\\\\n"]}'])
    [1.0]
    """
    return _DEFAULT(completions, tests, **kwargs)


code_reward.columns = CodeReward.columns
# Like `code_reward`, but the reward is the fraction of the row's tests passed (the CLI's `code_reward_partial`).
code_reward_partial = make_code_reward(partial_credit=True)
